# SPDX-License-Identifier: GPL-3.0-or-later
"""The fake NVML's tests, on a real NVIDIA GPU: the collection's reader and NVIDIA's own programs must agree.

Not collected by ``make test`` (pytest.ini's testpaths leave tests/realgpu out): it needs a machine with an NVIDIA
driver, and is run there by tests/realgpu/record.sh, which also saves what each program reported. Only read-only
calls are made; the GPU's MIG mode and instances are left as they are.

What each test holds against:
- ``nvidia-smi --query-gpu`` (NVIDIA's own tool): gpu_facts' names, UUIDs, driver, memory, compute capability, MIG mode;
- ``nvlibprobe`` (NVIDIA's go-nvml and go-nvlib, as the device plugin and GFD read a GPU): minor numbers, MIG
  capability, and the MIG profile names a config may use;
- NVML's own profile names (``nvmlDeviceGetGpuInstanceProfileInfoV``'s ``name``): the collection's naming.
"""

import csv
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = os.environ.get("KUBEGPU_REALGPU_OUT")
SMI_FIELDS = ["index", "name", "uuid", "driver_version", "memory.total", "compute_cap", "mig.mode.current",
              "mig.mode.pending", "pci.bus_id", "persistence_mode"]


def _run(name, argv, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, **kwargs)
    assert proc.returncode == 0, "%s failed (%d): %s" % (name, proc.returncode, proc.stderr[-2000:])
    if OUT:
        Path(OUT, name).write_text(proc.stdout)
    return proc.stdout


@pytest.fixture(scope="module")
def smi():
    text = _run("nvidia-smi-query.csv", ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS),
                                         "--format=csv,noheader,nounits"])
    return [dict(zip(SMI_FIELDS, (v.strip() for v in row))) for row in csv.reader(io.StringIO(text)) if row]


@pytest.fixture(scope="module")
def facts():
    args = json.dumps({"ANSIBLE_MODULE_ARGS": {}})
    text = _run("gpu_facts.json", [sys.executable, "-m", "ansible_collections.kubegpu.cluster.plugins.modules.gpu_facts",
                                   args])
    result = json.loads(text)
    assert not result.get("failed"), result
    return result["ansible_facts"]["gpu"]


@pytest.fixture(scope="module")
def nvlib():
    probe = os.environ.get("KUBEGPU_NVLIBPROBE", str(ROOT / ".realgpu" / "nvlibprobe"))
    return json.loads(_run("nvlibprobe.json", [probe]))


@pytest.fixture(scope="module")
def probe():
    return json.loads(_run("nvml_probe.json", [sys.executable, str(ROOT / "tests" / "sandbox" / "nvml_probe.py")]))


@pytest.fixture(scope="module")
def mig():
    return json.loads(_run("mig_read.json", [sys.executable, str(HERE / "mig_read.py")]))


def test_gpu_facts_reads_what_nvidia_smi_shows(smi, facts):
    assert facts["nvml"]["status"] == "ok", facts["nvml"]
    assert facts["count"] == len(smi) > 0
    assert facts["driver_version"] == smi[0]["driver_version"]
    for ours, theirs in zip(facts["devices"], smi):
        assert ours["index"] == int(theirs["index"])
        assert ours["name"] == theirs["name"]
        assert ours["uuid"] == theirs["uuid"]
        assert ours["memory_total_mib"] == int(theirs["memory.total"])
        assert ours["compute_capability"] == theirs["compute_cap"]
        assert ours["pci_bus_id"].lower() == theirs["pci.bus_id"].lower()
        if theirs["mig.mode.current"] in ("Enabled", "Disabled"):
            assert ours["mig"]["capable"]
            assert ours["mig"]["current"] == (theirs["mig.mode.current"] == "Enabled")
            assert ours["mig"]["pending"] == (theirs["mig.mode.pending"] == "Enabled")
        else:  # "[N/A]": not MIG capable
            assert not ours["mig"]["capable"]


def test_gpu_facts_agrees_with_go_nvlib(facts, nvlib):
    assert nvlib["init"] == "SUCCESS" and nvlib["count"] == facts["count"]
    for ours, theirs in zip(facts["devices"], nvlib["devices"]):
        assert ours["minor_number"] == theirs["minor_number"]
        assert ours["mig"]["capable"] == theirs["mig_capable"]
        assert ours["mig"]["current"] == theirs["mig_enabled"]
        # go-nvlib lists a name once per compute instance profile constant that prints as it: first occurrences
        assert ours["mig"]["profiles"] == list(dict.fromkeys(theirs["mig_profiles"]))
        assert [m["uuid"] for m in ours["mig"]["devices"]] == [m["uuid"] for m in theirs["mig_devices"]]


def test_pynvml_lookups_round_trip(probe):
    assert probe["init"] == "ok"
    for index, device in enumerate(probe["devices"]):
        assert device["index"] == index and device["handle_is_stable"]
        assert device["by_uuid"] == index and device["by_pci_bus_id"] == index


def test_our_mig_names_are_nvmls(mig):
    """NVML names its GPU instance profiles itself (``MIG 1g.18gb``): the collection's name of the whole-GPU-instance
    device of each profile must be that name."""
    for gpu in mig["gpus"]:
        if not isinstance(gpu["mig_mode"], list):
            continue
        table = gpu["profile_table"]
        named = [e["name"] for e in gpu["gpu_instance_profiles"].values()
                 if isinstance(e["name"], str) and "error" not in e["v1"]]
        assert named, gpu["gpu_instance_profiles"]
        ours = {n for n, e in table.items() if e["c"] == e["g"]}
        assert {name.replace("MIG ", "", 1) for name in named} == ours


LAYOUTS = {"version": "v1", "mig-configs": {
    "write-up": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 2}}],
    "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    "a100-names": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 1}}],
    "two-me": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb+me": 2}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 2, "1g.18gb": 1}}],
}}


def mig_layout_check(name, layouts=None):
    """mig_layout in check mode on the real GPU, every NVML write call replaced by a failure (run_module_read_only)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:  # a path: argv is too short for it
        json.dump({"ANSIBLE_MODULE_ARGS": {"config": layouts or LAYOUTS, "name": name, "_ansible_check_mode": True,
                                           "_ansible_diff": True}}, handle)
    try:
        proc = subprocess.run([sys.executable, str(HERE / "run_module_read_only.py"), "mig_layout", handle.name],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        os.unlink(handle.name)
    assert "read-only check" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    if OUT:
        with open(Path(OUT, "mig_layout_check.txt"), "a") as handle:
            handle.write("== %s (rc %d)\n%s\n%s\n" % (name, proc.returncode, proc.stdout, proc.stderr[-3000:]))
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_mig_layout_check_mode_plans_h200_layouts_and_refuses_what_cannot_be(facts, mig):
    if not any(d["mig"]["capable"] for d in facts["devices"]):
        pytest.skip("no MIG capable GPU on this machine (%s)" % [d["name"] for d in facts["devices"]])
    # a switch waits for a reboot where NVML says the GPU is passed through to a VM (or a vGPU guest), nvml.h
    waits = [g["index"] for g in mig["gpus"] if g.get("virtualization_mode") in (1, 2)]
    for name in ("write-up", "all-1g"):
        result = mig_layout_check(name)
        assert not result.get("failed"), result
        assert result["changed"] is True or facts["devices"][0]["mig"]["current"], result
        assert "diff" in result
        switching = [p["index"] for p in result["plan"] if p["mode_change"]]
        assert result["reset_required"] == [i for i in switching if i in waits], (result["reset_required"], mig)
    for name, words in (("a100-names", "1g.10gb"), ("two-me", "room for 1"), ("too-big", "do not fit together")):
        result = mig_layout_check(name)
        assert result.get("failed") and words in result["msg"], (name, result)
