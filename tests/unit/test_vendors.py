# SPDX-License-Identifier: GPL-3.0-or-later
"""One vendor registry (plugins/module_utils/_vendors.py), NVIDIA on it like AMD and Intel: every place outside it that
must know each vendor - a module, a role table, a task, the sandbox - is checked against it here, and a vendor added to
the registry alone (or to one of those places alone) fails with the file and the entry that is missing.

The code reads the registry itself (_gpus, the audit, gpu_proof); these places are the ones that cannot: YAML, and the
modules a vendor brings."""

import re
from pathlib import Path

import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors

ROOT = Path(__file__).resolve().parents[2]


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def documentation(path):
    return yaml.safe_load(re.search(r'DOCUMENTATION = r"""(.*?)"""', path.read_text(encoding="utf-8"), re.S).group(1))


def module_calls(root, folder):
    """``{module name: [(file, task)]}`` of the tasks under ``folder`` that call a module of the collection."""
    calls = {}
    for path in sorted((root / folder).glob("*.yml")):
        for task in load(path) or []:
            for key in task:
                if key.startswith("kubegpu.cluster."):
                    calls.setdefault(key.split(".")[-1], []).append((path.relative_to(root), task))
    return calls


def missing(vendors, root=ROOT):
    """One line per place that does not know a vendor of ``vendors`` (or names one they do not have), each naming the
    file and the entry."""
    names = [v.name for v in vendors]
    others = [v for v in vendors if v.fact_key]  # the vendors beside NVIDIA, with a part of the gpu fact of their own
    other_names = [v.name for v in others]
    found = []

    def compare(where, what, have, want):
        for name in want:
            if name not in have:
                found.append("%s: %s has no %s" % (where, what, name))
        for name in have:
            if name not in want:
                found.append("%s: %s names %s, which is not in plugins/module_utils/_vendors.py" % (where, what, name))

    # each vendor's package and device plugin module, and gpu_proof's vendor option
    for vendor in vendors:
        if not (root / "plugins" / "module_utils" / ("_" + vendor.name) / "constants.py").is_file():
            found.append("plugins/module_utils/_%s/constants.py: %s has no package of its own" % (vendor.name, vendor.name))
        if not (root / "plugins" / "modules" / (vendor.device_plugin_module + ".py")).is_file():
            found.append("plugins/modules/%s.py: %s's device plugin module is not there"
                         % (vendor.device_plugin_module, vendor.name))
    proof_doc = documentation(root / "plugins" / "modules" / "gpu_proof.py")
    compare("plugins/modules/gpu_proof.py", "DOCUMENTATION's vendor choices", proof_doc["options"]["vendor"]["choices"],
            names)

    # the device_plugin role: a task per vendor's module, and the other vendors' table, variables and results
    role = root / "roles" / "device_plugin"
    calls = module_calls(root, "roles/device_plugin/tasks")
    for vendor in vendors:
        if vendor.device_plugin_module not in calls:
            found.append("roles/device_plugin/tasks/: no task calls kubegpu.cluster.%s (%s's device plugin)"
                         % (vendor.device_plugin_module, vendor.name))
    here = load(role / "vars" / "main.yml").get("_device_plugin_vendors_here") or {}
    compare("roles/device_plugin/vars/main.yml", "_device_plugin_vendors_here", list(here), other_names)
    defaults = load(role / "defaults" / "main.yml")
    spec = load(role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    vendors_yml = load(role / "tasks" / "vendors.yml") or []
    results = next((t["ansible.builtin.set_fact"].get("device_plugin_vendor_results") for t in vendors_yml
                    if "device_plugin_vendor_results" in (t.get("ansible.builtin.set_fact") or {})), {}) or {}
    compare("roles/device_plugin/tasks/vendors.yml", "device_plugin_vendor_results", list(results), other_names)
    for vendor in others:
        switch = "device_plugin_%s" % vendor.name
        if switch not in defaults:
            found.append("roles/device_plugin/defaults/main.yml: no %s (auto, true or false)" % switch)
        if switch not in spec:
            found.append("roles/device_plugin/meta/argument_specs.yml: %s is not documented" % switch)
        expression = str(here.get(vendor.name, ""))
        if vendor.name in here and (switch not in expression or "attribute='%s'" % vendor.fact_key not in expression):
            found.append("roles/device_plugin/vars/main.yml: _device_plugin_vendors_here.%s does not read %s and the "
                         "gpu fact's %s part" % (vendor.name, switch, vendor.fact_key))
        tasks = [task for path, task in calls.get(vendor.device_plugin_module, []) if str(path).endswith("vendors.yml")]
        if not any(task.get("register") == "_device_plugin_%s_result" % vendor.name
                   and "_device_plugin_vendors_here['%s']" % vendor.name in str(task.get("when")) for task in tasks):
            found.append("roles/device_plugin/tasks/vendors.yml: no task calls kubegpu.cluster.%s when "
                         "_device_plugin_vendors_here['%s'], registering _device_plugin_%s_result"
                         % (vendor.device_plugin_module, vendor.name, vendor.name))

    # the gpu_validation role: the vendors proved with their own workload
    proved = load(root / "roles" / "gpu_validation" / "vars" / "main.yml").get("_gpu_validation_vendors") or []
    compare("roles/gpu_validation/vars/main.yml", "_gpu_validation_vendors", proved, other_names)

    # the sandbox: a node variant with the vendor's sysfs, and the demo's table of what nodes advertise
    fake_pci = (root / "sandbox" / "images" / "fake_pci.py").read_text(encoding="utf-8")
    variants = re.search(r"^VENDOR_VARIANTS = \(([^)]*)\)", fake_pci, re.M).group(1)
    compare("sandbox/images/fake_pci.py", "VENDOR_VARIANTS", re.findall(r'"(\w+)"', variants), other_names)
    nodes = load(root / "sandbox" / "images" / "nodes.yml")
    sysfs = next(play["vars"]["_nodes_sysfs_variants"] for play in nodes if "_nodes_sysfs_variants" in play.get("vars", {}))
    compare("sandbox/images/nodes.yml", "_nodes_sysfs_variants", sysfs, other_names)
    demo = (root / "sandbox" / "demo.yml").read_text(encoding="utf-8")
    pattern = re.search(r"selectattr\('key', 'match', '([^']*)'\)", demo).group(1)
    for vendor in vendors:
        if not re.match(pattern, vendor.resource_prefix + "/gpu"):
            found.append("sandbox/demo.yml: the allocatable column's pattern %s does not show %s/ (%s)"
                         % (pattern, vendor.resource_prefix, vendor.name))
    return found


def test_every_place_knows_every_vendor_of_the_registry():
    assert _vendors.NAMES[0] == "nvidia" and len(_vendors.NAMES) >= 3  # NVIDIA stands in the registry like the others
    found = missing(_vendors.VENDORS)
    assert found == [], "\n".join(["places that do not know every vendor of the registry:"] + found)


ACME = _vendors.GpuVendor(
    name="acme", label="ACME", pci_vendor_id=0xACE0, pci_classes=(0x0302,), fact_key="acme", judge=None,
    resource_prefix="acme.example.com", device_plugin_module="acme_device_plugin_deploy", proof={})


def test_a_vendor_in_the_registry_alone_is_missing_everywhere_and_named():
    """The guard can fail: a vendor added to the registry and nowhere else is named in every place that must know it."""
    lines = missing(_vendors.VENDORS + (ACME,))
    places = sorted(set(line.split(":")[0] for line in lines))
    assert places == sorted([
        "plugins/module_utils/_acme/constants.py", "plugins/modules/acme_device_plugin_deploy.py",
        "plugins/modules/gpu_proof.py", "roles/device_plugin/tasks/", "roles/device_plugin/vars/main.yml",
        "roles/device_plugin/tasks/vendors.yml", "roles/device_plugin/defaults/main.yml",
        "roles/device_plugin/meta/argument_specs.yml", "roles/gpu_validation/vars/main.yml",
        "sandbox/images/fake_pci.py", "sandbox/images/nodes.yml", "sandbox/demo.yml"]), lines
    assert all("acme" in line for line in lines), lines


def test_a_vendor_in_one_place_alone_is_named_as_unknown(tmp_path):
    """... and one added to a role's table but not to the registry is named there."""
    role_vars = ROOT / "roles" / "gpu_validation" / "vars" / "main.yml"
    copy = tmp_path / "roles" / "gpu_validation" / "vars" / "main.yml"
    copy.parent.mkdir(parents=True)
    text = role_vars.read_text(encoding="utf-8")
    copy.write_text(text.replace("_gpu_validation_vendors: [amd, intel]", "_gpu_validation_vendors: [amd, intel, acme]"))
    for path in ("plugins", "sandbox", "roles/device_plugin"):  # the rest as it is
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).symlink_to(ROOT / path)
    assert missing(_vendors.VENDORS, tmp_path) == [
        "roles/gpu_validation/vars/main.yml: _gpu_validation_vendors names acme, which is not in "
        "plugins/module_utils/_vendors.py"]


def test_the_registry_is_what_the_vendor_packages_say():
    from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv  # pylint: disable=import-outside-toplevel
    assert [v.name for v in _vendors.WITH_PART] == [v.name for v in _vendors.VENDORS if v is not _vendors.NVIDIA]
    assert _vendors.NVIDIA.pci_vendor_id == nv.PCI_VENDOR_ID and _vendors.NVIDIA.fact_key is None
    assert len(set(v.pci_vendor_id for v in _vendors.VENDORS)) == len(_vendors.VENDORS)
    assert _vendors.labels_text() == "NVIDIA, AMD or Intel"
    gpu = {"count": 2, "amd": {"count": 1}, "intel": {}}
    assert [v.count(gpu) for v in _vendors.VENDORS] == [2, 1, 0]
