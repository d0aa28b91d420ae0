# SPDX-License-Identifier: GPL-3.0-or-later
"""What the NVIDIA device plugin answers to Allocate and GetPreferredAllocation, as pure functions over the devices
the simulator's rules give (``rules.plugin_devices``) and the plugin's config (``rules.parse_config``).

Source: k8s-device-plugin v0.20.0 (HEAD 1b826ac has the same files):

* internal/plugin/server.go ``Allocate`` -> ``rm.ValidateRequest`` (internal/rm/rm.go: unknown ids; with
  ``failRequestsGreaterThanOne`` more than one replica is refused: "maximum request size for shared resources is 1;
  found N"), then ``getAllocateResponse``: the request's ids without their ``::N`` replica suffix, each once
  (``uniqueDeviceIDsFromAnnotatedDeviceIDs``; the devices' indexes under ``deviceIDStrategy: index``), then per
  strategy:
  - ``cdi-annotations``: ``cdi.k8s.io/nvidia-device-plugin_<response uuid>`` = the CDI names joined by ``,``
    (tags.cncf.io/container-device-interface pkg/cdi/annotations.go UpdateAnnotations, AnnotationKey);
    ``cdi-cri``: the CDI names as ``cdi_devices``; a CDI name is ``k8s.device-plugin.nvidia.com/gpu=<id>``
    (internal/cdi/cdi.go QualifiedName, class gpu; the vendor is cmd/nvidia-device-plugin/plugin-manager.go's
    ``cdi.WithVendor("k8s.device-plugin.nvidia.com")``, the vendor of the spec the plugin writes to /var/run/cdi);
  - nothing else when every strategy is a CDI one (``AllCDIEnabled``);
  - ``envvar``: ``NVIDIA_VISIBLE_DEVICES`` = the ids joined by ``,``;
  - ``volume-mounts``: ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and one mount per id from
    ``/dev/null`` to ``/var/run/nvidia-container-devices/<id>``;
  - ``passDeviceSpecs``: the device nodes of the requested devices (``apiDeviceSpecs``: ``/dev/nvidia<minor>``).
  - MPS (internal/plugin/mps.go ``updateReponse``): ``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and mounts of the
    host's ``<mpsRoot>/<resource>/pipe`` and ``<mpsRoot>/shm`` (cmd/mps-control-daemon/mps/root.go).
* internal/rm/nvml_manager.go ``getPreferredAllocation``: whole GPUs without replicas go to go-gpuallocator's
  best-effort policy (NVLink and PCIe topology); replicas and MIG devices to ``greedyAlloc`` (internal/rm/allocate.go)
  with the ``distributed`` (default) or ``packed`` policy.

Stand-in simplification (said in sandbox/standins/README.md): for whole GPUs without replicas the answer is the
required devices, then the available ones in the order the plugin lists them, not go-gpuallocator's topology score.
"""

from __future__ import annotations

import posixpath

CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_CLASS = "gpu"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"  # spec.DefaultCDIAnnotationPrefix
CDI_PLUGIN_NAME = "nvidia-device-plugin"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"


class AllocateError(Exception):
    """Allocate refuses the request; the kubelet fails the pod's admission with this text."""


def replica_base(device_id):
    """``<uuid>::<n>`` -> ``<uuid>`` (AnnotatedID.GetID)."""
    return device_id.split("::", 1)[0]


def validate(resource, devices, config, ids):
    """rm.ValidateRequest: every id known; at most one replica where failRequestsGreaterThanOne."""
    known = {dev.id for dev in devices}
    for dev_id in ids:
        if dev_id not in known:
            raise AllocateError("invalid allocation request for %r: invalid request: unknown device: %s"
                                % (resource, dev_id))
    sharing = config.sharing
    if sharing is not None and sharing.fail_requests_greater_than_one and len(ids) > 1 and \
            any("::" in dev_id for dev_id in ids):
        raise AllocateError("invalid allocation request for %r: invalid request: maximum request size for shared "
                            "resources is 1; found %d" % (resource, len(ids)))


def container_ids(devices, config, ids):
    """The ids the container is given: unique, without replica suffixes; the indexes under ``index``."""
    by_id = {dev.id: dev for dev in devices}
    out = []
    for dev_id in ids:
        value = by_id[dev_id].index if config.device_id_strategy == "index" else replica_base(dev_id)
        if value not in out:
            out.append(value)
    return out


def cdi_name(device_id):
    return "%s/%s=%s" % (CDI_VENDOR, CDI_CLASS, device_id)


def container_response(resource, devices, config, ids, response_id, dev_root="/", mps_container_root="/mps"):
    """One ContainerAllocateResponse as a dict: ``envs``, ``annotations``, ``mounts`` and ``devices`` (lists of dicts of
    the API's field names), ``cdi_devices`` (names). ``response_id``: the uuid the plugin draws for the annotation key."""
    validate(resource, devices, config, ids)
    visible = container_ids(devices, config, ids)
    strategies = set(config.device_list_strategy)
    cdi = {"cdi-annotations", "cdi-cri"}
    out = {"envs": {}, "annotations": {}, "mounts": [], "devices": [], "cdi_devices": []}
    names = [cdi_name(v) for v in visible]
    if strategies & cdi and names:
        if "cdi-annotations" in strategies:
            out["annotations"][CDI_ANNOTATION_PREFIX + CDI_PLUGIN_NAME + "_" + response_id] = ",".join(names)
        if "cdi-cri" in strategies:
            out["cdi_devices"] = names
    if config.sharing is not None and config.sharing.strategy == "mps":
        pipe = posixpath.join(mps_container_root, resource, "pipe")
        out["envs"]["CUDA_MPS_PIPE_DIRECTORY"] = pipe
        out["mounts"] += [{"container_path": pipe, "host_path": posixpath.join(config.mps_root, resource, "pipe")},
                          {"container_path": "/dev/shm", "host_path": posixpath.join(config.mps_root, "shm")}]
    if strategies <= cdi:
        return out
    if "envvar" in strategies:
        out["envs"][VISIBLE_DEVICES] = ",".join(visible)
    if "volume-mounts" in strategies:
        out["envs"][VISIBLE_DEVICES] = VOLUME_MOUNTS_ROOT
        out["mounts"] += [{"container_path": posixpath.join(VOLUME_MOUNTS_ROOT, v), "host_path": VOLUME_MOUNTS_HOST_PATH}
                          for v in visible]
    if getattr(config, "pass_device_specs", False):
        by_id = {dev.id: dev for dev in devices}
        paths = []
        for dev_id in ids:
            minor = by_id[dev_id].minor
            path = "/dev/nvidia%d" % minor if minor is not None else None
            if path and path not in paths:
                paths.append(path)
        out["devices"] = [{"container_path": p, "host_path": posixpath.join(dev_root, p.lstrip("/")),
                           "permissions": "rw"} for p in paths]
    return out


def preferred(devices, config, available, required, size):
    """GetPreferredAllocation for one container: ``size`` ids from ``available``, ``required`` first."""
    if size <= len(required):
        return list(required)
    order = {dev.id: n for n, dev in enumerate(devices)}
    candidates = sorted((d for d in available if d not in required), key=lambda d: order.get(d, len(order)))
    needed = size - len(required)
    if len(candidates) < needed:
        raise AllocateError("not enough available devices to satisfy allocation")
    if not any("::" in d for d in available) and all(":" not in dev.index for dev in devices):
        return list(required) + candidates[:needed]  # stand-in for go-gpuallocator's best effort (module docstring)
    # greedyAlloc: per physical device, replicas in total and still available; the policy's comparator on allocated
    # counts, then the fewest picked this round
    total, free = {}, {}
    for dev in devices:
        total[dev.uuid] = total.get(dev.uuid, 0) + 1
    for cand in candidates:
        free[replica_base(cand)] = free.get(replica_base(cand), 0) + 1
    picked = {}
    packed = getattr(config, "allocation_policy", "") == "packed"
    chosen = []
    for _round in range(needed):
        def key(cand):
            base = replica_base(cand)
            allocated = total.get(base, 1) - free.get(base, 0)
            return (-allocated if packed else allocated, picked.get(base, 0))
        candidates.sort(key=key)  # a stable sort, like Go's sort.Slice on an equal key keeps no order: ours keeps it
        cand = candidates.pop(0)
        base = replica_base(cand)
        picked[base] = picked.get(base, 0) + 1
        free[base] -= 1
        chosen.append(cand)
    return list(required) + chosen
