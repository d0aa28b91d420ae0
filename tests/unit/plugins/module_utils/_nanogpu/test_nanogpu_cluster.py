# SPDX-License-Identifier: GPL-3.0-or-later
"""nano_gpu_deploy's pure parts: the objects it renders (least-privilege RBAC, placement, the pinned images),
option checks before any API call, what it waits for, and the extenders entry it returns."""

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C, deployment, manifests

NS = "kube-system"


def params(**over):
    base = dict(namespace=NS, version=C.VERSION, scheduler_image=None, agent_image=None, image_pull_secrets=[],
                priority="binpack", scheduler_node_selector={}, scheduler_tolerations=[], agent_node_selector=None,
                agent_tolerations=None, agent_installer=True, extender_ignorable=False, state="present", wait=True,
                wait_timeout=300, expected={}, facts={}, node_names={})
    base.update(over)
    return base


def by_key(objects):
    return dict(("%s/%s" % (o["kind"], o["metadata"]["name"]), o) for o in objects)


def test_renders_the_extender_and_the_agent_with_the_pinned_images():
    objs = by_key(manifests.render(params()))
    assert sorted(objs) == sorted([
        "ServiceAccount/nano-gpu-scheduler", "ClusterRole/kube-system-nano-gpu-scheduler",
        "ClusterRoleBinding/kube-system-nano-gpu-scheduler", "Deployment/nano-gpu-scheduler",
        "Service/nano-gpu-scheduler", "ServiceAccount/nano-gpu-agent", "ClusterRole/kube-system-nano-gpu-agent",
        "ClusterRoleBinding/kube-system-nano-gpu-agent", "DaemonSet/nano-gpu-agent"])
    dep = objs["Deployment/nano-gpu-scheduler"]["spec"]
    assert dep["replicas"] == 1  # its state is in memory: one replica
    pod = dep["template"]["spec"]
    ctr = pod["containers"][0]
    assert ctr["image"] == "nanogpu/nano-gpu-scheduler:0.3.0"
    assert ctr["command"] == ["/usr/bin/nano-gpu-scheduler"] and ctr["args"] == ["--priority", "binpack"]
    assert ctr["env"] == [{"name": "PORT", "value": "39999"}]
    assert pod["serviceAccountName"] == "nano-gpu-scheduler" and "nodeSelector" not in pod
    svc = objs["Service/nano-gpu-scheduler"]["spec"]
    assert svc["ports"][0]["port"] == 39999 and svc["selector"] == dep["selector"]["matchLabels"]
    ds = objs["DaemonSet/nano-gpu-agent"]["spec"]["template"]["spec"]
    assert ds["hostNetwork"] is True
    assert ds["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert ds["containers"][0]["image"] == ds["initContainers"][0]["image"] == "nanogpu/nano-gpu-agent:0.3.0"
    assert ds["containers"][0]["command"][0] == "/usr/bin/nano-gpu-agent"
    assert ds["initContainers"][0]["command"] == ["/usr/bin/install.sh"]
    assert {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}} in ds["volumes"]


def test_rbac_is_least_privilege():
    objs = by_key(manifests.render(params()))
    rules = objs["ClusterRole/kube-system-nano-gpu-scheduler"]["rules"]
    granted = set((r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"])
    assert ("pods/binding", "create") in granted and ("pods", "update") in granted
    assert not any(r == "*" or v in ("delete", "deletecollection", "*") for r, v in granted)
    assert not any(r.startswith("nodes") and v in ("update", "patch") for r, v in granted)  # upstream's nodes/status
    assert all(rule["apiGroups"] == [""] for rule in rules)
    agent = objs["ClusterRole/kube-system-nano-gpu-agent"]["rules"]
    assert set(v for rule in agent for v in rule["verbs"]) <= {"get", "list", "watch"}
    binding = objs["ClusterRoleBinding/kube-system-nano-gpu-scheduler"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nano-gpu-scheduler", "namespace": NS}]
    assert binding["metadata"]["labels"]["kubegpu.cluster/namespace"] == NS


def test_superedge_placement_and_options():
    cloud = {"node-role.kubernetes.io/control-plane": ""}
    tol = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
    objs = by_key(manifests.render(params(scheduler_node_selector=cloud, scheduler_tolerations=tol, priority="spread",
                                          agent_installer=False, agent_node_selector={"gpu": "yes"},
                                          image_pull_secrets=["reg"], version="0.2.0")))
    pod = objs["Deployment/nano-gpu-scheduler"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == cloud and pod["tolerations"] == tol
    assert pod["containers"][0]["args"] == ["--priority", "spread"]
    assert pod["imagePullSecrets"] == [{"name": "reg"}]
    assert pod["containers"][0]["image"] == "nanogpu/nano-gpu-scheduler:0.2.0"
    agent = objs["DaemonSet/nano-gpu-agent"]["spec"]["template"]["spec"]
    assert "initContainers" not in agent and all(v["name"] != "host-root" for v in agent["volumes"])
    assert agent["nodeSelector"] == {"gpu": "yes"}


def test_expected_from_options_and_facts():
    assert deployment.expected_from(params(expected={"a": 400, "b": {C.RESOURCE_NAME: 100}})) == {
        "a": {C.RESOURCE_NAME: 400}, "b": {C.RESOURCE_NAME: 100}}
    facts = {"h1": {"count": 2}, "h2": {"count": 0}, "h3": None}
    assert deployment.expected_from(params(facts=facts, node_names={"h1": "node-1"})) == {"node-1": {C.RESOURCE_NAME: 200}}
    with pytest.raises(OptionError, match="100 per GPU"):
        deployment.expected_from(params(expected={"a": 150}))
    with pytest.raises(OptionError, match="whole number"):
        deployment.expected_from(params(expected={"a": "lots"}))


def _gpu(mig):
    return {"uuid": "GPU-x", "mig": {"capable": True, "current": mig, "devices": []}}


MIG_FACTS = {"all-mig": {"count": 2, "devices": [_gpu(True), _gpu(True)]},
             "some-mig": {"count": 2, "devices": [_gpu(True), _gpu(False)]},
             "no-mig": {"count": 1, "devices": [_gpu(False)]}}


def test_a_node_whose_gpus_are_all_in_mig_mode_is_left_out_and_the_agent_kept_off_it():
    options = params(facts=MIG_FACTS, node_names={"all-mig": "node-a100"})
    assert deployment.expected_from(options) == {"some-mig": {C.RESOURCE_NAME: 200}, "no-mig": {C.RESOURCE_NAME: 100}}
    left_out = deployment.mig_left_out(options)
    assert list(left_out) == ["node-a100"] and "all in MIG mode" in left_out["node-a100"]
    assert "mig_config all-disabled" in left_out["node-a100"]
    warnings = deployment.mig_warnings(options)
    assert len(warnings) == 1 and warnings[0].startswith("node some-mig: 1 of its 2 GPUs are in MIG mode")
    agent = by_key(manifests.render(options, exclude_nodes=sorted(left_out)))["DaemonSet/nano-gpu-agent"]
    terms = agent["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                                            "values": ["node-a100"]}]}]
    # without such a node the agent's spec has no affinity at all (what an upgrade from before this change keeps)
    plain = by_key(manifests.render(params(facts={"no-mig": MIG_FACTS["no-mig"]})))["DaemonSet/nano-gpu-agent"]
    assert "affinity" not in plain["spec"]["template"]["spec"]


@pytest.mark.parametrize("over, option", [
    ({"namespace": "Not_A_Namespace"}, "namespace"),
    ({"scheduler_node_selector": {"bad key!": "x"}}, "scheduler_node_selector"),
    ({"agent_tolerations": [{"key": "x", "operator": "Maybe"}]}, "agent_tolerations"),
    ({"priority": "random"}, "priority"),
])
def test_bad_options_fail_before_connecting(over, option):
    def factory(_params):
        raise AssertionError("connected before validating")
    with pytest.raises(OptionError) as info:
        deployment.run(params(**over), client_factory=factory)
    assert option in str(info.value)


def test_extender_entry_for_the_service():
    url, entry = deployment.extender_for({"spec": {"clusterIP": "10.96.0.42"}}, params())
    assert url == "http://10.96.0.42:39999/scheduler"
    assert entry == {"urlPrefix": url, "filterVerb": "filter", "prioritizeVerb": "priorities", "bindVerb": "bind",
                     "weight": 1, "nodeCacheCapable": True, "ignorable": False,
                     "managedResources": [{"name": "nano-gpu/gpu-percent", "ignoredByScheduler": False}]}
    assert deployment.extender_for({"spec": {"clusterIP": "fd00::5"}}, params())[0] == "http://[fd00::5]:39999/scheduler"
    assert deployment.extender_for(None, params()) == (None, None)


class FakeClient(object):
    def __init__(self):
        self.writes = []
        self.clock = lambda: 0

    def get(self, *args, **kwargs):
        return None

    def apply(self, obj, dry_run=False):
        self.writes.append((obj["kind"], dry_run))
        return "created", None, obj

    def list(self, *args, **kwargs):
        return []

    def wait(self, *args, **kwargs):
        raise AssertionError("no wait in check mode")


def test_check_mode_only_dry_runs_and_has_no_url_yet():
    client = FakeClient()
    result = deployment.run(params(namespace="nano"), check_mode=True, want_diff=True, client=client)
    assert result["changed"] is True
    # every write a dry run; objects in a namespace that is not there are not sent at all
    assert client.writes == [("Namespace", True), ("ClusterRole", True), ("ClusterRoleBinding", True),
                             ("ClusterRole", True), ("ClusterRoleBinding", True)]
    assert result["url_prefix"] is None and result["extender"] is None
    assert "Deployment/nano/nano-gpu-scheduler" in result["diff"]["after"]
