# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate per-node fake PCI sysfs trees for the simulated fleet.

For every node of ``sandbox/fleet.yml`` this writes ``OUT/<node>/devices`` and ``OUT/<node>/drivers``.
The node containers bind-mount them read-only over ``/sys/bus/pci/devices`` and ``/sys/bus/pci/drivers``
(``sandbox/images/nodes.yml``), so that code reading sysfs sees the GPUs of the node's profile:

* ``devices/0000:3b:00.0/{vendor,device,class,subsystem_vendor,subsystem_device,revision,config}``, in the
  format of the kernel (``0x10de\\n``), ``config`` holding the first 64 bytes of the configuration space;
* ``devices/<bdf>/driver -> ../../drivers/nvidia`` and ``drivers/nvidia/<bdf> -> ../../devices/<bdf>`` when
  a driver is bound (variant gpu); the nodriver variant has the GPU on the bus and no driver; the base
  variant has an empty bus.

The trees are updated in place (the directories themselves are never replaced, as running containers
have them mounted). Prints ``changed`` when anything was written or removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys

import yaml

NVIDIA_VENDOR = 0x10DE
CLASS_3D = 0x030200
CLASS_VGA = 0x030000
# Brands whose boards are display controllers (class 0x0300); datacenter boards are 3D controllers (0x0302).
VGA_BRANDS = ("geforce", "quadro", "titan", "nvidia_rtx", "quadro_rtx", "nvs")
# The nodriver variant has no profile of its own: its bus shows one GPU with this profile's PCI identity.
NODRIVER_PROFILE = "v100x4"
NODRIVER_GPUS = 1


class FakePciError(Exception):
    """The fleet or a profile cannot be turned into a PCI tree."""


def sysfs_bdf(pci_bus_id):
    """Turn an NVML bus id (``00000000:3B:00.0``) into the sysfs name (``0000:3b:00.0``)."""
    parts = pci_bus_id.strip().lower().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise FakePciError("not a PCI bus id: %r" % pci_bus_id)
    domain, bus = int(parts[0], 16), int(parts[1], 16)
    device, function = (int(x, 16) for x in parts[2].split("."))
    return "%04x:%02x:%02x.%x" % (domain & 0xFFFF, bus, device, function)


def _int(value):
    return value if isinstance(value, int) else int(str(value), 16)


def pci_class(gpu):
    """PCI class code of a profile device."""
    brand = str(gpu.get("brand", "")).lower()
    if brand in VGA_BRANDS or "geforce" in str(gpu.get("name", "")).lower():
        return CLASS_VGA
    return CLASS_3D


def device_files(gpu):
    """The sysfs attribute files of one profile device: name -> content."""
    ident = _int(gpu["pci_device_id"])
    subsys = _int(gpu.get("pci_subsystem_id", ident))
    vendor, device = ident & 0xFFFF, ident >> 16
    if vendor != NVIDIA_VENDOR:
        raise FakePciError("pci_device_id %#010x of %s is not an NVIDIA one" % (ident, gpu.get("name")))
    sub_vendor, sub_device = subsys & 0xFFFF, subsys >> 16
    klass = pci_class(gpu)
    revision = 0xA1
    # Type 0 header (64 bytes): ids, command (memory space + bus master), status, revision and class,
    # header type 0, BARs left 0, subsystem ids at 0x2c, no capability list, interrupt pin A.
    config = struct.pack(
        "<HHHHI4x6I4xHHIB7xBBBB",
        vendor, device, 0x0006, 0x0000, (klass << 8) | revision,
        0, 0, 0, 0, 0, 0, sub_vendor, sub_device, 0, 0, 0, 1, 0, 0,
    )
    return {
        "vendor": "0x%04x\n" % vendor,
        "device": "0x%04x\n" % device,
        "subsystem_vendor": "0x%04x\n" % sub_vendor,
        "subsystem_device": "0x%04x\n" % sub_device,
        "class": "0x%06x\n" % klass,
        "revision": "0x%02x\n" % revision,
        "config": config,
    }


def node_tree(gpus, driver):
    """Desired tree of one node: relative path -> ('dir', None) | ('file', bytes) | ('link', target)."""
    tree = {"devices": ("dir", None), "drivers": ("dir", None)}
    if driver and gpus:
        tree["drivers/%s" % driver] = ("dir", None)
    for gpu in gpus:
        bdf = sysfs_bdf(gpu["pci_bus_id"])
        tree["devices/%s" % bdf] = ("dir", None)
        for name, content in device_files(gpu).items():
            tree["devices/%s/%s" % (bdf, name)] = ("file", content if isinstance(content, bytes) else content.encode())
        if driver:
            tree["devices/%s/driver" % bdf] = ("link", "../../drivers/%s" % driver)
            tree["drivers/%s/%s" % (driver, bdf)] = ("link", "../../devices/%s" % bdf)
    return tree


def _current(path):
    if os.path.islink(path):
        return ("link", os.readlink(path))
    if os.path.isdir(path):
        return ("dir", None)
    with open(path, "rb") as handle:
        return ("file", handle.read())


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def sync_tree(base, tree):
    """Make ``base`` hold exactly ``tree`` without replacing ``base`` or its top directories."""
    changed = False
    os.makedirs(base, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(base, topdown=True):
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, base)
            if rel not in tree or tree[rel][0] != _current(path)[0]:
                _remove(path)
                changed = True
                if name in dirnames:
                    dirnames.remove(name)
    for rel in sorted(tree):
        kind, value = tree[rel]
        path = os.path.join(base, rel)
        if os.path.lexists(path) and _current(path) == (kind, value):
            continue
        if os.path.lexists(path):
            _remove(path)
        if kind == "dir":
            os.makedirs(path)
        elif kind == "link":
            os.symlink(value, path)
        else:
            with open(path, "wb") as handle:
                handle.write(value)
            os.chmod(path, 0o444)
        changed = True
    return changed


def load_profile(profiles, name):
    """The device list of profile ``name``."""
    path = os.path.join(profiles, "%s.json" % name)
    try:
        with open(path, encoding="utf-8") as handle:
            devices = json.load(handle).get("devices")
    except (OSError, ValueError) as exc:
        raise FakePciError("cannot read profile %s: %s" % (path, exc)) from exc
    if not isinstance(devices, list):
        raise FakePciError("profile %s has no 'devices' list" % path)
    return devices


def node_gpus(node, profiles):
    """(devices on the bus, bound driver) of one fleet node."""
    variant = node.get("variant")
    if variant == "gpu":
        if not node.get("profile"):
            raise FakePciError("node %s has variant gpu and no profile" % node.get("name"))
        return load_profile(profiles, node["profile"]), "nvidia"
    if variant == "nodriver":
        return load_profile(profiles, NODRIVER_PROFILE)[:NODRIVER_GPUS], None
    if variant == "base":
        return [], None
    raise FakePciError("node %s: unknown variant %r" % (node.get("name"), variant))


def generate(fleet_file, profiles, out, only=None):
    """Write the tree of every node (or of the nodes in ``only``); True when anything changed."""
    with open(fleet_file, encoding="utf-8") as handle:
        nodes = (yaml.safe_load(handle) or {}).get("nodes") or []
    changed = False
    for node in nodes:
        if only and node["name"] not in only:
            continue
        gpus, driver = node_gpus(node, profiles)
        changed |= sync_tree(os.path.join(out, node["name"]), node_tree(gpus, driver))
    return changed


def main(argv=None):
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--fleet", required=True, help="sandbox/fleet.yml")
    parser.add_argument("--profiles", required=True, help="directory of the GPU profiles (sandbox/profiles)")
    parser.add_argument("--out", required=True, help="output directory, one sub-directory per node")
    parser.add_argument("--node", action="append", help="only this node (repeatable)")
    args = parser.parse_args(argv)
    try:
        changed = generate(args.fleet, args.profiles, args.out, args.node)
    except FakePciError as exc:
        sys.stderr.write("fake_pci: ERROR: %s\n" % exc)
        return 1
    print("changed" if changed else "ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
