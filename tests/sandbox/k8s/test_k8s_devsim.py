# SPDX-License-Identifier: GPL-3.0-or-later
"""The device-manager simulator, through the API: a running device plugin pod makes its node
advertise exactly what the real plugin would (REFERENCE.md section 1), and nothing once it is gone.

All cases run at once: one kwok node, ConfigMap and plugin DaemonSet per case, then each test
waits (watch, bounded) for its node's verdict.
"""


import pytest

from k8s_helpers import (
    fixture_profile, gpu_pod, gpu_resources, mps_daemon_daemonset, plugin_daemonset, plugin_nodes, wait_for,
)

STATE = "sandbox.kubegpu.io/device-plugin"


def ts(replicas, name="nvidia.com/gpu", extra=""):
    return "version: v1\n%ssharing:\n  timeSlicing:\n    resources:\n    - name: %s\n      replicas: %d\n" % (extra, name, replicas)


MPS = "version: v1\nflags:\n  mpsRoot: /run/nvidia/mps\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n"

# The fixture a100x8-mig-mixed has MIG on GPUs 0-2 (7x1g.10gb | 3g.40gb, 2g.20gb, 1g.10gb |
# 1g.10gb, 1g.10gb+me, 2g.20gb, 3g.40gb) and MIG off on GPUs 3-7.
MIXED_COUNTS = {"nvidia.com/gpu": 5, "nvidia.com/mig-1g.10gb": 9, "nvidia.com/mig-2g.20gb": 2,
                "nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb.me": 1}

# id: (profile, config file or None, env, args, expected {resource: count} or "fails: <text>")
CASES = {
    "v100x4-defaults": ("test-v100x4", None, {}, None, {"nvidia.com/gpu": 4}),
    "v100x4-timeslicing-5": ("test-v100x4", ts(5), {}, None, {"nvidia.com/gpu": 20}),
    "v100x4-rename-by-default": ("test-v100x4", ts(5).replace("timeSlicing:", "timeSlicing:\n    renameByDefault: true"), {}, None,
                                 {"nvidia.com/gpu.shared": 20}),
    "v100x4-custom-rename-ignored": ("test-v100x4", ts(5).replace("replicas: 5", "replicas: 5\n      rename: my-gpu"), {}, None,
                                     {"nvidia.com/gpu": 20}),
    "v100x4-fail-requests-gt-one": ("test-v100x4", ts(2).replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true"), {}, None,
                                    {"nvidia.com/gpu": 8}),
    "v100x4-mps-3": ("test-v100x4", MPS, {}, None, {"nvidia.com/gpu": 12}),
    "v100x4-mps-without-root": ("test-v100x4", MPS.replace("flags:\n  mpsRoot: /run/nvidia/mps\n", ""), {}, None, "fails: MPS root"),
    "v100x4-replicas-1": ("test-v100x4", ts(1), {}, None, "fails: number of replicas must be >= 2"),
    "v100x4-bad-version": ("test-v100x4", "version: v2\n", {}, None, "fails: unknown version"),
    "t4-timeslicing-10": ("test-t4", ts(10), {}, None, {"nvidia.com/gpu": 10}),
    "a100-mig-none": ("test-a100x8-mig-mixed", None, {}, None, {"nvidia.com/gpu": 8}),
    "a100-mig-mixed-env": ("test-a100x8-mig-mixed", None, {"MIG_STRATEGY": "mixed"}, None, MIXED_COUNTS),
    "a100-mig-mixed-env-overrides-file": ("test-a100x8-mig-mixed", "version: v1\nflags:\n  migStrategy: none\n", {"MIG_STRATEGY": "mixed"}, None,
                                          MIXED_COUNTS),
    "a100-mig-cli-overrides-env": ("test-a100x8-mig-mixed", None, {"MIG_STRATEGY": "single"}, ["--mig-strategy=mixed"], MIXED_COUNTS),
    "a100-mig-mixed-share-1g": ("test-a100x8-mig-mixed",
                                ts(2, "nvidia.com/mig-1g.10gb", "flags:\n  migStrategy: mixed\n").replace(
                                    "timeSlicing:", "timeSlicing:\n    renameByDefault: true"), {}, None,
                                dict(MIXED_COUNTS, **{"nvidia.com/mig-1g.10gb.shared": 18, "nvidia.com/mig-1g.10gb": 0})),
    "a100-mig-single-on-mixed-layout": ("test-a100x8-mig-mixed", None, {"MIG_STRATEGY": "single"}, None, "fails: MIG"),
    "a100-mig-mixed-with-mps": ("test-a100x8-mig-mixed", MPS, {"MIG_STRATEGY": "mixed"}, None, "fails: not supported with MPS"),
    "a100x2-mig-single": ("test-a100x2-mig-single", "version: v1\nflags:\n  migStrategy: single\n", {}, None, {"nvidia.com/gpu": 14}),
    "a100x2-mig-single-timeslicing-2": ("test-a100x2-mig-single", ts(2, extra="flags:\n  migStrategy: single\n"), {}, None,
                                        {"nvidia.com/gpu": 28}),
    "a100x2-mig-single-mps": ("test-a100x2-mig-single", MPS.replace("  mpsRoot:", "  migStrategy: single\n  mpsRoot:"), {}, None,
                              "fails: MPS is not supported for MIG devices"),
    # single refuses a GPU with MIG on and no MIG devices; mixed only warns (k8s-device-plugin PR #806)
    "a100-mig-on-no-instances": ("test-a100-mig-empty", None, {"MIG_STRATEGY": "single"}, None,
                                 "fails: device 0 has no MIG devices configured"),
    "cpu-node": (None, ts(5), {}, None, "no GPU"),
}


def _expected(spec):
    return {k: v for k, v in spec.items() if v}


@pytest.fixture(scope="module", name="plugin_nodes")
def plugin_nodes_fixture(sandbox):
    """Create every case at once; yield {case id: node name}; clean up."""
    cases = dict((case, (fixture_profile(spec[0]) if spec[0] else None,) + tuple(spec[1:4])) for case, spec in CASES.items())
    with plugin_nodes(sandbox, "devsim", cases) as made:
        yield made


def _verdict(node):
    return (node.metadata.annotations or {}).get(STATE, "")


@pytest.mark.parametrize("case", list(CASES))
def test_advertised_resources(sandbox, plugin_nodes, case):
    expected = CASES[case][4]
    name = plugin_nodes[case]
    if isinstance(expected, dict):
        want = _expected(expected)
        node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, timeout=45,
                        predicate=lambda n: gpu_resources(n) == (want, want), describe="%s to advertise %s" % (name, want))
        assert _verdict(node).startswith("advertising")
    else:
        node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, timeout=45,
                        predicate=lambda n: expected.replace("fails: ", "") in _verdict(n), describe="%s verdict %r" % (name, expected))
        assert gpu_resources(node) == ({}, {})


def test_resources_go_away_with_the_plugin_pod(sandbox, namespace, test_nodes):
    name = test_nodes(1, fixture_profile("test-v100x4"))[0]
    sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"config.yaml": ts(5)}})
    sandbox.apps.create_namespaced_daemon_set(namespace, plugin_daemonset("dp", {"kubernetes.io/hostname": name}, configmap="cfg"))
    wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name,
             predicate=lambda n: gpu_resources(n) == ({"nvidia.com/gpu": 20}, {"nvidia.com/gpu": 20}), describe="20 GPUs")
    sandbox.apps.delete_namespaced_daemon_set("dp", namespace)
    node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: gpu_resources(n) == ({}, {}),
                    describe="GPUs gone from " + name)
    assert _verdict(node) == "no device plugin pod running"


def test_config_created_after_the_pod_is_picked_up(sandbox, namespace, test_nodes):
    name = test_nodes(1, fixture_profile("test-v100x4"))[0]
    sandbox.apps.create_namespaced_daemon_set(namespace, plugin_daemonset("dp", {"kubernetes.io/hostname": name}, configmap="late"))
    wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: "not found" in _verdict(n),
             describe="missing config reported")
    assert gpu_resources(sandbox.core.read_node(name)) == ({}, {})
    sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": "late"}, "data": {"config.yaml": ts(3)}})
    wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name,
             predicate=lambda n: gpu_resources(n) == ({"nvidia.com/gpu": 12}, {"nvidia.com/gpu": 12}), describe="12 GPUs")


def test_gpu_feature_discovery_pod_is_not_a_plugin(sandbox, namespace, test_nodes):
    name = test_nodes(1, fixture_profile("test-t4"))[0]
    gfd = plugin_daemonset("gfd", {"kubernetes.io/hostname": name})
    gfd["spec"]["template"]["spec"]["containers"][0]["command"] = ["gpu-feature-discovery"]
    sandbox.apps.create_namespaced_daemon_set(namespace, gfd)
    wait_for(sandbox.core.list_namespaced_pod, namespace, predicate=lambda p: p.status.phase == "Running", describe="gfd pod running")
    sandbox.apps.create_namespaced_daemon_set(namespace, plugin_daemonset("dp", {"kubernetes.io/hostname": name}, env={"MIG_STRATEGY": "none"}))
    node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: gpu_resources(n)[0],
                    describe="GPUs advertised")
    assert gpu_resources(node) == ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1})
    sandbox.apps.delete_namespaced_daemon_set("dp", namespace)
    node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: not gpu_resources(n)[0],
                    describe="GPUs gone although the GFD pod still runs")


@pytest.mark.parametrize("config", [
    ts(4).replace("timeSlicing:", "timeSlicing:\n    failRequestsGreaterThanOne: true"),
    MPS,
])
def test_fail_requests_greater_than_one_rejects_pods_at_admission(sandbox, namespace, test_nodes, config):
    name = test_nodes(1, fixture_profile("test-t4"))[0]
    sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": "cfg"}, "data": {"config.yaml": config}})
    sandbox.apps.create_namespaced_daemon_set(namespace, plugin_daemonset("dp", {"kubernetes.io/hostname": name}, configmap="cfg"))
    if "mps:" in config:
        sandbox.apps.create_namespaced_daemon_set(namespace, mps_daemon_daemonset("mps", {"kubernetes.io/hostname": name}))
    wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, predicate=lambda n: gpu_resources(n)[1].get("nvidia.com/gpu"),
             describe="shared GPUs advertised")
    for pod_name, gpus in (("one", 1), ("two", 2)):
        sandbox.core.create_namespaced_pod(namespace, gpu_pod(pod_name, gpus, node_selector={"kubernetes.io/hostname": name}))
    one = wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=one",
                   predicate=lambda p: p.status.phase in ("Succeeded", "Failed"), describe="pod one to finish")
    two = wait_for(sandbox.core.list_namespaced_pod, namespace, field_selector="metadata.name=two",
                   predicate=lambda p: p.status.phase in ("Succeeded", "Failed"), describe="pod two to finish")
    assert one.status.phase == "Succeeded"
    assert (two.status.phase, two.status.reason) == ("Failed", "UnexpectedAdmissionError")
    assert "maximum request size for shared resources is 1; found 2" in two.status.message
    assert two.spec.node_name == name


def test_unhealthy_gpus_stay_in_capacity_and_leave_allocatable(sandbox):
    """The profile failure-xid-79 (two T4s, the second raising XID 79): the plugin's health check marks that GPU's
    device unhealthy, so the node's capacity keeps it and its allocatable does not; DP_DISABLE_HEALTHCHECKS (the
    plugin pod's environment) can ignore the XID; with time-slicing one replica of the GPU goes (v0.20.0)."""
    import os  # pylint: disable=import-outside-toplevel
    profile = os.path.join(os.path.dirname(fixture_profile("test-v100x4")), "..", "..", "..", "sandbox", "profiles",
                           "failure-xid-79.json")
    cases = {"default": (profile, None, {}, None), "ignored": (profile, None, {"DP_DISABLE_HEALTHCHECKS": "79"}, None),
             "time-slicing": (profile, ts(4), {}, None)}
    want = {"default": ({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 1}),
            "ignored": ({"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}),
            "time-slicing": ({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 7})}
    with plugin_nodes(sandbox, "devsim-xid", cases) as made:
        for case, name in made.items():
            node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, timeout=45,
                            predicate=lambda n, c=case: gpu_resources(n) == want[c],
                            describe="%s to advertise %s" % (name, want[case]))
            assert ("unhealthy" in _verdict(node)) == (case != "ignored"), _verdict(node)
