# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet audit's report and table (module_utils/_audit/report.py) and its cluster read on a listed set of nodes
(_audit/fleet.py with a stand-in labeller): drift worded from the bring-up's own decisions, broken hosts reported."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._audit import fleet, report
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.proof import ANNOTATION_LAST_PROOF

NVIDIA = {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}
DAEMON_JSON = "/etc/docker/daemon.json"


def gpu_fact(count=2, name="NVIDIA A100-SXM4-80GB", mib=81920, driver="550.54.15", nouveau=False, mig=None):
    devices = [{"index": i, "name": name, "memory_total_mib": mib, "healthy": True, "uuid": "GPU-%d" % i,
                "product_slug": "x", "mig": mig or {"capable": False, "current": False, "pending": False,
                                                    "profiles": [], "devices": []}} for i in range(count)]
    return {"present": count > 0, "count": count, "devices": devices, "driver_version": driver,
            "cuda_driver_version": "12.4", "nvml": {"status": "ok", "message": None}, "pci": [],
            "kernel_modules": {"nvidia": True, "nouveau": nouveau}}


def toolkit(docker_default="nvidia", docker_changed=False, containerd_default="nvidia", missing=()):
    docker = {"ok": True, "default_runtime": docker_default, "runtimes": {"nvidia": NVIDIA, "runc": {"path": "runc"}}}
    containerd = {"ok": True, "default_runtime": containerd_default, "runtimes": {"nvidia": NVIDIA, "runc": {}}}
    facts = {
        "runtimes": {"docker": {"version": "20.10.24", "reports": docker},
                     "containerd": {"version": "1.6.20", "reports": containerd}},
        "plans": {"docker": {"changed": docker_changed, "files": [DAEMON_JSON] if docker_changed else [],
                             "config_path": DAEMON_JSON, "error": None},
                  "containerd": {"changed": False, "files": [], "config_path": "/etc/containerd/config.toml",
                                 "error": None}}}
    # runtime_decisions' result for these facts (module_utils tests run without the controller's filter plugins)
    docker_as_asked = docker_default == "nvidia"
    checks = {"docker": {"ours": NVIDIA, "as_asked": docker_as_asked, "ok": docker_as_asked},
              "containerd": {"ours": NVIDIA, "as_asked": containerd_default == "nvidia",
                             "ok": containerd_default == "nvidia"}}
    decided = {"checks": checks,
               "to_configure": [r for r in ("docker", "containerd")
                                if facts["plans"][r]["changed"] or not checks[r]["as_asked"]],
               "unverified": [r for r in ("docker", "containerd") if not checks[r]["ok"]],
               "verified": {}}
    return {"runtimes": facts["runtimes"], "plans": facts["plans"], "selected": ["docker", "containerd"],
            "decided": decided, "install": {"needed": bool(missing), "missing": list(missing), "repository_ok": True},
            "runtime_name": "nvidia", "runtime_path": NVIDIA["path"], "set_as_default": True}


def read(**kwargs):
    out = {"reachable": True, "errors": [], "gpu": gpu_fact(), "python_unmet": [],
           "driver_verdict": {"status": "ok", "summary": "driver 550.54.15", "problems": []}, "toolkit": toolkit()}
    out.update(kwargs)
    return out


def node(name, labels=None, allocatable=None, record=None, kernel="6.1.0-18-amd64"):
    annotations = {ANNOTATION_LAST_PROOF: json.dumps(record)} if record else {}
    return {"metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **(labels or {})),
                         "annotations": annotations},
            "spec": {}, "status": {"nodeInfo": {"kernelVersion": kernel},
                                   "capacity": dict({"cpu": "8"}, **(allocatable or {})),
                                   "allocatable": dict({"cpu": "8"}, **(allocatable or {}))}}


def test_a_node_as_the_bring_up_left_it_is_ok():
    labels = {"nvidia.com/gpu.present": "true", "other": "x"}
    entry = report.node_report("kg-a", read(), node("kg-a", labels, {"nvidia.com/gpu": "2"}))
    assert entry["state"] == "ok" and entry["drift"] == [] and entry["problems"] == []
    assert entry["gpus"]["models"] == [{"name": "NVIDIA A100-SXM4-80GB", "count": 2, "memory_total_mib": 81920}]
    assert entry["runtimes"]["docker"]["default_runtime"] == "nvidia"
    assert entry["advertised"]["allocatable"] == {"nvidia.com/gpu": "2"}  # cpu left out
    assert entry["labels"] == {"nvidia.com/gpu.present": "true"}
    assert entry["kernel"] == "6.1.0-18-amd64" and entry["nouveau"] is False


def test_a_hand_edited_daemon_json_is_drift_naming_the_file_and_the_default():
    entry = report.node_report("kg-a", read(toolkit=toolkit(docker_default="runc", docker_changed=True)), node("kg-a"))
    assert entry["state"] == "drift"
    assert [(d["stage"], d["subject"]) for d in entry["drift"]] == [("container_toolkit", "docker")]
    reason = entry["drift"][0]["reason"]
    assert "would change " + DAEMON_JSON in reason and "default runtime is runc, not nvidia" in reason


def test_a_file_that_would_change_while_the_daemon_is_as_asked_is_drift_too():
    entry = report.node_report("kg-a", read(toolkit=toolkit(docker_changed=True)), node("kg-a"))
    assert entry["drift"][0]["reason"] == "would change " + DAEMON_JSON


def test_packages_the_toolkit_would_install_and_the_virtualenv_are_drift():
    entry = report.node_report("kg-a", read(toolkit=toolkit(missing=["nvidia-container-toolkit"]),
                                            python_unmet=["nvidia-ml-py==12.570.86"]), node("kg-a"))
    assert [d["stage"] for d in entry["drift"]] == ["container_toolkit", "python_env"]
    assert "install nvidia-container-toolkit" in entry["drift"][0]["reason"]


def test_no_toolkit_drift_where_the_bring_up_skips_the_stage_and_no_nvml_problem_without_a_gpu():
    fact = dict(gpu_fact(count=0), nvml={"status": "library_not_found", "message": "not installed"})
    stage = dict(toolkit(docker_default="runc", docker_changed=True, missing=["nvidia-container-toolkit"]), applies=False)
    entry = report.node_report("kg-cpu", read(gpu=fact, toolkit=stage, driver_verdict={"status": "skipped"}),
                               node("kg-cpu"))
    assert (entry["state"], entry["drift"], entry["problems"]) == ("ok", [], [])
    assert entry["runtimes"]["docker"]["default_runtime"] == "runc"
    assert report.row(entry)[report.COLUMNS.index("GPUS")] == "none"
    unread = report.node_report("kg-x", read(gpu=dict(fact, pci=[{"address": "0000:01:00.0"}])), node("kg-x"))
    assert report.row(unread)[report.COLUMNS.index("GPUS")] == "1 on the PCI bus, unread"


def test_label_drift_from_the_labels_plan():
    plan = {"status": "changed", "labels_set": {"nvidia.com/gpu.count": "2"}, "labels_removed": ["nvidia.com/old"]}
    entry = report.node_report("kg-a", read(), node("kg-a"), labels_plan=plan)
    assert entry["drift"] == [{"stage": "device_plugin", "subject": "node labels",
                               "reason": "would set nvidia.com/gpu.count=2 and remove nvidia.com/old"}]
    assert report.labels_drift({"status": "unchanged"}) == []


@pytest.mark.parametrize("given, state, words", [
    ({"reachable": False, "errors": ["gpu_facts: ssh: connection refused"]}, "unreachable", "connection refused"),
    ({"errors": ["container_runtime_facts: boom"], "toolkit": None}, "error", "boom"),
    ({"gpu": dict(gpu_fact(), nvml={"status": "error", "message": "Driver/library version mismatch"})},
     "problem", "NVML error: Driver/library version mismatch"),
    ({"gpu": gpu_fact(nouveau=True), "driver_verdict": {"status": "failed", "problems": ["nouveau is loaded"]}},
     "problem", "nouveau is loaded"),
])
def test_broken_hosts_are_reported_not_raised(given, state, words):
    built = report.build({"kg-a": read(**given)}, {"kg-a": node("kg-a")}, {}, {})
    entry = built["nodes"][0]
    assert entry["state"] == state
    assert words in report.table(built)
    assert built["summary"][state] == 1


def test_a_host_without_a_node_is_a_problem_naming_the_mapping():
    entry = report.node_report("md-a", read(), None, node_name="md-a")
    assert entry["state"] == "problem" and "kubegpu_node_name" in entry["problems"][0]
    assert entry["in_cluster"] is False and entry["kernel"] is None


def test_mig_layout_and_state():
    mig = {"capable": True, "current": True, "pending": True, "profiles": [],
           "devices": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}, {"profile": "2g.20gb"}]}
    entry = report.node_report("kg-a", read(gpu=gpu_fact(count=1, mig=mig)),
                               node("kg-a", {"nvidia.com/mig.config.state": "success"}))
    assert entry["mig"] == {"gpus": [{"index": 0, "enabled": True, "pending": True,
                                      "devices": {"1g.10gb": 2, "2g.20gb": 1}}], "config_state": "success"}
    assert report.row(entry)[report.COLUMNS.index("MIG")] == "1/1 on (success)"


def test_the_last_proof_and_a_stale_one():
    record = {"passed_at": "2026-11-26T03:00:00Z", "job": "gpu-proof-kg-a", "resource": "nvidia.com/gpu",
              "detail": "Test PASSED", "under": {"driver_version": "535.00.00", "runtime": "nvidia"}}
    entry = report.node_report("kg-a", read(), node("kg-a"), record=record)
    assert entry["proof"]["passed_at"] == record["passed_at"]
    assert entry["proof"]["stale"] == "proved under driver 535.00.00, the host has 550.54.15 now"
    assert entry["state"] == "problem"


def test_the_table_has_a_row_per_host_and_a_line_per_drift():
    built = report.build({"kg-b": read(toolkit=toolkit(docker_default="runc", docker_changed=True)), "kg-a": read(),
                          "kg-c": {"reachable": False, "errors": ["unreachable"]}},
                         {"kg-a": node("kg-a"), "kg-b": node("kg-b")}, {}, {})
    text = report.table(built)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["NODE", "STATE"]
    assert [line.split()[0] for line in lines[1:4]] == ["kg-a", "kg-b", "kg-c"]
    assert [line.split()[1] for line in lines[1:4]] == ["ok", "drift", "unreachable"]
    drift_lines = [line for line in lines if ": drift: " in line]
    assert len(drift_lines) == 1 and drift_lines[0].startswith("kg-b: drift: container_toolkit/docker: would change " + DAEMON_JSON)
    assert lines[-1] == "3 node(s): 1 ok, 1 drift, 1 unreachable"
    assert built["summary"]["drifted"] == ["kg-b"]
    # every row has the header's number of columns
    assert all(len(report.row(e)) == len(report.COLUMNS) for e in built["nodes"])
    json.dumps(built)  # JSON-ready


def test_an_empty_inventory():
    built = report.build({}, {}, {}, {})
    assert report.table(built).splitlines()[-1] == "no GPU host in the inventory"


class Labeller(object):
    field_manager = "kubegpu.cluster/labels"

    def __init__(self, nodes):
        self.nodes = nodes
        self.lists = 0

    def list_nodes(self):
        self.lists += 1
        return self.nodes


def test_fleet_reads_the_cluster_once_and_judges_the_labels_without_writing():
    labeller = Labeller({"kg-a": node("kg-a"), "kg-b": node("kg-b")})
    params = {"hosts": {"md-a": read(), "kg-b": read(gpu=None, errors=["gpu_facts: failed"])},
              "node_names": {"md-a": "kg-a"}, "labels": True, "accelerator_label": "accelerator", "gfd": False,
              "mig_strategy": "none", "sharing": None, "configs": {}, "node_configs": {}}
    result = fleet.run(params, labeller=labeller, now=datetime.datetime(2026, 11, 26, tzinfo=datetime.timezone.utc))
    assert labeller.lists == 1 and result["changed"] is False
    entries = dict((e["host"], e) for e in result["report"]["nodes"])
    # the node was never labelled: the device plugin stage would set its labels
    assert entries["md-a"]["node"] == "kg-a" and entries["md-a"]["state"] == "drift"
    assert entries["md-a"]["drift"][0]["stage"] == "device_plugin"
    assert "nvidia.com/gpu.present=true" in entries["md-a"]["drift"][0]["reason"]
    assert entries["kg-b"]["state"] == "error"
    assert result["report"]["generated_at"] == "2026-11-26T00:00:00Z"
    assert result["table"] == report.table(result["report"])


def test_fleet_says_why_labels_were_not_judged():
    labeller = Labeller({"kg-a": node("kg-a")})
    params = {"hosts": {"kg-a": read()}, "labels": True, "mig_strategy": "none", "sharing": None,
              "configs": {"x": {"mig_strategy": "nonsense"}}, "node_configs": {}}
    result = fleet.run(params, labeller=labeller)
    assert "the node labels were not judged" in result["warnings"][0]


def test_an_amd_host_shows_its_gpus_driver_and_resources_and_no_nvml_problem():
    fact = gpu_fact(count=0, driver=None)
    fact.update(present=False, vendors=["amd"], nvml={"status": "library_not_found", "message": "no libnvidia-ml"},
                pci=[{"address": "0000:43:00.0", "vendor": "amd", "vendor_id": "0x1002"}],
                amd={"count": 2, "status": "ok", "driver": {"module": "amdgpu", "loaded": True, "version": "6.8.5",
                                                            "kfd": True},
                     "devices": [{"name": "AMD Instinct MI210", "memory_total_mib": 65520}] * 2},
                intel={"count": 0, "devices": []})
    node = {"metadata": {"name": "kg-mi210", "labels": {}},
            "status": {"allocatable": {"cpu": "8", "amd.com/gpu": "2"}, "capacity": {"amd.com/gpu": "2"}}}
    entry = report.node_report("kg-mi210", {"gpu": fact, "driver_verdict": {"status": "ok", "problems": []}}, node)
    assert entry["state"] == "ok", entry["problems"]
    assert entry["driver"]["version"] == "amdgpu 6.8.5"
    assert entry["advertised"]["allocatable"] == {"amd.com/gpu": "2"}
    cells = report.row(entry)
    assert cells[2] == "2x AMD Instinct MI210 64 GiB" and cells[7] == "amd.com/gpu:2"
    # the same host's NVML state is a problem where an NVIDIA GPU is on its bus
    fact["pci"].append({"address": "0000:3b:00.0", "vendor": "nvidia", "vendor_id": "0x10de"})
    entry = report.node_report("kg-mi210", {"gpu": fact, "driver_verdict": {"status": "ok", "problems": []}}, node)
    assert entry["state"] == "problem" and "NVML library_not_found" in entry["problems"][0]


def test_device_plugin_or_dra_and_both_is_a_problem():
    plugin = report.node_report("kg-a", read(), node("kg-a", allocatable={"nvidia.com/gpu": "2"}), slice_devices=[])
    assert plugin["allocation"] == {"kind": "device_plugin", "slice_devices": 0, "nvml_gpus": 2, "stale_labels": []}
    dra = report.node_report("kg-a", read(), node("kg-a", allocatable={"nvidia.com/gpu": "0"}),
                             slice_devices=["gpu-0", "gpu-1"])
    assert dra["allocation"]["kind"] == "dra" and dra["state"] == "ok", dra
    both = report.node_report("kg-a", read(), node("kg-a", allocatable={"nvidia.com/gpu": "2"}),
                              slice_devices=["gpu-0", "gpu-1"])
    assert both["state"] == "problem" and "forbids" in both["problems"][0] and "dra_migration" in both["problems"][0]
    short = report.node_report("kg-a", read(), node("kg-a"), slice_devices=["gpu-0"])
    assert short["state"] == "problem" and "ResourceSlices list 1 GPUs, NVML counts 2" in short["problems"][0]
    no_api = report.node_report("kg-a", read(), node("kg-a", allocatable={"nvidia.com/gpu": "2"}))
    assert no_api["allocation"]["slice_devices"] is None and no_api["allocation"]["kind"] == "device_plugin"
    rows = report.table({"nodes": [plugin, dra, both], "summary": report.summary([plugin, dra, both])})
    assert "ALLOCATION" in rows and "DRA (2)" in rows and "BOTH (2)" in rows and "plugin" in rows


def test_device_plugin_labels_left_on_a_dra_node_are_named():
    labels = {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.replicas": "4",
              "nvidia.com/gpu.count": "2"}
    entry = report.node_report("kg-a", read(), node("kg-a", labels=labels), slice_devices=["gpu-0", "gpu-1"])
    assert entry["allocation"]["stale_labels"] == ["nvidia.com/gpu.deploy.device-plugin=true",
                                                   "nvidia.com/gpu.replicas=4"]
    # the deploy label would bring the plugin back beside DRA: a problem; GFD's sharing label: a note, not drift
    assert entry["state"] == "problem" and "would run beside the DRA kubelet plugin" in entry["problems"][0]
    assert entry["drift"] == [] and "nvidia.com/gpu.replicas=4" in entry["notes"][0]
    quiet = report.node_report("kg-a", read(), node("kg-a", labels={"nvidia.com/gpu.replicas": "1"}),
                               slice_devices=["gpu-0", "gpu-1"])
    assert quiet["state"] == "ok" and len(quiet["notes"]) == 1
    assert "kg-a: note: nvidia.com/gpu.replicas=1" in report.table({"nodes": [quiet], "summary": report.summary([quiet])})
