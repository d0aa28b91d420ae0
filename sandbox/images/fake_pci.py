# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate per-node fake PCI sysfs trees for the simulated fleet.

For every node of ``sandbox/fleet.yml`` this writes ``OUT/<node>/devices`` and ``OUT/<node>/drivers``, and
``OUT/<node>/class`` and ``OUT/<node>/module``.
The node containers bind-mount the first two read-only over ``/sys/bus/pci/devices`` and ``/sys/bus/pci/drivers``
(``sandbox/images/nodes.yml``), so that code reading sysfs sees the GPUs of the node's profile. The amd and intel
variants also get the other two as read-only overlay layers on top of ``/sys/class`` and ``/sys/module`` (the
real entries stay visible; see nodes.yml), which is what their kernel drivers would add:

* ``class/drm/card<N>`` and ``class/drm/renderD<128+N>`` with a ``device`` link to the PCI device and a ``dev``
  file; Intel's i915 ``card<N>/lmem_total_bytes`` (local memory per tile) and ``card<N>/gt/gt<T>`` (tiles);
* AMD: ``class/kfd/kfd/topology/nodes/<n>/{gpu_id,name,properties}`` (node 0 the CPU, one node per GPU), the
  PCI device's ``mem_info_vram_total``; Intel xe: the PCI device's ``tile<T>/physical_vram_size_bytes``;
* ``module/<driver>/{initstate,version}`` and ``module/<driver>/drivers/pci:<driver>`` linked to the PCI driver
  folder, the way the ROCm device plugin finds its GPUs;
* a profile whose ``kernel_driver`` is null gives the GPUs on the bus and nothing else (driver not loaded).

* ``devices/0000:3b:00.0/{vendor,device,class,subsystem_vendor,subsystem_device,revision,config,numa_node,resource}``,
  in the format of the kernel (``0x10de\\n``), ``config`` holding the first 64 bytes of the configuration space,
  ``resource`` the BARs (see ``device_files``);
* ``devices/<bdf>/driver -> ../../drivers/nvidia`` and ``drivers/nvidia/<bdf> -> ../../devices/<bdf>`` when
  a driver is bound (variant gpu; amdgpu, i915 or xe for the amd and intel variants); the nodriver variant has the
  GPU on the bus and no driver; the base variant has an empty bus.

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vendor_profiles  # noqa: E402  pylint: disable=wrong-import-position

NVIDIA_VENDOR = 0x10DE
CLASS_3D = 0x030200
CLASS_VGA = 0x030000
CLASS_DISPLAY_OTHER = 0x038000  # what AMD Instinct and Intel Data Center GPUs show (lspci "Display controller")
# The sysfs-driver variants and the vendor of their profiles.
VENDOR_VARIANTS = ("amd", "intel")
DRM_RENDER_BASE = 128
MIB = 1024 * 1024
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
    """PCI class code of a profile device (its ``pci_class`` where a vendor profile gives one)."""
    if "pci_class" in gpu:
        return _int(gpu["pci_class"])
    if "vendor" in gpu:
        return CLASS_DISPLAY_OTHER
    brand = str(gpu.get("brand", "")).lower()
    if brand in VGA_BRANDS or "geforce" in str(gpu.get("name", "")).lower():
        return CLASS_VGA
    return CLASS_3D


# The kernel's resource file: one "start end flags" line per resource (the six BARs, the expansion ROM, the six SR-IOV
# BARs), each value as 0x%016x (drivers/pci/pci-sysfs.c resource_show). The flags of a BAR the kernel assigned:
# 32-bit memory (IORESOURCE_MEM | IORESOURCE_SIZEALIGN) and 64-bit prefetchable memory (| IORESOURCE_PREFETCH |
# IORESOURCE_MEM_64), as an NVIDIA GPU's BAR0 (registers) and BAR1/BAR3 (framebuffer aperture, RAM-in) show them.
PCI_RESOURCES = 13
BAR_FLAGS_MEM32 = 0x40200
BAR_FLAGS_MEM64_PREFETCH = 0x14220C
MIB_BYTES = 1024 * 1024


def _bars(gpu, bus):
    """(start, end, flags) of each of the PCI_RESOURCES resources of a GPU on ``bus``: BAR0 16 MiB of registers,
    BAR1 the framebuffer aperture (the memory rounded up to a power of two, as data-centre boards map it whole), BAR3
    32 MiB; every other line zero. Addresses are made up per bus, apart from each other."""
    memory = int(gpu.get("memory_total_mib") or 256) * MIB_BYTES
    aperture = 1 << max(28, (memory - 1).bit_length())
    bar0 = 0xE0000000 + (bus << 24)
    bar1 = 0x200000000000 + bus * (1 << 38)
    bar3 = bar1 + aperture
    lines = [(0, 0, 0)] * PCI_RESOURCES
    lines[0] = (bar0, bar0 + 16 * MIB_BYTES - 1, BAR_FLAGS_MEM32)
    lines[1] = (bar1, bar1 + aperture - 1, BAR_FLAGS_MEM64_PREFETCH)
    lines[3] = (bar3, bar3 + 32 * MIB_BYTES - 1, BAR_FLAGS_MEM64_PREFETCH)
    return lines


def device_files(gpu, vendor_id=NVIDIA_VENDOR):
    """The sysfs attribute files of one profile device: name -> content. ``vendor_id``: the PCI vendor the node's
    profile is of (NVIDIA's for the fake NVML's profiles).

    Besides the ids and the configuration space, ``numa_node`` (the profile's, as the fake NVML answers its topology
    calls from it: 0 when the profile has none; -1, "no NUMA affinity", for the sysfs-only vendor profiles) and
    ``resource``: GPU feature discovery reads both for every GPU (go-nvlib pkg/nvpci getNvidiaDeviceByPciBusID, which
    fails without them, so that GFD labels ``gpu.mode=unknown``), and the device plugin the NUMA node for its
    topology hints (internal/rm/nvml_devices.go GetNumaNode)."""
    ident = _int(gpu["pci_device_id"])
    subsys = _int(gpu.get("pci_subsystem_id", ident))
    vendor, device = ident & 0xFFFF, ident >> 16
    if vendor != vendor_id:
        raise FakePciError("pci_device_id %#010x of %s is not of the profile's vendor %#06x"
                           % (ident, gpu.get("name"), vendor_id))
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
    bus = int(sysfs_bdf(gpu["pci_bus_id"]).split(":")[1], 16)
    numa = gpu.get("numa_node", 0 if vendor_id == NVIDIA_VENDOR else -1)
    return {
        "vendor": "0x%04x\n" % vendor,
        "device": "0x%04x\n" % device,
        "subsystem_vendor": "0x%04x\n" % sub_vendor,
        "subsystem_device": "0x%04x\n" % sub_device,
        "class": "0x%06x\n" % klass,
        "revision": "0x%02x\n" % revision,
        "config": config,
        "numa_node": "%d\n" % numa,
        "resource": "".join("0x%016x 0x%016x 0x%016x\n" % line for line in _bars(gpu, bus)),
    }


def node_tree(gpus, driver, vendor=vendor_profiles.NVIDIA, driver_version=None):
    """Desired tree of one node: relative path -> ('dir', None) | ('file', bytes) | ('link', target).

    ``vendor``: ``nvidia`` (the PCI bus only), ``amd`` or ``intel`` (also what the driver adds under class/ and
    module/ when ``driver`` is set)."""
    tree = {"devices": ("dir", None), "drivers": ("dir", None), "class": ("dir", None), "module": ("dir", None)}
    vendor_id = vendor_profiles.VENDORS[vendor][0] if vendor in vendor_profiles.VENDORS else NVIDIA_VENDOR
    if driver and gpus:
        tree["drivers/%s" % driver] = ("dir", None)
    for gpu in gpus:
        bdf = sysfs_bdf(gpu["pci_bus_id"])
        tree["devices/%s" % bdf] = ("dir", None)
        files = device_files(dict(gpu, vendor=vendor) if vendor in VENDOR_VARIANTS else gpu, vendor_id)
        for name, content in files.items():
            tree["devices/%s/%s" % (bdf, name)] = ("file", content if isinstance(content, bytes) else content.encode())
        if driver:
            tree["devices/%s/driver" % bdf] = ("link", "../../drivers/%s" % driver)
            tree["drivers/%s/%s" % (driver, bdf)] = ("link", "../../devices/%s" % bdf)
    if vendor in VENDOR_VARIANTS:
        tree.update(_driver_tree(gpus, driver, vendor, driver_version))
    return tree


def _file(text):
    return ("file", (text if text.endswith("\n") else text + "\n").encode())


def _driver_tree(gpus, driver, vendor, driver_version):
    """What a loaded amdgpu, i915 or xe adds to sysfs for ``gpus`` (nothing when ``driver`` is None): DRM nodes,
    memory, tiles, the KFD topology, the module."""
    tree = {}
    if not driver:
        return tree
    tree.update({"class/drm": ("dir", None), "module/%s" % driver: ("dir", None),
                 "module/%s/initstate" % driver: _file("live"), "module/%s/drivers" % driver: ("dir", None),
                 # /sys/module/<driver>/drivers/pci:<driver> -> /sys/bus/pci/drivers/<driver>
                 "module/%s/drivers/pci:%s" % (driver, driver): ("link", "../../../bus/pci/drivers/%s" % driver)})
    if driver_version:
        tree["module/%s/version" % driver] = _file(driver_version)
    if vendor == "amd":
        tree.update({"class/kfd": ("dir", None), "class/kfd/kfd": ("dir", None),
                     "class/kfd/kfd/topology": ("dir", None), "class/kfd/kfd/topology/nodes": ("dir", None)})
        tree.update(_kfd_node(0, None, None, None))  # node 0: the CPU
    for index, gpu in enumerate(gpus):
        bdf = sysfs_bdf(gpu["pci_bus_id"])
        card, render = "card%d" % index, "renderD%d" % (DRM_RENDER_BASE + index)
        memory = gpu.get("memory_total_mib")
        for name, minor in ((card, index), (render, DRM_RENDER_BASE + index)):
            # /sys/class/drm/<name>/device -> the PCI device; the PCI device's drm/<name> (the plugins glob it)
            tree.update({"class/drm/%s" % name: ("dir", None),
                         "class/drm/%s/device" % name: ("link", "../../../bus/pci/devices/%s" % bdf),
                         "class/drm/%s/dev" % name: _file("226:%d" % minor),
                         "devices/%s/drm" % bdf: ("dir", None),
                         "devices/%s/drm/%s" % (bdf, name): ("dir", None),
                         "devices/%s/drm/%s/dev" % (bdf, name): _file("226:%d" % minor)})
        tiles = gpu.get("tiles", 1)
        if vendor == "amd":
            if memory is not None:
                tree["devices/%s/mem_info_vram_total" % bdf] = _file(str(memory * MIB))
            tree.update(_kfd_node(index + 1, gpu, bdf, DRM_RENDER_BASE + index))
        elif driver == "i915":
            for tile in range(tiles):
                tree["class/drm/%s/gt" % card] = ("dir", None)
                tree["class/drm/%s/gt/gt%d" % (card, tile)] = ("dir", None)
            if memory is not None:
                tree["class/drm/%s/lmem_total_bytes" % card] = _file(str(memory * MIB // tiles))
        else:  # xe
            for tile in range(tiles):
                tree["devices/%s/tile%d" % (bdf, tile)] = ("dir", None)
                if memory is not None:
                    tree["devices/%s/tile%d/physical_vram_size_bytes" % (bdf, tile)] = _file(str(memory * MIB // tiles))
    return tree


def _kfd_node(number, gpu, bdf, render_minor):
    """One node of the KFD topology (Linux amdkfd kfd_topology.c): ``gpu_id`` (0 for a CPU), ``name`` and the
    ``properties`` lines ROCm's tools and the ROCm device plugin read."""
    base = "class/kfd/kfd/topology/nodes/%d" % number
    if gpu is None:
        return {base: ("dir", None), base + "/gpu_id": _file("0"), base + "/name": _file(""),
                base + "/properties": _file("cpu_cores_count 64\nsimd_count 0\nvendor_id 0\ndevice_id 0\n"
                                            "drm_render_minor 0\ngfx_target_version 0")}
    domain, bus, devfn = bdf.split(":")
    device, function = (int(x, 16) for x in devfn.split("."))
    location = (int(bus, 16) << 8) | (device << 3) | function
    version = gpu.get("gfx_target_version", 0)
    simd, per_cu = gpu.get("simd_count", 0), gpu.get("simd_per_cu", 4)
    cu_count = gpu.get("cu_count", simd // per_cu if per_cu else 0)
    arrays = 8 if cu_count % 8 == 0 or cu_count > 8 else 1
    properties = [
        ("cpu_cores_count", 0), ("simd_count", simd), ("mem_banks_count", 1), ("array_count", arrays),
        ("simd_arrays_per_engine", 1), ("cu_per_simd_array", cu_count // arrays if arrays else 0),
        ("simd_per_cu", per_cu), ("max_waves_per_simd", 8), ("wave_front_size", 64),
        ("gfx_target_version", version), ("vendor_id", _int(gpu["pci_device_id"]) & 0xFFFF),
        ("device_id", _int(gpu["pci_device_id"]) >> 16), ("location_id", location), ("domain", int(domain, 16)),
        ("drm_render_minor", render_minor), ("num_xcc", gpu.get("num_xcc", 1)),
        ("unique_id", 0x5A00000000000000 | location), ("local_mem_size", 0),
    ]
    name = "gfx%d%x%x" % (version // 10000, (version // 100) % 100, version % 100) if version else ""
    return {base: ("dir", None),
            # a stable, non-zero id per GPU (the kernel hashes the GPU's properties into it)
            base + "/gpu_id": _file(str(0x1000 + location)),
            base + "/name": _file(name),
            base + "/properties": _file("\n".join("%s %d" % item for item in properties))}


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


def load_profile_data(profiles, name):
    """Profile ``name`` (a file of ``profiles``, or a path ending in .json), parsed."""
    path = name if name.endswith(".json") else os.path.join(profiles, "%s.json" % name)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise FakePciError("cannot read profile %s: %s" % (path, exc)) from exc
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise FakePciError("profile %s has no 'devices' list" % path)
    return data


def load_profile(profiles, name):
    """The device list of profile ``name``."""
    return load_profile_data(profiles, name)["devices"]


def node_spec(node, profiles):
    """(devices on the bus, bound driver, vendor, driver version) of one fleet node."""
    variant = node.get("variant")
    if variant in ("gpu",) + VENDOR_VARIANTS:
        if not node.get("profile"):
            raise FakePciError("node %s has variant %s and no profile" % (node.get("name"), variant))
        data = load_profile_data(profiles, node["profile"])
        vendor = vendor_profiles.vendor_of(data)
        if vendor != ("nvidia" if variant == "gpu" else variant):
            raise FakePciError("node %s has variant %s but its profile %s is of vendor %s"
                               % (node.get("name"), variant, node["profile"], vendor))
        if variant == "gpu":
            return data["devices"], "nvidia", vendor, None
        try:
            vendor_profiles.validate(data)
        except vendor_profiles.VendorProfileError as exc:
            raise FakePciError("profile %s: %s" % (node["profile"], exc)) from exc
        return data["devices"], data["kernel_driver"], vendor, data.get("driver_version")
    if variant == "nodriver":
        return load_profile(profiles, NODRIVER_PROFILE)[:NODRIVER_GPUS], None, "nvidia", None
    if variant == "base":
        return [], None, "nvidia", None
    raise FakePciError("node %s: unknown variant %r" % (node.get("name"), variant))


def node_gpus(node, profiles):
    """(devices on the bus, bound driver) of one fleet node."""
    return node_spec(node, profiles)[:2]


def generate(fleet_file, profiles, out, only=None):
    """Write the tree of every node (or of the nodes in ``only``); True when anything changed."""
    with open(fleet_file, encoding="utf-8") as handle:
        nodes = (yaml.safe_load(handle) or {}).get("nodes") or []
    changed = False
    for node in nodes:
        if only and node["name"] not in only:
            continue
        gpus, driver, vendor, version = node_spec(node, profiles)
        changed |= sync_tree(os.path.join(out, node["name"]), node_tree(gpus, driver, vendor, version))
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
