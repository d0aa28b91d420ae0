# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU feature discovery's label rules (plugins/module_utils/_nvidia/gfd.py), one rule per test, on facts built here,
and which keys are GFD's. The simulator's reading of the same rules is compared in
tests/sandbox/unit/test_gfd_matches_devsim.py."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd, labels as nvlabels, plugin_config


def gpu(name="NVIDIA A100-SXM4-80GB", memory=81920, cc="8.0", migs=None, capable=True, bus="00000000:07:00.0"):
    device = {"name": name, "product_slug": "nvidia-" + name.lower().replace(" ", "-"), "memory_total_mib": memory,
              "compute_capability": cc, "pci_bus_id": bus,
              "mig": {"capable": capable, "current": migs is not None, "devices": []}}
    for profile in migs or []:
        g = int(profile.split("g.")[0].split(".")[-1])
        device["mig"]["devices"].append({"profile": profile, "memory_mib": 9728 * g, "multiprocessor_count": 14 * g})
    return device


def fact(*devices, **extra):
    base = {"present": True, "count": len(devices), "devices": list(devices), "driver_version": "535.183.01",
            "cuda_driver_version": "12.2", "pci": []}
    base.update(extra)
    return base


def config(**params):
    return plugin_config.build_config(params)


def test_whole_gpus_without_sharing():
    got = gfd.labels(fact(gpu(), gpu()), config())
    assert got == {
        "nvidia.com/cuda.driver-version.major": "535", "nvidia.com/cuda.driver-version.minor": "183",
        "nvidia.com/cuda.driver-version.revision": "01", "nvidia.com/cuda.driver-version.full": "535.183.01",
        "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "183", "nvidia.com/cuda.driver.rev": "01",
        "nvidia.com/cuda.runtime-version.major": "12", "nvidia.com/cuda.runtime-version.minor": "2",
        "nvidia.com/cuda.runtime-version.full": "12.2", "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2",
        "nvidia.com/mig.capable": "true", "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
    }


@pytest.mark.parametrize("sharing, product, replicas, strategy, mps", [
    ({"strategy": "time-slicing", "replicas": 4}, "Tesla-T4-SHARED", "4", "time-slicing", "false"),
    ({"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}, "Tesla-T4", "4", "time-slicing", "false"),
    ({"strategy": "mps", "replicas": 3}, "Tesla-T4-SHARED", "3", "mps", "true"),
    ({"strategy": "time-slicing", "replicas": 2, "resources": [{"name": "mig-1g.10gb"}]}, "Tesla-T4", "1", "none",
     "false"),
])
def test_sharing(sharing, product, replicas, strategy, mps):
    got = gfd.labels(fact(gpu("Tesla T4", 15109, "7.5", capable=False)), config(sharing=sharing))
    assert got["nvidia.com/gpu.product"] == product
    assert got["nvidia.com/gpu.replicas"] == replicas
    assert got["nvidia.com/gpu.sharing-strategy"] == strategy
    assert got["nvidia.com/mps.capable"] == mps
    assert got["nvidia.com/mig.capable"] == "false" and got["nvidia.com/gpu.family"] == "turing"


def test_mps_on_a_gpu_in_mig_mode_fails_as_gfd_does():
    with pytest.raises(OptionError, match="MPS sharing is not supported for MIG devices"):
        gfd.labels(fact(gpu(migs=["1g.10gb"])), config(sharing={"strategy": "mps", "replicas": 2}))
    with pytest.raises(OptionError, match="node kg-a: "):
        nvlabels.labels_for("kg-a", fact(gpu(migs=[])), config=config(sharing={"strategy": "mps", "replicas": 2}))


def test_gpus_in_mig_mode_are_labelled_without_sharing():
    got = gfd.labels(fact(gpu(migs=["1g.10gb"])), config(sharing={"strategy": "time-slicing", "replicas": 4}))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert got["nvidia.com/gpu.replicas"] == "0" and got["nvidia.com/gpu.sharing-strategy"] == "none"
    assert "nvidia.com/mig.strategy" not in got and not any(k.startswith("nvidia.com/mig-") for k in got)


def test_mig_single_labels_the_mig_devices():
    got = gfd.labels(fact(gpu(migs=["1g.10gb"] * 7), gpu(migs=["1g.10gb"] * 7)),
                     config(mig_strategy="single", sharing={"strategy": "time-slicing", "replicas": 2}))
    assert got["nvidia.com/mig.strategy"] == "single"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED"
    assert got["nvidia.com/gpu.count"] == "14" and got["nvidia.com/gpu.replicas"] == "2"
    assert got["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/gpu.memory"] == "9728" and got["nvidia.com/gpu.multiprocessors"] == "14"
    assert got["nvidia.com/gpu.slices.gi"] == "1" and got["nvidia.com/gpu.slices.ci"] == "1"
    assert got["nvidia.com/gpu.family"] == "ampere"  # from the whole-GPU labels, which the MIG ones override
    assert "nvidia.com/gpu.engines.copy" not in got  # the fact has no NVML attributes: left to GFD


def test_mig_attributes_come_from_the_facts_nvml_attributes_when_there():
    device = gpu(migs=["1c.2g.20gb"])
    device["mig"]["devices"][0]["attributes"] = {
        "multiprocessorCount": 14, "sharedCopyEngineCount": 2, "sharedDecoderCount": 1, "sharedEncoderCount": 0,
        "sharedJpegCount": 0, "sharedOfaCount": 0, "gpuInstanceSliceCount": 2, "computeInstanceSliceCount": 1,
        "memorySizeMB": 19968}
    got = gfd.labels(fact(device), config(mig_strategy="single"))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1c.2g.20gb"
    assert dict((k, v) for k, v in got.items() if k.startswith(("nvidia.com/gpu.engines", "nvidia.com/gpu.slices"))) == {
        "nvidia.com/gpu.engines.copy": "2", "nvidia.com/gpu.engines.decoder": "1", "nvidia.com/gpu.engines.encoder": "0",
        "nvidia.com/gpu.engines.jpeg": "0", "nvidia.com/gpu.engines.ofa": "0", "nvidia.com/gpu.slices.gi": "2",
        "nvidia.com/gpu.slices.ci": "1"}
    assert got["nvidia.com/gpu.memory"] == "19968" and got["nvidia.com/gpu.multiprocessors"] == "14"


@pytest.mark.parametrize("devices", [
    [gpu(migs=["1g.10gb"]), gpu(migs=["2g.20gb"])],  # more than one profile
    [gpu(migs=["1g.10gb"]), gpu()],  # MIG enabled and disabled
    [gpu(migs=["1g.10gb"]), gpu(migs=[])],  # enabled but empty
], ids=["two-profiles", "mixed-modes", "empty"])
def test_mig_single_invalid(devices):
    got = gfd.labels(fact(*devices), config(mig_strategy="single"))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert (got["nvidia.com/gpu.count"], got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.memory"]) == ("0", "0", "0")


def test_mig_single_without_mig_is_none_plus_the_strategy():
    plain = gfd.labels(fact(gpu()), config())
    single = gfd.labels(fact(gpu()), config(mig_strategy="single"))
    assert single == dict(plain, **{"nvidia.com/mig.strategy": "single"})


def test_mig_mixed():
    got = gfd.labels(fact(gpu(migs=["1g.10gb", "1g.10gb", "3g.40gb"]), gpu(migs=[]), gpu()),
                     config(mig_strategy="mixed", sharing={"strategy": "time-slicing", "replicas": 2,
                                                           "resources": [{"name": "mig-1g.10gb"}]}))
    assert got["nvidia.com/mig.strategy"] == "mixed"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB" and got["nvidia.com/gpu.count"] == "3"
    assert got["nvidia.com/gpu.replicas"] == "1"  # the whole GPU without MIG, under a config sharing only MIG devices
    assert got["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED"
    assert got["nvidia.com/mig-1g.10gb.count"] == "2" and got["nvidia.com/mig-1g.10gb.replicas"] == "2"
    assert got["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert got["nvidia.com/mig-3g.40gb.replicas"] == "1" and got["nvidia.com/mig-3g.40gb.memory"] == "29184"


def test_two_models_give_the_first_whole_gpu_and_its_count():
    t4 = gpu("Tesla T4", 15109, "7.5", capable=False)
    got = gfd.labels(fact(gpu(migs=["1g.10gb"]), t4, gpu(), t4), config())
    assert got["nvidia.com/gpu.product"] == "Tesla-T4" and got["nvidia.com/gpu.count"] == "2"
    assert got["nvidia.com/gpu.memory"] == "15109" and got["nvidia.com/gpu.family"] == "turing"
    got = gfd.labels(fact(gpu(migs=["1g.10gb"]), gpu("NVIDIA A30", 24576, migs=["1g.6gb"])), config())
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB" and got["nvidia.com/gpu.count"] == "1"
    assert nvlabels.labels(fact(gpu(migs=[]), t4), {})["accelerator"] == "nvidia-tesla-t4"  # the same model


@pytest.mark.parametrize("driver, cuda, want", [
    ("390.30", "9.1", {"nvidia.com/cuda.driver-version.revision": "", "nvidia.com/cuda.driver.rev": "",
                       "nvidia.com/cuda.driver-version.full": "390.30"}),
    ("560.35.03.1", "12.6", {"nvidia.com/cuda.driver-version.revision": "03.1"}),
    ("bogus", None, {}),
])
def test_versions(driver, cuda, want):
    got = gfd.labels(fact(gpu(), driver_version=driver, cuda_driver_version=cuda), config())
    for key, value in want.items():
        assert got[key] == value
    if cuda is None:
        assert not any(k.startswith("nvidia.com/cuda.") for k in got)


@pytest.mark.parametrize("cc, family", [("7.0", "volta"), ("7.5", "turing"), ("8.9", "ada-lovelace"), ("9.0", "hopper"),
                                        ("6.1", "pascal"), ("11.0", "undefined")])
def test_family(cc, family):
    assert gfd.labels(fact(gpu(cc=cc)), config())["nvidia.com/gpu.family"] == family


def test_no_compute_capability_no_family():
    got = gfd.labels(fact(gpu(cc=None)), config())
    assert not any(k.startswith(("nvidia.com/gpu.family", "nvidia.com/gpu.compute")) for k in got)


@pytest.mark.parametrize("classes, mode", [
    (["0x030200"], "compute"), (["0x030000"], "graphics"), (["0x038000"], "unknown"),
    (["0x030000", "0x030200"], "unknown"),  # GPUs of different classes (lm/nvml.go getModeForClasses)
    (["0x030200", "0x030200"], "compute"),
    ([], None),  # the fact's PCI scan does not hold the GPU: left to GFD
])
def test_gpu_mode(classes, mode):
    devices = [gpu(bus="00000000:%02X:00.0" % (7 + i)) for i in range(max(1, len(classes)))]
    pci = [{"address": "0000:%02x:00.0" % (7 + i), "class": c} for i, c in enumerate(classes)]
    assert gfd.labels(fact(*devices, pci=pci), config()).get("nvidia.com/gpu.mode") == mode


def test_no_gpu_no_labels():
    assert gfd.labels({"present": False, "count": 0}, config()) == {}
    assert gfd.labels(None, config()) == {}


@pytest.mark.parametrize("key, owned", [
    ("nvidia.com/gpu.product", True), ("nvidia.com/gpu.count", True), ("nvidia.com/mig-1g.10gb.count", True),
    ("nvidia.com/cuda.driver.major", True), ("nvidia.com/mps.capable", True), ("nvidia.com/mig.capable", True),
    ("nvidia.com/mig.strategy", True), ("nvidia.com/gfd.timestamp", True), ("nvidia.com/vgpu.present", True),
    ("nvidia.com/gpu.present", False), ("nvidia.com/gpu.deploy.device-plugin", False),
    ("nvidia.com/gpu.deploy.gpu-feature-discovery", False), ("nvidia.com/device-plugin.config", False),
    ("nvidia.com/mig.config", False), ("nvidia.com/mig.config.state", False), ("accelerator", False),
    ("feature.node.kubernetes.io/pci-10de.present", False),
])
def test_owns(key, owned):
    assert gfd.owns(key) is owned


def test_with_gfd_only_our_labels_are_wanted():
    got = nvlabels.labels(fact(gpu()), config(), gfd=True)
    assert got == {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true",
                   "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
                   "accelerator": "nvidia-nvidia-a100-sxm4-80gb"}
    assert not any(gfd.owns(k) for k in got)
    assert all(gfd.owns(k) for k in gfd.labels(fact(gpu(migs=["1g.10gb"])), config(mig_strategy="mixed")))


def test_node_rules_checks_the_sharing_config_first():
    with pytest.raises(OptionError, match="replicas"):
        nvlabels.node_rules({"sharing": {"strategy": "time-slicing", "replicas": 1}})
    labels_for, soft, releases = nvlabels.node_rules({"mig_strategy": "mixed", "gfd": True})
    assert soft == nvlabels.SOFT_LABELS and nvlabels.node_rules({})[2] is None
    assert labels_for("a", fact(gpu(migs=["1g.10gb"])), "accelerator")["nvidia.com/gpu.present"] == "true"
    # released: what GFD publishes there; removed: GFD's keys it will not write (a MIG profile gone), and ours
    assert releases("a", "nvidia.com/gpu.product") and releases("a", "nvidia.com/mig-1g.10gb.count")
    assert not releases("a", "nvidia.com/mig-3g.40gb.count") and not releases("a", "nvidia.com/gpu.present")
    assert not releases("b", "nvidia.com/gpu.product")  # a node not labelled in this run


def test_each_node_gets_its_own_config_and_the_config_label():
    params = {"sharing": {"strategy": "time-slicing", "replicas": 2},
              "configs": {"mps": {"sharing": {"strategy": "mps", "replicas": 4}}, "mig": {"mig_strategy": "mixed"}},
              "node_configs": {"host-a": "mps", "node-b": "mig"}, "node_names": {"host-a": "node-a"}}
    labels_for, _soft, _releases = nvlabels.node_rules(params)
    a = labels_for("host-a", fact(gpu("Tesla T4", 15109, "7.5", capable=False)), "accelerator")
    assert a["nvidia.com/device-plugin.config"] == "mps" and a["nvidia.com/mps.capable"] == "true"
    assert a["nvidia.com/gpu.replicas"] == "4"
    b = labels_for("node-b", fact(gpu(migs=["1g.10gb"])), "accelerator")
    assert b["nvidia.com/device-plugin.config"] == "mig" and b["nvidia.com/mig-1g.10gb.count"] == "1"
    c = labels_for("node-c", fact(gpu()), "accelerator")  # the default config: no config label
    assert "nvidia.com/device-plugin.config" not in c and c["nvidia.com/gpu.replicas"] == "2"
    assert labels_for("node-d", {"present": False, "count": 0}, "accelerator") == {}
    with pytest.raises(OptionError, match="node_configs.node-x"):
        nvlabels.node_rules(dict(params, node_configs={"node-x": "nope"}))
