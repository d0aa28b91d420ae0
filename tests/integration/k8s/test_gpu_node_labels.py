# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_node_labels against the sandbox API server, through ansible-playbook: facts come from the real gpu_facts
module (fake NVML, one shipped profile per fleet node), labels are checked through the API, and server-side apply
ownership is checked with a second field manager."""

import copy
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_cli import run_module
from k8s_helpers import wait_for
from sandbox.k8s import nodes as sandbox_nodes

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
MANAGER = "kubegpu.cluster/labels"
FLEET = sandbox_nodes.load_fleet()
OUR_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/cuda.")


def _env(extra=None):
    env = dict((k, v) for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_PROFILE"))
    env.update(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".build", "collections"), ANSIBLE_NOCOLOR="1")
    env.update(extra or {})
    return env


def _playbook(tmp_path, plays, inventory=None, args=()):
    path = tmp_path / ("play-%d.json" % time.monotonic_ns())
    path.write_text(json.dumps(plays))
    command = [PLAYBOOK, str(path), "-i", inventory or "localhost,", "-c", "local",
               "-e", "ansible_python_interpreter=" + sys.executable] + list(args)
    proc = subprocess.run(command, env=_env(), capture_output=True, text=True, check=False, cwd=ROOT, timeout=600)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook printed no JSON (rc %d):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))


def label_nodes(sandbox, tmp_path, nodes, check=False, diff=False, expect_failure=False, **options):
    """Run the module once on localhost; return its result for localhost."""
    args = dict(kubeconfig=sandbox.kubeconfig, **options)
    if nodes is not None:
        args["nodes"] = nodes
    plays = [{"hosts": "localhost", "gather_facts": False,
              "tasks": [{"name": "label", "kubegpu.cluster.gpu_node_labels": args}]}]
    rc, out = _playbook(tmp_path, plays, args=(["--check"] if check else []) + (["--diff"] if diff else []))
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    if expect_failure:
        assert rc != 0 and result.get("failed"), result
    else:
        assert rc == 0 and not result.get("failed"), result
    return result


@pytest.fixture(scope="module")
def fleet_facts(fake_nvml_dir, tmp_path_factory):
    """The gpu fact of every fleet node, from the real gpu_facts module with that node's profile."""
    tmp = tmp_path_factory.mktemp("gpu-node-labels-facts")
    lines = ["[fleet]"]
    for entry in FLEET:
        env = {}
        if entry.get("profile") and entry.get("variant") == "gpu":  # amd/intel profiles are sysfs only, not NVML's
            env = {"LD_LIBRARY_PATH": str(fake_nvml_dir),
                   "FAKE_NVML_PROFILE": os.path.join(PROFILES, entry["profile"] + ".json")}
        lines.append("%s nvml_env='%s'" % (entry["name"], json.dumps(env)))
    inventory = tmp / "hosts.ini"
    inventory.write_text("\n".join(lines) + "\n")
    plays = [{"hosts": "fleet", "gather_facts": False,
              "tasks": [{"name": "facts", "kubegpu.cluster.gpu_facts": {}, "environment": "{{ nvml_env }}"}]}]
    rc, out = _playbook(tmp, plays, inventory=str(inventory))
    hosts = out["plays"][0]["tasks"][0]["hosts"]
    assert rc == 0, hosts
    facts = dict((name, result["ansible_facts"]["gpu"]) for name, result in hosts.items())
    assert sorted(facts) == sorted(e["name"] for e in FLEET)
    return facts


def ours(labels):
    return dict((k, v) for k, v in (labels or {}).items() if k.startswith(OUR_PREFIXES) or k == "accelerator")


def owned_by_us(sandbox, name):
    """The label keys our field manager owns on a node, from its managedFields."""
    keys = set()
    for entry in sandbox.core.read_node(name).metadata.managed_fields or []:
        if entry.manager == MANAGER:
            keys.update(k[2:] for k in ((entry.fields_v1 or {}).get("f:metadata") or {}).get("f:labels") or {})
    return keys


def labels_of(sandbox, name):
    return dict(sandbox.core.read_node(name).metadata.labels or {})


def foreign_patch(sandbox, name, labels, manager="kubectl-label"):
    """Set labels as ``kubectl label`` does (a strategic merge patch, an Update under another field manager)."""
    sandbox.core.patch_node(name, {"metadata": {"labels": labels}}, field_manager=manager)


def foreign_apply(sandbox, name, labels, manager="someone-else"):
    """Apply labels under another field manager (server-side apply; same values are then co-owned)."""
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    sandbox.core.patch_node(name, body, field_manager=manager, _content_type="application/apply-patch+yaml")


@pytest.fixture(scope="module")
def labelled_fleet(sandbox, fleet_facts, tmp_path_factory):
    """Label the whole fleet once; remove every label the module set on the fleet afterwards."""
    tmp = tmp_path_factory.mktemp("gpu-node-labels-fleet")
    result = label_nodes(sandbox, tmp, fleet_facts, diff=True)
    yield result
    cleaned = label_nodes(sandbox, tmp, dict((name, None) for name in fleet_facts), state="absent")
    assert cleaned["summary"]["total"] == len(FLEET)
    for entry in FLEET:  # other tests may set e.g. nvidia.com/gpu.present themselves: only ours must be gone
        assert owned_by_us(sandbox, entry["name"]) == set(), entry["name"]


def test_fleet_is_labelled_from_its_facts(sandbox, labelled_fleet):
    result = labelled_fleet
    assert result["changed"] is True
    assert result["summary"]["total"] == len(FLEET) and result["summary"]["missing"] == 0
    v100 = labels_of(sandbox, "kg-v100")
    assert ours(v100) == {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "Tesla-V100-PCIE-16GB", "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.memory": "16160", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.family": "volta", "nvidia.com/gpu.compute.major": "7", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.major": "510",
        "nvidia.com/cuda.driver-version.minor": "47", "nvidia.com/cuda.driver-version.revision": "03",
        "nvidia.com/cuda.driver-version.full": "510.47.03", "nvidia.com/cuda.runtime-version.major": "11",
        "nvidia.com/cuda.runtime-version.minor": "6", "nvidia.com/cuda.runtime-version.full": "11.6",
        "nvidia.com/cuda.driver.major": "510", "nvidia.com/cuda.driver.minor": "47", "nvidia.com/cuda.driver.rev": "03",
        "nvidia.com/cuda.runtime.major": "11", "nvidia.com/cuda.runtime.minor": "6",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "accelerator": "nvidia-tesla-v100-pcie-16gb"}
    assert v100["nvidia.com/mig.capable"] == "false" and v100["nvidia.com/mps.capable"] == "false"
    assert v100["kubernetes.io/hostname"] == "kg-v100"  # labels from node registration are still there
    products = {"kg-t4": "Tesla-T4", "kg-a100": "NVIDIA-A100-SXM4-80GB", "kg-h100": "NVIDIA-H100-80GB-HBM3",
                "kg-gtx1060": "GeForce-GTX-1060-3GB"}
    for name, product in products.items():
        labels = labels_of(sandbox, name)
        assert labels["nvidia.com/gpu.product"] == product, name
        assert ours(labels) == ours(result["nodes"][name]["labels"]), name
        assert owned_by_us(sandbox, name) == set(result["nodes"][name]["labels"]), name
    a100 = labels_of(sandbox, "kg-a100")
    assert a100["nvidia.com/gpu.count"] == "8" and a100["nvidia.com/mig.capable"] == "true"
    assert a100["nvidia.com/gpu.replicas"] == "0"  # every GPU in MIG mode: GFD labels them without sharing
    gtx = labels_of(sandbox, "kg-gtx1060")
    assert gtx["nvidia.com/cuda.driver-version.full"] == "390.30" and gtx["nvidia.com/cuda.driver-version.revision"] == ""
    for name in ("kg-cpu", "kg-nodriver"):
        assert owned_by_us(sandbox, name) == set(), name
        assert result["nodes"][name] == {"status": "unchanged", "labels": {}, "labels_set": {}, "labels_removed": [],
                                         "labels_released": []}
    assert len(result["diff"]) == len(products) + 1
    managers = [f.manager for f in sandbox.core.read_node("kg-t4").metadata.managed_fields
                if f.operation == "Apply"]
    assert managers == [MANAGER]


def test_second_run_is_not_changed(sandbox, labelled_fleet, fleet_facts, tmp_path):
    check = label_nodes(sandbox, tmp_path, fleet_facts, check=True, diff=True)
    assert check["changed"] is False and check["diff"] == []
    again = label_nodes(sandbox, tmp_path, fleet_facts)
    assert again["changed"] is False
    assert again["summary"] == {"total": len(FLEET), "changed": 0, "unchanged": len(FLEET), "missing": 0}


def test_check_mode_reports_and_changes_nothing(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    before = sandbox.core.read_node(name)
    result = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]}, check=True, diff=True)
    assert result["changed"] is True
    assert result["nodes"][name]["labels_set"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert result["diff"][0]["after"]["accelerator"] == "nvidia-tesla-t4"
    after = sandbox.core.read_node(name)
    assert after.metadata.labels == before.metadata.labels
    assert MANAGER not in [f.manager for f in after.metadata.managed_fields]  # (kwok's heartbeats move resourceVersion)
    real = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})
    assert real["nodes"][name] == result["nodes"][name]


def test_other_managers_labels_survive_and_no_gpu_loses_exactly_ours(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    first = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})
    assert first["changed"] is True
    mine = dict((k, v) for k, v in labels_of(sandbox, name).items() if k in first["nodes"][name]["labels"])
    assert mine == first["nodes"][name]["labels"] and mine["nvidia.com/gpu.present"] == "true"
    # Another client adds its own label, and another applies one of ours with the same value (it now co-owns it).
    foreign_patch(sandbox, name, {"team": "ml"})
    foreign_apply(sandbox, name, {"accelerator": "nvidia-tesla-t4"})
    assert label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})["changed"] is False
    expected = labels_of(sandbox, name)

    gone = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-cpu"]}, diff=True)  # facts now say: no GPU
    assert gone["changed"] is True
    removed = sorted(k for k in mine if k != "accelerator")
    assert gone["nodes"][name]["labels_removed"] == removed
    for key in removed:
        expected.pop(key)
    assert labels_of(sandbox, name) == expected  # exactly our labels went; team and the co-owned accelerator stay
    assert expected["team"] == "ml" and expected["accelerator"] == "nvidia-tesla-t4"
    assert gone["diff"][0]["after"] == {}
    assert label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-cpu"]})["changed"] is False


def test_changed_facts_change_only_what_differs(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})
    facts = copy.deepcopy(fleet_facts["kg-t4"])
    facts["count"] = 2
    facts["devices"].append(copy.deepcopy(facts["devices"][0]))
    result = label_nodes(sandbox, tmp_path, {name: facts}, diff=True, accelerator_label="")
    assert result["nodes"][name]["labels_set"] == {"nvidia.com/gpu.count": "2"}
    assert result["nodes"][name]["labels_removed"] == ["accelerator"]
    assert result["diff"][0]["before"]["nvidia.com/gpu.count"] == "1"
    assert result["diff"][0]["after"]["nvidia.com/gpu.count"] == "2"
    labels = labels_of(sandbox, name)
    assert labels["nvidia.com/gpu.count"] == "2" and "accelerator" not in labels


def test_200_nodes_in_one_call(sandbox, fleet_facts, test_nodes, tmp_path):
    names = test_nodes(200, "v100x4")
    facts = dict((name, fleet_facts["kg-v100"]) for name in names)
    started = time.monotonic()
    result = label_nodes(sandbox, tmp_path, facts, concurrency=16)
    elapsed = time.monotonic() - started
    print("\nlabelled %d nodes in one module call in %.1f s (ansible-playbook included)" % (len(names), elapsed))
    assert result["summary"] == {"total": 200, "changed": 200, "unchanged": 0, "missing": 0}
    listed = sandbox.core.list_node(label_selector="nvidia.com/gpu.product=Tesla-V100-PCIE-16GB,"
                                                   "accelerator=nvidia-tesla-v100-pcie-16gb,nvidia.com/gpu.count=4")
    assert set(names) <= set(n.metadata.name for n in listed.items)
    again = label_nodes(sandbox, tmp_path, facts)
    assert again["changed"] is False and again["summary"]["unchanged"] == 200


def test_missing_nodes_give_one_clear_error_and_change_nothing(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    facts = {name: fleet_facts["kg-t4"], "kg-no-such-node": fleet_facts["kg-t4"], "kg-gone-too": fleet_facts["kg-t4"]}
    result = label_nodes(sandbox, tmp_path, facts, expect_failure=True)
    assert "2 node(s) not found in the cluster: kg-gone-too, kg-no-such-node" in result["msg"]
    assert "node_names" in result["msg"]
    assert ours(labels_of(sandbox, name)) == {}  # nothing was labelled
    skipped = label_nodes(sandbox, tmp_path, facts, missing_nodes="skip")
    assert skipped["nodes"]["kg-no-such-node"]["status"] == "missing"
    assert skipped["nodes"][name]["status"] == "changed"
    assert ours(labels_of(sandbox, name))["nvidia.com/gpu.product"] == "Tesla-T4"
    assert any("kg-no-such-node" in w for w in skipped.get("warnings", [])), skipped


def test_node_names_map_inventory_names(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    result = label_nodes(sandbox, tmp_path, {"t4.example.com": fleet_facts["kg-t4"]},
                         node_names={"t4.example.com": name})
    assert list(result["nodes"]) == [name]
    assert labels_of(sandbox, name)["nvidia.com/gpu.product"] == "Tesla-T4"


def test_facts_not_gathered_fail_naming_the_host(sandbox, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    result = label_nodes(sandbox, tmp_path, {name: "not facts"}, expect_failure=True)
    assert "node %s" % name in result["msg"] and "gpu_facts" in result["msg"]


# ---- the operand deploy labels, per-node configs, and GPU feature discovery through NFD -----------------------

DEPLOY_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DEPLOY_GFD = "nvidia.com/gpu.deploy.gpu-feature-discovery"


def test_deploy_labels_are_set_where_absent_and_never_overwritten(sandbox, fleet_facts, test_nodes, tmp_path):
    (name,) = test_nodes(1, "t4")
    foreign_patch(sandbox, name, {DEPLOY_PLUGIN: "paused-for-mig-change"}, manager="nvidia-mig-manager")
    first = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})
    labels = labels_of(sandbox, name)
    assert labels[DEPLOY_PLUGIN] == "paused-for-mig-change" and labels[DEPLOY_GFD] == "true"
    assert DEPLOY_PLUGIN not in first["nodes"][name]["labels"] and DEPLOY_PLUGIN not in owned_by_us(sandbox, name)
    # NVIDIA's MIG manager is done: it sets "true" again, and the label is ours too from now on
    foreign_patch(sandbox, name, {DEPLOY_PLUGIN: "true"}, manager="nvidia-mig-manager")
    again = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]})
    assert again["changed"] is False and DEPLOY_PLUGIN in owned_by_us(sandbox, name)
    # an admin's "false" (an Update under another manager takes the field from us) is never set back
    foreign_patch(sandbox, name, {DEPLOY_GFD: "false"})
    third = label_nodes(sandbox, tmp_path, {name: fleet_facts["kg-t4"]}, diff=True)
    assert third["changed"] is False and labels_of(sandbox, name)[DEPLOY_GFD] == "false"


def test_sharing_mig_and_per_node_configs(sandbox, fleet_facts, test_nodes, tmp_path):
    t4, a100 = test_nodes(1, "t4")[0], test_nodes(1, "a100x8-mig-mixed")[0]
    facts = {t4: fleet_facts["kg-t4"], a100: fleet_facts["kg-a100"]}
    options = dict(sharing={"strategy": "time-slicing", "replicas": 4},
                   configs={"mps": {"sharing": {"strategy": "mps", "replicas": 3}},
                            "mixed": {"mig_strategy": "mixed", "sharing": {"strategy": "none"}}},
                   node_configs={t4: "mps", a100: "mixed"})
    label_nodes(sandbox, tmp_path, facts, **options)
    labels = labels_of(sandbox, t4)
    assert labels["nvidia.com/device-plugin.config"] == "mps" and labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED" and labels["nvidia.com/gpu.replicas"] == "3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    labels = labels_of(sandbox, a100)
    assert labels["nvidia.com/device-plugin.config"] == "mixed" and labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "17" and labels["nvidia.com/mig-1g.10gb.product"] == (
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb")
    # both nodes back on the default config: time-slicing 4 ways, no config label, no MIG labels
    back = label_nodes(sandbox, tmp_path, facts, sharing=options["sharing"], diff=True)
    labels = labels_of(sandbox, t4)
    assert "nvidia.com/device-plugin.config" not in labels and labels["nvidia.com/mps.capable"] == "false"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED" and labels["nvidia.com/gpu.replicas"] == "4"
    assert "nvidia.com/mig-1g.10gb.count" in back["nodes"][a100]["labels_removed"]
    assert not [k for k in labels_of(sandbox, a100) if k.startswith("nvidia.com/mig-")]


def test_gfd_through_nfd_takes_over_without_a_fight(sandbox, fleet_facts, test_nodes, tmp_path):
    """Our GFD values first; then NFD and GFD run and gpu_node_labels(gfd=true) releases GFD's keys: nothing is
    removed, nfd-master publishes the same values plus what only GFD knows, and no run changes anything after."""
    (name,) = test_nodes(1, "v100x4")
    marker = "kubegpu.test/gfd-" + name[-12:]
    sandbox.core.patch_node(name, {"metadata": {"labels": {marker: "true"}}})
    sharing = {"strategy": "time-slicing", "replicas": 4}
    facts = {name: fleet_facts["kg-v100"]}
    ours_first = label_nodes(sandbox, tmp_path, facts, sharing=sharing)["nodes"][name]["labels"]
    assert ours_first["nvidia.com/gpu.product"] == "Tesla-V100-PCIE-16GB-SHARED"
    nfd_ns, plugin_ns = "nfd-" + name[-12:], "dp-" + name[-12:]
    nfd_args = dict(kubeconfig=sandbox.kubeconfig, namespace=nfd_ns, extra_label_ns=["nvidia.com"],
                    pci_device_classes=["02", "03"], pci_label_fields=["vendor"], worker_node_selector={marker: "true"},
                    wait_timeout=120)
    plugin_args = dict(kubeconfig=sandbox.kubeconfig, namespace=plugin_ns, node_selector={marker: "true"},
                       deploy_labels=False, gfd=True, sharing=sharing, wait_timeout=120)
    try:
        rc, result = run_module("kubegpu.cluster.node_feature_discovery", nfd_args)
        assert rc == 0, result
        released = label_nodes(sandbox, tmp_path, facts, sharing=sharing, gfd=True, diff=True)
        entry = released["nodes"][name]
        assert entry["labels_removed"] == [] and released["diff"] == []
        assert sorted(entry["labels_released"]) == sorted(k for k in ours_first if k.startswith(
            ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.replicas", "nvidia.com/gpu.memory",
             "nvidia.com/gpu.sharing-strategy", "nvidia.com/gpu.family", "nvidia.com/gpu.compute", "nvidia.com/cuda.",
             "nvidia.com/mig.", "nvidia.com/mps.")))
        assert labels_of(sandbox, name)["nvidia.com/gpu.product"] == "Tesla-V100-PCIE-16GB-SHARED"  # still there
        assert not [k for k in owned_by_us(sandbox, name) if k in entry["labels_released"]]
        rc, result = run_module("kubegpu.cluster.device_plugin_deploy", plugin_args)
        assert rc == 0, result
        node = wait_for(sandbox.core.list_node, field_selector="metadata.name=" + name, describe="GFD's own labels",
                        predicate=lambda n: "nvidia.com/gfd.timestamp" in (n.metadata.labels or {}))
        labels = node.metadata.labels
        for key in entry["labels_released"]:
            assert labels[key] == ours_first[key], key  # the two readings of GFD's rules agree on this node
        assert labels["nvidia.com/gpu.machine"] == "unknown" and labels["nvidia.com/gpu.mode"] == "compute"
        assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
        again = label_nodes(sandbox, tmp_path, facts, sharing=sharing, gfd=True)
        assert again["changed"] is False and again["nodes"][name]["labels_released"] == []
        # GFD goes (gfd=false again): our values, the same as GFD's, so taking them back changes nothing
        back = label_nodes(sandbox, tmp_path, facts, sharing=sharing)
        assert back["changed"] is False and owned_by_us(sandbox, name) >= set(entry["labels_released"])
    finally:
        run_module("kubegpu.cluster.device_plugin_deploy", dict(plugin_args, state="absent"))
        run_module("kubegpu.cluster.node_feature_discovery", dict(nfd_args, state="absent"))
