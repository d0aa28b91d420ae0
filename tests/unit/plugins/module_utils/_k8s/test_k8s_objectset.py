# SPDX-License-Identifier: GPL-3.0-or-later
"""ObjectSet.present when the API server goes away part way (found by the fault suite, tests/faults): the error names
what is half done, the objects applied before it and those not applied yet, and a rerun resumes."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import K8sError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.objectset import ObjectSet


class LosingClient(object):
    """Applies until ``lose_at`` applies were made, then fails as Client.apply does once its retries are spent."""

    def __init__(self, lose_at):
        self.lose_at = lose_at
        self.applied = []

    def get(self, api_version, kind, name, namespace=None):
        return None

    def apply(self, obj, dry_run=False):
        if len(self.applied) == self.lose_at:
            raise K8sError("cannot apply %s/%s: connection refused (6 errors in a row over 11.5s)"
                           % (obj["kind"], obj["metadata"]["name"]), object=obj["kind"])
        self.applied.append(obj["metadata"]["name"])
        return "created", None, obj

    def list(self, *args, **kwargs):
        return []


def _objects():
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "config", "namespace": "ns"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "ns"}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin", "namespace": "ns"}}]


def test_an_api_server_lost_part_way_names_what_is_half_done():
    objects = ObjectSet(LosingClient(lose_at=2), "ns", "app", kinds=[])  # the namespace and the ConfigMap go in
    with pytest.raises(K8sError) as err:
        objects.present(_objects())
    message = str(err.value)
    assert message.startswith("cannot apply ServiceAccount/sa: connection refused (6 errors in a row over 11.5s). "
                              "Half done: applied Namespace/ns, ConfigMap/ns/config; not applied yet: ServiceAccount/ns/sa, "
                              "DaemonSet/ns/plugin. What was applied stays; run it again once the API server answers"), message
    assert "\n" not in message
    assert err.value.details["applied"] == ["Namespace/ns", "ConfigMap/ns/config"]
    assert err.value.details["not_applied"] == ["ServiceAccount/ns/sa", "DaemonSet/ns/plugin"]


def test_nothing_applied_says_so():
    with pytest.raises(K8sError, match=r"^cannot apply Namespace/ns: .* Half done: nothing applied; not applied yet: "
                                       r"ConfigMap/ns/config, ServiceAccount/ns/sa, DaemonSet/ns/plugin\. "):
        ObjectSet(LosingClient(lose_at=0), "ns", "app", kinds=[]).present(_objects())
