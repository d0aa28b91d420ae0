# SPDX-License-Identifier: GPL-3.0-or-later
"""AMD's ROCm device plugin, its node labeller and Intel's GPU plugin in the device-manager simulator.

The kubelet side, only where the vendor's pod runs, the way the real programs work:

* ROCm device plugin (ROCm/k8s-device-plugin cmd/k8s-device-plugin/main.go): a Running pod whose container runs
  ``k8s-device-plugin`` from a ``rocm/`` image, on a node whose profile is ``"vendor": "amd"`` with the amdgpu driver
  and its KFD (``/sys/class/kfd``; a profile may say ``"kfd": false``), makes the node advertise ``amd.com/<name>``
  by :func:`rocm_resources` (``-resource_naming_strategy`` single or mixed; with an unknown strategy, or GPUs in
  different partition modes under single, the plugin exits and nothing is advertised).
* Intel GPU plugin (intel/intel-device-plugins-for-kubernetes cmd/gpu_plugin/gpu_plugin.go): a Running pod of the
  ``intel-gpu-plugin`` image on a node whose profile is ``"vendor": "intel"`` advertises ``gpu.intel.com/<driver>``
  by :func:`intel_resources` (``-shared-dev-num``, ``-enable-monitoring``; a bad flag makes it exit).
* ROCm node labeller (cmd/k8s-node-labeller): a Running pod whose container runs ``k8s-node-labeller`` writes, once
  per pod (the labeller reconciles the Create event of its node only), the labels of :func:`labeller_labels` for its
  flags, after deleting every ``amd.com/*`` and ``beta.amd.com/*`` label (controller.go). It never removes its labels
  when it stops.

Only on kwok nodes: a kubelet node (sandbox/kubelet) runs the vendors' pods for real and its kubelet advertises what
they register, so the simulator writes nothing there (the fleet's AMD and Intel nodes are kwok nodes: the stand-in
images do not implement their plugins yet, sandbox/standins/README.md).

Resources go when the pod goes (the kubelet drops a plugin's devices when its socket goes). The rules are pure
functions over a profile and the container's arguments; :class:`VendorSimulator` is the event-loop side, attached to
the simulator like :class:`.nfd.NfdSimulator`.

Not simulated: health checks (-pulse), partitions other than those a profile's devices name
(``compute_partition``/``memory_partition``), PFs with VFs, the Intel resource manager, the labeller's firmware and
driver-src-version sources (empty), Allocate.
"""

from __future__ import annotations

import json
import logging
import posixpath


from .agents import NodeAgents, kwok_node
from .watcher import read_node_profile

LOG = logging.getLogger("devsim.vendors")
AMD_PREFIX = "amd.com"
INTEL_PREFIX = "gpu.intel.com"
PREFIXES = (AMD_PREFIX + "/", INTEL_PREFIX + "/")
LABELLER_PREFIXES = ("amd.com/", "beta.amd.com/")  # controller.go: removed before the labeller writes its own
STATE_ANNOTATION = "sandbox.kubegpu.io/vendor-plugins"
ROCM_STRATEGIES = ("single", "mixed")
INTEL_DRIVERS = ("i915", "xe")
INTEL_POLICIES = ("none", "balanced", "packed")


class PluginExit(Exception):
    """The program exits with this message (a bad flag, a node it refuses)."""


# --------------------------------------------------------------------------- flags (Go's flag package)


def parse_flags(argv, bools=()):
    """``{name: value}`` of Go-style flags: ``-name=value``, ``--name value``, bool ``-name`` (``"true"``)."""
    out, items, i = {}, [str(a) for a in argv], 0
    while i < len(items):
        item = items[i]
        i += 1
        if not item.startswith("-") or item in ("-", "--"):
            continue
        name, sep, value = item.lstrip("-").partition("=")
        if not sep:
            if name in bools:
                value = "true"
            elif i < len(items):
                value = items[i]
                i += 1
        out[name] = value
    return out


def program(container: dict) -> str:
    argv = list(container.get("command") or []) or list(container.get("args") or [])
    return posixpath.basename(str(argv[0])) if argv else ""


def arguments(container: dict, entrypoint: bool = False) -> list:
    """The program's arguments (after the program). ``entrypoint``: the image starts the program by its ENTRYPOINT
    (Intel's plugin images), so ``args`` alone are all arguments; otherwise (ROCm's images: a CMD) ``args`` without a
    ``command`` replace the CMD, program included."""
    command = list(container.get("command") or [])
    if command:
        return command[1:] + list(container.get("args") or [])
    return list(container.get("args") or []) if entrypoint else list(container.get("args") or [])[1:]


# --------------------------------------------------------------------------- which pods


def role(pod: dict):
    """``(role, container)``: ``rocm``, ``labeller`` or ``intel``, or ``(None, None)``."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        image = container.get("image") or ""
        name = program(container)
        if name == "k8s-node-labeller":
            return "labeller", container
        if name == "k8s-device-plugin" or (not container.get("command") and "rocm/k8s-device-plugin" in image
                                           and ":labeller" not in image):
            return "rocm", container
        if name == "intel_gpu_device_plugin" or (not container.get("command") and "intel-gpu-plugin" in image):
            return "intel", container
    return None, None


# --------------------------------------------------------------------------- the rules


def _devices(profile, vendor):
    if not profile or profile.get("vendor") != vendor:
        return []
    return list(profile.get("devices") or [])


def partition_type(device: dict):
    compute, memory = device.get("compute_partition"), device.get("memory_partition")
    return ("%s_%s" % (compute, memory)).lower() if compute and memory else None


def rocm_resources(profile, argv) -> dict:
    """What the ROCm plugin advertises (main.go): nothing without amdgpu and /sys/class/kfd; else by strategy,
    ``gpu`` for homogeneous GPUs under single (or without partition modes), one name per partition type under mixed.
    Raises :class:`PluginExit` where the plugin exits."""
    strategy = parse_flags(argv).get("resource_naming_strategy", "single")
    if strategy not in ROCM_STRATEGIES:
        raise PluginExit("invalid resource naming strategy: %s" % strategy)  # main.go ParseStrategy
    devices = _devices(profile, "amd")
    if not devices or profile.get("kernel_driver", "amdgpu") != "amdgpu" or profile.get("kfd") is False:
        return {}
    types = {}
    for device in devices:
        kind = partition_type(device)
        types[kind] = types.get(kind, 0) + 1
    if len(types) > 1:
        if strategy == "single":
            raise PluginExit("Partitions of different styles across GPUs in a node is not supported with single "
                             "strategy")
        return {"%s/%s" % (AMD_PREFIX, kind or "gpu"): count for kind, count in types.items()}
    kind = next(iter(types))
    if strategy == "single" or kind is None:
        return {AMD_PREFIX + "/gpu": len(devices)}
    return {"%s/%s" % (AMD_PREFIX, kind): len(devices)}


def intel_resources(profile, argv) -> dict:
    """What Intel's GPU plugin advertises (gpu_plugin.go main() and scan()): each card of the i915 or xe driver
    ``shared-dev-num`` times under ``gpu.intel.com/<driver>``; with -enable-monitoring ``<driver>_monitoring`` 1."""
    flags = parse_flags(argv, bools=("enable-monitoring", "resource-manager"))
    try:
        shared = int(flags.get("shared-dev-num", "1"))
    except ValueError as exc:
        raise PluginExit("invalid value for -shared-dev-num: %s" % exc)
    if shared < 1:
        raise PluginExit("The number of containers sharing the same GPU must greater than zero")
    if flags.get("allocation-policy", "none") not in INTEL_POLICIES:
        raise PluginExit("invalid value for preferredAllocationPolicy, the valid values: balanced, packed, none")
    monitoring = flags.get("enable-monitoring", "false") == "true"
    out = {}
    for device in _devices(profile, "intel"):
        driver = device.get("driver") or profile.get("kernel_driver")
        if driver not in INTEL_DRIVERS:
            continue
        name = "%s/%s" % (INTEL_PREFIX, driver)
        out[name] = out.get(name, 0) + shared
        if monitoring:
            out["%s/%s_monitoring" % (INTEL_PREFIX, driver)] = 1
    return out


def _create_labels(kind: str, entries: dict) -> dict:
    """main.go createLabels: ``beta.amd.com/gpu.<kind>.<value>`` = count for every value (and ``beta.amd.com/gpu.<kind>``
    = the value when there is one); ``amd.com/gpu.<kind>`` = the value when there is one, else per value its count."""
    labels = {}
    for key, count in entries.items():
        labels["beta.amd.com/gpu.%s.%s" % (kind, key)] = str(count)
        if len(entries) == 1:
            labels["beta.amd.com/gpu.%s" % kind] = key
            labels["amd.com/gpu.%s" % kind] = key
        else:
            labels["amd.com/gpu.%s.%s" % (kind, key)] = str(count)
    return labels


def _count(values) -> dict:
    out = {}
    for value in values:
        if value is not None and value != "":
            out[str(value)] = out.get(str(value), 0) + 1
    return out


def _go_round(value: float) -> int:
    return int(value + 0.5)  # math.Round for the positive sizes here (halves away from zero)


def labeller_labels(profile, argv) -> dict:
    """The labels the ROCm node labeller writes for its flags (main.go labelGenerators and generatePartitionLabels)."""
    flags = parse_flags(argv, bools=("vram", "cu-count", "simd-count", "device-id", "family", "product-name",
                                     "driver-version", "driver-src-version", "firmware"))
    devices = _devices(profile, "amd")
    if not devices:
        return {}

    def on(name):
        return flags.get(name) == "true"

    labels = {}
    if on("vram"):  # kfd mem_banks size_in_bytes, in MiB, then round(MiB / 1024) "G"
        labels.update(_create_labels("vram", _count("%dG" % _go_round(d["memory_total_mib"] / 1024.0)
                                                    for d in devices if d.get("memory_total_mib"))))
    if on("cu-count"):  # simd_count / simd_per_cu
        labels.update(_create_labels("cu-count", _count(d.get("cu_count") for d in devices)))
    if on("simd-count"):
        labels.update(_create_labels("simd-count", _count(d.get("simd_count") for d in devices)))
    if on("device-id"):  # /sys/class/drm/cardN/device/device without its 0x
        labels.update(_create_labels("device-id", _count(
            "%04x" % (int(str(d["pci_device_id"]), 16) >> 16) for d in devices if d.get("pci_device_id"))))
    if on("family"):
        labels.update(_create_labels("family", _count(d.get("family") for d in devices)))
    if on("product-name"):
        labels.update(_create_labels("product-name", _count(
            str(d.get("name") or "").replace(" ", "_").replace("(", "").replace(")", "") for d in devices)))
    if on("driver-version"):
        labels["amd.com/gpu.driver-version"] = str(profile.get("driver_version") or "")
    if on("driver-src-version"):
        labels["amd.com/gpu.driver-src-version"] = ""
    kinds = set(partition_type(d) for d in devices)
    if len(kinds) == 1 and None not in kinds:
        labels["amd.com/compute-memory-partition"] = next(iter(kinds))
    partitioned = any(partition_type(d) for d in devices)
    labels["amd.com/compute-partitioning-supported"] = "true" if partitioned else "false"
    labels["amd.com/memory-partitioning-supported"] = "true" if partitioned else "false"
    return labels


def labeller_patch(current: dict, wanted: dict) -> dict:
    """The merge patch of ``metadata.labels`` that leaves a node with ``wanted`` as its only labeller labels."""
    patch = {key: None for key in current
             if key.startswith(LABELLER_PREFIXES) and key not in wanted}
    patch.update({key: value for key, value in wanted.items() if current.get(key) != value})
    return patch


def desired_resources(profile, pods) -> tuple:
    """``({resource: count}, message)`` of one node from its profile and its Running vendor plugin pods."""
    resources, notes = {}, []
    for what, rule in (("rocm", rocm_resources), ("intel", intel_resources)):
        found = [(pod, container) for pod, (kind, container) in pods if kind == what]
        if not found:
            continue
        pod, container = max(found, key=lambda pc: (pc[0]["metadata"].get("creationTimestamp") or "",
                                                    pc[0]["metadata"]["name"]))
        try:
            got = rule(profile, arguments(container, entrypoint=what == "intel"))
        except PluginExit as exc:
            notes.append("%s plugin %s exits: %s" % (what, pod["metadata"]["name"], exc))
            continue
        resources.update(got)
        shown = json.dumps(got, sort_keys=True) if got else "nothing"
        notes.append("%s plugin %s advertises %s" % (what, pod["metadata"]["name"], shown))
    return resources, "; ".join(notes) or "no AMD or Intel plugin pod running"


# --------------------------------------------------------------------------- the loop


class VendorSimulator(NodeAgents):
    """Plays the kubelet for the ROCm and Intel GPU plugins and plays the ROCm node labeller, on the simulator's
    event loop (the simulator passes every event to :meth:`handle`; the bookkeeping is :class:`.agents.NodeAgents`')."""

    what = "the AMD/Intel plugins"

    def __init__(self, simulator):
        super().__init__(simulator)
        self.labelled = set()  # labeller pod uids that have written their labels

    def match(self, pod):
        found = role(pod)
        return None if found[0] is None else found

    def forget(self, uid):
        self.labelled.discard(uid)

    def reconcile(self, name):
        node = self.nodes.get(name)
        if node is None or not kwok_node(node):
            return  # a kubelet node's kubelet advertises what the plugins' own containers registered
        meta = node.get("metadata") or {}
        on_node = self.pods_on(name)
        profile = read_node_profile(name, meta.get("annotations") or {}, self.sim.profiles_dir) if on_node else None
        resources, message = desired_resources(profile, [(p, f) for p, f in on_node if f[0] in ("rocm", "intel")])
        status = node.get("status") or {}
        patch = {}
        for field in ("capacity", "allocatable"):
            current = {k: v for k, v in (status.get(field) or {}).items() if k.startswith(PREFIXES)}
            wanted = {k: str(v) for k, v in resources.items()}
            if current != wanted:
                change = {k: None for k in current if k not in wanted}
                change.update(wanted)
                patch[field] = change
        annotations = meta.get("annotations") or {}
        if (on_node or STATE_ANNOTATION in annotations) and annotations.get(STATE_ANNOTATION) != message:
            self.remember(self.sim.api.patch_node(name, {"metadata": {"annotations": {STATE_ANNOTATION: message}}},
                                                  _content_type="application/merge-patch+json", _preload_content=False))
        if patch:
            LOG.info("node %s: %s; patching status %s", name, message, json.dumps(patch, sort_keys=True))
            self.remember(self.sim.api.patch_node_status(name, {"status": patch},
                                                         _content_type="application/merge-patch+json",
                                                         _preload_content=False))
        for pod, (kind, container) in on_node:
            uid = pod["metadata"]["uid"]
            if kind != "labeller" or uid in self.labelled:
                continue
            wanted = labeller_labels(profile, arguments(container))
            change = labeller_patch((self.nodes[name].get("metadata") or {}).get("labels") or {}, wanted)
            if change:
                LOG.info("node %s: node labeller %s writes %s", name, pod["metadata"]["name"], json.dumps(change, sort_keys=True))
                self.remember(self.sim.api.patch_node(name, {"metadata": {"labels": change}},
                                                      _content_type="application/merge-patch+json", _preload_content=False))
            self.labelled.add(uid)
