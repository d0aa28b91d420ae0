# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``gpu_fleet_audit``: one paged LIST of the nodes and one LIST of NVIDIA's DRA ResourceSlices (where the
cluster serves the API), from which come what each node advertises, its labels,
its kernel and its last proof record; the device plugin stage's labels judged on that list by
:func:`.._k8s.node_labels.run` in check mode (the same rules and field manager, no request of its own); then
:func:`.report.build`. Nothing is written."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.kubegpu.cluster.plugins.module_utils._audit import report
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import client as k8s_client, node_labels
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.labels import node_rules
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.proof import read_record
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.dra.migration import list_slices, served_resource_version


class Listed(object):
    """A labeller that has listed the nodes already: :func:`.._k8s.node_labels.run` in check mode reads them from it and
    writes nothing (it has no ``apply`` nor ``release``)."""

    def __init__(self, nodes, field_manager=node_labels.FIELD_MANAGER):
        self.nodes = nodes
        self.field_manager = field_manager

    def list_nodes(self):
        return self.nodes


def labels_plans(params, found):
    """``({node name: its entry of the labels run in check mode}, warning or None)`` for the hosts with a ``gpu`` fact
    whose node is in ``found``."""
    names = params.get("node_names") or {}
    facts = dict((host, read["gpu"]) for host, read in (params.get("hosts") or {}).items()
                 if (read or {}).get("gpu") is not None and (names.get(host) or host) in found)
    if not facts:
        return {}, None
    try:
        labels_for, soft, releases = node_rules(params)
        result = node_labels.run(dict(params, nodes=facts, state="present", missing_nodes="skip"), Listed(found),
                                 labels_for, check_mode=True, soft=soft, releases=releases)
    except KubegpuError as exc:
        return {}, "the node labels were not judged: %s" % exc
    return result["nodes"], None


def dra_slices(api):
    """The ResourceSlices of NVIDIA's DRA driver (one LIST), or None where the cluster serves no resource.k8s.io API."""
    version = served_resource_version(api)
    if version is None:
        return None
    return list_slices(api, version)


def run(params, labeller=None, now=None, slices=None):
    """The module's work; ``labeller``: a :class:`.._k8s.node_labels.NodeLabeller` (made from the options when None);
    ``slices``: the DRA driver's ResourceSlices (read from the cluster when the labeller is made here)."""
    if labeller is None:
        api = k8s_client.from_params(params)
        labeller = node_labels.NodeLabeller(api.core, retries=params.get("retries") or 4)
        slices = dra_slices(api)
    found = labeller.list_nodes()
    plans, warning = labels_plans(params, found) if params.get("labels", True) else ({}, None)
    records = dict((name, read_record(node)) for name, node in found.items() if read_record(node))
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    built = report.build(params["hosts"], found, plans, records, node_names=params.get("node_names"),
                         accelerator_label=params.get("accelerator_label"), generated_at=when, slices=slices)
    result = {"changed": False, "report": built, "table": report.table(built), "summary": built["summary"]}
    if warning:
        result["warnings"] = [warning]
    return result
