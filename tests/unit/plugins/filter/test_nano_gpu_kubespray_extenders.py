# SPDX-License-Identifier: GPL-3.0-or-later
"""The Kubespray value of nano-gpu's extender (filter nano_gpu_kubespray_extenders, _nanogpu/kubeadm.py): rendered
through the lines of Kubespray's template that write it, with Ansible's own to_nice_yaml (controller code, hence
here and not beside the module_utils tests, which ansible-test runs without ansible.plugins)."""

import json

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import to_nice_yaml
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import kubeadm
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry

URL = "http://10.96.0.50:39999/scheduler"


# --- Kubespray -----------------------------------------------------------------------------------------------------

# The lines of Kubespray's roles/kubernetes/control-plane/templates/kubescheduler-config.yaml.j2 that write the
# variable (kubernetes-sigs/kubespray): the list goes under `extenders:` through to_nice_yaml, as it is.
KUBESPRAY_TEMPLATE = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
{% if kube_scheduler_extenders %}
extenders:
{{ kube_scheduler_extenders | to_nice_yaml(indent=2, width=256) }}
{% endif %}
"""


def render_kubespray(value):
    env = jinja2.Environment()
    env.filters["to_nice_yaml"] = to_nice_yaml
    return yaml.safe_load(env.from_string(KUBESPRAY_TEMPLATE).render(kube_scheduler_extenders=value))


def test_kubespray_items_take_exactly_kube_schedulers_extender_keys():
    value = kubeadm.kubespray_extenders(URL, http_timeout="30s")
    assert len(value) == 1 and set(value[0]) <= set(C.EXTENDER_FIELDS)
    assert value[0] == extender_entry(URL, http_timeout="30s")  # the same entry as on a kubeadm control plane
    config = render_kubespray(value)
    assert config["extenders"] == value
    kubeadm.check_config(config, "kubescheduler-config.yaml")


def test_kubespray_keeps_the_inventorys_other_extenders():
    other = {"urlPrefix": "http://127.0.0.1:9001/tas", "filterVerb": "filter", "weight": 2}
    stale = extender_entry("http://old:39999/scheduler")
    value = kubeadm.kubespray_extenders(URL, existing=[stale, other])
    assert value == [extender_entry(URL), other]
    assert render_kubespray(value)["extenders"] == value
    with pytest.raises(OptionError, match="kube_scheduler_extenders: item 0 is not an extender"):
        kubeadm.kubespray_extenders(URL, existing=["http://x"])


def test_the_filter_is_the_same_function():
    from ansible_collections.kubegpu.cluster.plugins.filter.nano_gpu_kubespray_extenders import FilterModule
    rendered = FilterModule().filters()["nano_gpu_kubespray_extenders"](URL)
    assert json.dumps(rendered) == json.dumps(kubeadm.kubespray_extenders(URL))
