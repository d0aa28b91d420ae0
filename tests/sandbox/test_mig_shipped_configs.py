# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's shipped default MIG configs (tests/fixtures/mig: the GPU Operator's and mig-parted's, restated) against the
mig_layout module's work on the fake NVML, on every sandbox profile with a MIG capable GPU: every named layout either
applies (check mode first, then the run, then a rerun that changes nothing) or is refused before any change because a
GPU it names lacks a profile, as the GPU's own list of profiles says; and check mode's ``reset_required`` is what the
run then reports. What is expected of each GPU is worked out here from the config and the profile, not from the
module's plan (mig-parted's rules: the last matching entry wins, device filters against the PCI ids, a GPU that is not
MIG capable skipped under ``devices: all``)."""

import json
import os
import subprocess
import sys

import pytest
import yaml

import fake_pci_bus

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "mig")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mig_layout_worker.py")
FILES = sorted(os.path.join(FIXTURES, name) for name in os.listdir(FIXTURES) if name.endswith(".yaml"))
READ_ONLY = {"version": "v1", "mig-configs": {"read": [{"devices": [], "mig-enabled": False}]}}
OFF = {"version": "v1", "mig-configs": {"off": [{"devices": "all", "mig-enabled": False}]}}


# The layouts of NVIDIA's files that change GPUs of the 80 GB A100 and H100 class, which the sandbox's MIG GPUs are
# (the rest name other GPUs' profiles and are refused, or match no GPU through their filters and change nothing)
EIGHTY_GB = ["all-1g.10gb", "all-1g.10gb.me", "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb",
             "all-7g.80gb", "all-balanced", "all-enabled"]
APPLIED = {"a100x2-mig-capable": {"changed": EIGHTY_GB}, "a100-h100-v100-mig-capable": {"changed": EIGHTY_GB},
           "h100-mig-reset": {"reset": EIGHTY_GB}, "a100x8-mig-mixed": {"changed": EIGHTY_GB + ["all-disabled"]}}


def _profile(name):
    with open(os.path.join(PROFILES, name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


MIG_PROFILES = sorted(name[:-5] for name in os.listdir(PROFILES) if name.endswith(".json") and any(
    (d.get("mig") or {}).get("capable") for d in _profile(name[:-5]).get("devices") or []))


def layouts():
    """``[(file name, layout name, document of that one layout)]``: every named layout of the shipped files, each
    distinct layout once (the two files share most of them)."""
    seen, found = [], []
    for path in FILES:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        for name, entries in document["mig-configs"].items():
            if (name, entries) in seen:
                continue
            seen.append((name, entries))
            found.append((os.path.basename(path), name, {"version": "v1", "mig-configs": {name: entries}}))
    return found


def run_worker(fake_nvml_dir, tmp_path, profile_name, steps):
    state = str(tmp_path / "mig-state.json")
    pci = str(tmp_path / "pci")
    if not os.path.isdir(pci):
        fake_pci_bus.write(_profile(profile_name), pci)
    job = {"profile": os.path.join(PROFILES, profile_name + ".json"), "state": state, "pci": pci, "steps": steps}
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE=job["profile"],
               FAKE_NVML_MIG_STATE=state,
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, ".build", "collections")]))
    proc = subprocess.run([sys.executable, WORKER], input=json.dumps(job), env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def expected(document, name, facts):
    """Per GPU index: ``("skip" | "none" | "refuse" | "layout", detail)`` as mig-parted's rules give it."""
    found = {}
    pci = dict((entry["address"], int(entry["device_id"], 16)) for entry in facts["pci"])
    for gpu in facts["devices"]:
        domain, rest = gpu["pci_bus_id"].lower().split(":", 1)
        device = pci.get("%04x:%s" % (int(domain, 16), rest))
        winner = None
        for entry in document["mig-configs"][name]:
            filters = entry.get("device-filter") or []
            filters = [filters] if isinstance(filters, str) else filters
            if entry["devices"] != "all" and gpu["index"] not in entry["devices"]:
                continue
            if filters and not any(int(f, 16) >> 16 == device and int(f, 16) & 0xFFFF == 0x10DE for f in filters):
                continue
            winner = entry
        mig = gpu["mig"]
        if winner is None:
            found[gpu["index"]] = ("none", None)
        elif not mig["capable"]:
            found[gpu["index"]] = ("skip", None)
        elif not winner["mig-enabled"]:
            found[gpu["index"]] = ("layout", {"mig_enabled": False, "mig_devices": {}})
        else:
            counts = dict((p, n) for p, n in (winner.get("mig-devices") or {}).items() if n)
            missing = sorted(p for p in counts if p not in mig["profiles"])
            found[gpu["index"]] = ("refuse", missing) if missing else ("layout", {"mig_enabled": True,
                                                                                  "mig_devices": counts})
    return found


def layout_of(gpu):
    counts = {}
    for device in gpu["mig"]["devices"]:
        counts[device["profile"]] = counts.get(device["profile"], 0) + 1
    return {"mig_enabled": gpu["mig"]["current"], "mig_devices": counts if gpu["mig"]["current"] else {}}


def check_applied(label, want, check, real, again, same_actions=True):
    """The run made each GPU what the config asks (nothing else changed), check mode said so first, the rerun is a
    no-op. ``same_actions``: the run's plan is check mode's (not so after a reset, which switched the mode)."""
    before = dict((gpu["index"], layout_of(gpu)) for gpu in check["ansible_facts"]["gpu"]["devices"])
    after = dict((gpu["index"], layout_of(gpu)) for gpu in real["ansible_facts"]["gpu"]["devices"])
    for index, (kind, layout) in sorted(want.items()):
        if kind == "layout":
            assert after[index] == layout, (label, index, after[index], layout)
        else:
            assert after[index] == before[index], (label, index, kind)
    assert real["reset_required"] == [], (label, real["reset_required"])
    if same_actions:
        assert check["changed"] == real["changed"] == (after != before), label
        assert [p["action"] for p in check["plan"]] == [p["action"] for p in real["plan"]], label
    assert again["changed"] is False and all(p["action"] == "none" for p in again["plan"]), (label, again["plan"])


@pytest.mark.parametrize("profile_name", MIG_PROFILES)
def test_nvidia_default_layouts_apply_or_are_refused_naming_the_profile(fake_nvml_dir, tmp_path, profile_name):
    shipped = layouts()
    assert len(shipped) > 80, "the fixtures are NVIDIA's default config files, 81 layouts each"
    steps = [{"config": READ_ONLY, "name": "read", "check": True}]
    for _file, name, document in shipped:
        steps += [{"clear": True}, {"config": document, "name": name, "check": True},
                  {"config": document, "name": name}, {"config": document, "name": name}]
    results = run_worker(fake_nvml_dir, tmp_path, profile_name, steps)
    facts = results[0]["result"]["ansible_facts"]["gpu"]
    assert facts["pci"], "the fake PCI tree was not read"
    outcomes, waited = {}, []
    for i, (source, name, document) in enumerate(shipped):
        label = "%s %s on %s" % (source, name, profile_name)
        check, real, again = results[2 + 4 * i:5 + 4 * i]
        want = expected(document, name, facts)
        refused = dict((index, detail) for index, (kind, detail) in want.items() if kind == "refuse")
        if refused:
            for step in (check, real):
                assert step["rc"] == 1, label
                for index, missing in refused.items():
                    known = facts["devices"][index]["mig"]["profiles"]
                    if known:
                        assert step["msg"].startswith("the layout cannot be applied, nothing was changed"), label
                        assert "GPU %d: " % index in step["msg"] and "has no MIG profile %s (it has %s)" % (
                            ", ".join(missing), ", ".join(known)) in step["msg"], label
                    else:  # NVML does not tell the GPU's memory, from which its profiles are named
                        assert step["msg"].startswith("GPU %d (" % index), label
                        assert "NVML does not tell its memory size" in step["msg"], label
            outcomes[name] = "refused"
            continue
        assert check["rc"] == real["rc"] == 0, (label, check.get("msg"), real.get("msg"))
        check, real = check["result"], real["result"]
        assert check["reset_required"] == real["reset_required"], (label, check["reset_required"], real["reset_required"])
        if real["reset_required"]:
            waited.append((name, document))
            outcomes[name] = "reset"
            continue
        check_applied(label, want, check, real, again["result"])
        outcomes[name] = "changed" if real["changed"] else "unchanged"
    # the layouts that wait for a reset: the run after the reset finishes them, and the next changes nothing
    # and switching MIG off again waits for a reset too, which check mode says first
    steps = []
    for name, document in waited:
        steps += [{"clear": True}, {"config": document, "name": name, "check": True}, {"config": document, "name": name},
                  {"reset": True}, {"config": document, "name": name}, {"config": document, "name": name},
                  {"config": OFF, "name": "off", "check": True}, {"config": OFF, "name": "off"}]
    results = run_worker(fake_nvml_dir, tmp_path, profile_name, steps) if steps else []
    for i, (name, document) in enumerate(waited):
        check, first, _reset, real, again, check_off, off = [r["result"] for r in results[1 + 8 * i:8 + 8 * i]]
        assert check["reset_required"] == first["reset_required"] != [], name
        check_applied("%s on %s after the reset" % (name, profile_name), expected(document, name, facts),
                      check, real, again, same_actions=False)
        assert check_off["reset_required"] == off["reset_required"] == first["reset_required"], name
    print("%s: %s" % (profile_name, json.dumps(dict((kind, sorted(n for n, k in outcomes.items() if k == kind))
                                                    for kind in sorted(set(outcomes.values()))))))
    assert set(outcomes.values()) - {"refused"}, "no NVIDIA layout applies on %s" % profile_name
    for kind, names in APPLIED.get(profile_name, {}).items():
        assert sorted(n for n, k in outcomes.items() if k == kind) == sorted(names), (profile_name, kind)
