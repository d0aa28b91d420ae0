# SPDX-License-Identifier: GPL-3.0-or-later
"""The nano-gpu extender stand-in's decisions (sandbox/nanogpu/dealer.py, as read in nano-gpu-scheduler), its wire
format, the devsim agent's rule, and the kube-scheduler config the sandbox writes."""

import json
import threading
import urllib.error
import urllib.request

import pytest

from sandbox.k8s.devsim import nanogpu as devsim_nanogpu
from sandbox.nanogpu import C, dealer, schedconf, server

R = C.RESOURCE_NAME


def node(name="n", gpus=4):
    return {"metadata": {"name": name}, "status": {"capacity": {R: str(gpus * 100)}}}


def pod(*shares, name="p", node_name=None, indexes=None, phase="Running"):
    meta = {"name": name, "namespace": "default"}
    if indexes is not None:
        meta["annotations"] = dict((C.ANNOTATION_CONTAINER % ("c%d" % i), str(x)) for i, x in enumerate(indexes))
        meta["annotations"][C.ASSUME_KEY] = "true"
        meta["labels"] = {C.ASSUME_KEY: "true"}
    return {"metadata": meta, "status": {"phase": phase},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "c%d" % i, "resources": {"limits": {R: str(s)}}} for i, s in enumerate(shares)]}}


def test_a_share_must_fit_in_one_gpu():
    assert dealer.choose([100, 100], [20]) == [0]
    with pytest.raises(dealer.NoFit, match=r"can't allocate   \(120\) on \(100\)\(100\): indexes=\[\]"):
        dealer.choose([100, 100], [120])
    assert dealer.choose([100, 100], [60, 60]) == [0, 1]  # two containers of 60: two GPUs
    with pytest.raises(dealer.NoFit):
        dealer.choose([100], [60, 60])
    assert dealer.choose([100], [0, 30]) == [-1, 0]  # a container without a share gets no GPU


def test_binpack_fills_the_fullest_gpu_that_fits_spread_the_emptiest():
    assert dealer.choose([100, 30, 80], [20]) == [1]
    assert dealer.choose([100, 10, 80], [20]) == [2]
    assert dealer.choose([100, 30, 80], [20], "spread") == [0]
    assert dealer.choose([50, 100], [30, 60]) == [1, 1]  # the largest share first: 60 on GPU 1, then 30 on the fuller


def test_used_shares_come_from_assumed_pods_on_the_node():
    pods = [pod(20, node_name="n", indexes=[0]), pod(50, node_name="n", indexes=[2]),
            pod(30, node_name="other", indexes=[0]), pod(40, node_name="n"),  # not assumed: not counted
            pod(90, node_name="n", indexes=[1], phase="Succeeded")]  # finished: released
    assert dealer.free_percent(node(gpus=3), pods) == [80, 100, 50]


def test_scores_as_upstream_rates():
    assert dealer.score([100, 100, 100, 100]) == -4  # binpack: usage 0 - 4 GPUs
    assert dealer.score([50, 100]) == 25 - 2
    assert dealer.score([50, 100], "spread") == 100 + 15 - 2
    assert dealer.score([]) == 0


def test_filter_priorities_and_bind_annotations():
    nodes = {"a": node("a", 1), "b": node("b", 2)}
    used = [pod(90, node_name="a", indexes=[0])]
    result = dealer.filter_nodes(pod(20), ["a", "b", "gone"], nodes, used)
    assert result["NodeNames"] == ["b"] and result["Error"] == ""
    assert result["FailedNodes"]["a"] == "can't allocate   (20) on (10): indexes=[]"
    assert "not found" in result["FailedNodes"]["gone"]
    assert dealer.prioritize(pod(20), ["a", "b"], nodes, used) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": -2}]
    bound = dealer.bound_pod(pod(20, 0), [1, -1])
    assert bound["metadata"]["annotations"] == {"nano-gpu/container-c0": "1", "nano-gpu/container-c1": "-1",
                                                "nano-gpu/assume": "true"}
    assert bound["metadata"]["labels"] == {"nano-gpu/assume": "true"}


def test_wire_format_is_case_insensitive_like_go():
    assert server.field({"nodenames": ["x"]}, "NodeNames") == ["x"]
    assert server.field({"PodUID": "u"}, "PodUID") == "u"
    extender_pod = {"spec": {"containers": [{"image": "nanogpu/nano-gpu-scheduler:0.3.0",
                                             "command": ["/usr/bin/nano-gpu-scheduler"], "args": ["--priority", "spread"]}]}}
    container = server.extender_container(extender_pod)
    assert container is not None and server.priority_of(container) == "spread"
    assert server.extender_container({"spec": {"containers": [{"image": "busybox"}]}}) is None


class FakeExtender(object):
    def filter(self, args):
        return {"NodeNames": list(args["NodeNames"]), "FailedNodes": {}, "Error": ""}

    def priorities(self, args):
        return [{"Host": n, "Score": 1} for n in args["NodeNames"]]

    def bind(self, args):
        return "" if args["Node"] == "ok" else "assume (20) on (10) failed"


def test_http_routes():
    stop = threading.Event()
    ready = threading.Event()
    port = __import__("socket").socket()
    port.bind(("127.0.0.1", 0))
    number = port.getsockname()[1]
    port.close()
    original = server.Extender
    server.Extender = lambda _api: FakeExtender()
    thread = threading.Thread(target=server.serve, args=(None, number), kwargs={"ready": ready.set, "stop": stop}, daemon=True)
    try:
        thread.start()
        assert ready.wait(10)
    finally:
        server.Extender = original

    def post(verb, body):
        req = urllib.request.Request("http://127.0.0.1:%d/scheduler/%s" % (number, verb), json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/version" % number, timeout=5) as resp:
            assert resp.read() == b"0.1.0"
        assert post("filter", {"Pod": {}, "NodeNames": ["x"]}) == (200, {"NodeNames": ["x"], "FailedNodes": {}, "Error": ""})
        assert post("priorities", {"Pod": {}, "NodeNames": ["x"]}) == (200, [{"Host": "x", "Score": 1}])
        assert post("bind", {"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "ok"}) == (200, {"Error": ""})
        assert post("bind", {"Node": "full"}) == (500, {"Error": "assume (20) on (10) failed"})
    finally:
        stop.set()
        thread.join(10)


def test_devsim_agent_rule():
    profile = {"devices": [{}, {}, {}, {}]}
    assert devsim_nanogpu.advertised(profile, True) == 400
    assert devsim_nanogpu.advertised(profile, False) is None
    assert devsim_nanogpu.advertised({"vendor": "amd", "devices": [{}]}, True) is None  # NVML sees no AMD GPU
    assert devsim_nanogpu.advertised(None, True) is None
    agent = {"spec": {"containers": [{"image": "nanogpu/nano-gpu-agent:0.3.0", "command": ["/usr/bin/nano-gpu-agent"]}]}}
    assert devsim_nanogpu.agent_container(agent) is not None
    assert devsim_nanogpu.agent_container({"spec": {"containers": [{"image": "x", "command": ["nano-gpu-agent"]}]}}) is None


def test_scheduler_config_uses_the_collections_entry(tmp_path):
    path = schedconf.write(tmp_path / "s.yaml", "/k/kubeconfig", 4321)
    import yaml  # pylint: disable=import-outside-toplevel
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "kubescheduler.config.k8s.io/v1" and doc["kind"] == "KubeSchedulerConfiguration"
    assert doc["clientConnection"]["kubeconfig"] == "/k/kubeconfig"
    (entry,) = doc["extenders"]
    assert entry["urlPrefix"] == "http://127.0.0.1:4321/scheduler"
    assert entry["nodeCacheCapable"] is True and entry["bindVerb"] == "bind"
    assert entry["managedResources"] == [{"name": R, "ignoredByScheduler": False}]
