# SPDX-License-Identifier: GPL-3.0-or-later
"""What the NVIDIA device plugin makes the kubelet advertise, as pure functions.

``parse_config`` turns the plugin's config file, environment and command line into a
``PluginConfig`` the way k8s-device-plugin v0.20.0 does (``api/config/v1``,
``cmd/nvidia-device-plugin/main.go``); ``advertised_resources`` turns a GPU profile (the
JSON file the fake NVML reads) and that config into ``{resource name: count}`` the way
``internal/rm`` builds its device map and the kubelet then counts devices per resource.

Everything the plugin refuses raises ``PluginError``: a real plugin exits (or blocks)
and the kubelet advertises nothing for it.

Rules followed (REFERENCE.md section 1, and the plugin source):

* Precedence is command line, then environment, then file. Defaults: ``migStrategy: none``.
* ``version`` must be empty or ``v1``.
* ``sharing.timeSlicing`` / ``sharing.mps``: ``resources`` must be present and non-empty; each
  needs ``name`` and ``replicas`` (``replicas < 2`` is an error); ``devices`` is ``all``, a count
  > 0 or a list of GPU indexes, ``gpu:mig`` indexes or GPU-/MIG- UUIDs. Names get the
  ``nvidia.com/`` prefix, at most 63 characters, DNS-subdomain syntax.
* The plugin then ignores per-resource ``rename`` and ``devices`` (``DisableResourceNamingInConfig``,
  logged as "not yet supported in the config. Ignoring..."): every device of the named resource
  is replicated, and the replicas are advertised as ``<name>.shared`` when ``renameByDefault``
  is true, under ``<name>`` otherwise. ``resources.gpus``/``resources.mig`` are ignored too.
* If ``sharing.mps`` is present its resources are the active ones (MPS); otherwise time-slicing.
  MPS forces ``failRequestsGreaterThanOne``; it is refused with ``migStrategy=mixed``, without
  an MPS root, and on MIG devices.
* MIG: ``none`` advertises every GPU as ``nvidia.com/gpu`` (MIG mode or not). ``single`` and
  ``mixed`` skip MIG-enabled GPUs and advertise their MIG devices instead, named as go-nvlib's
  GetProfile names them (from the GPU/compute instance profile constants and the memory, so
  ``1g.10gb+me`` and ``1c.2g.20gb`` come out as such): ``single`` as ``nvidia.com/gpu`` (every MIG
  device's NVML attributes equal, no mix of MIG and non-MIG GPUs, no MIG-enabled GPU without MIG
  devices), ``mixed`` as ``nvidia.com/mig-<profile>`` with ``+`` turned into ``.`` for profiles
  whose compute and GPU instance sizes are equal; a ``1c.2g.20gb`` device matches no resource
  pattern (patterns match whole names) and the plugin exits. Under ``mixed`` a GPU with MIG on and
  no MIG devices is only a warning and advertises nothing.
* A resource with zero devices is not advertised at all (the plugin does not start it).
* NVML: a GPU whose handle, name, UUID, minor number, PCI info or compute capability NVML does
  not give ends the plugin (go-nvlib's visitors stop at the first error; a lost GPU takes the
  node down); a failed memory read is only logged, except on a MIG-capable GPU under ``mixed``,
  where go-nvlib's VisitMigProfiles needs it. An error injected on any ABI version of a call
  (``_v2``, ``_v3``) counts: go-nvml binds the newest version the library has.

Where the simulator has to guess (no GPU, no kubelet here):

* Health (``unhealthy_devices``): a profile's XID events all count, whatever their ``after_ms``; where the plugin
  keeps one of several devices of a GPU at random (Go's map order), the event's own device is taken.
* MPS: the plugin advertises its replicas only once the MPS control daemon answers on the node;
  the watcher decides that from the daemon's pods, not these rules.
* ``failOnInitError`` does not change the outcome: failing and blocking both advertise nothing.
* The MIG capability device paths (``/proc/driver/nvidia-caps/mig-minors``) are assumed
  complete, as the driver writes them for every possible GPU/compute instance.
"""

from __future__ import annotations

import dataclasses
import math
import re
import uuid

import yaml

RESOURCE_PREFIX = "nvidia.com"
GPU_RESOURCE = RESOURCE_PREFIX + "/gpu"
MAX_RESOURCE_NAME_LENGTH = 63

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
ALLOCATION_POLICIES = ("", "distributed", "packed")

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(r"^" + _DNS_LABEL + r"(\." + _DNS_LABEL + r")*$")
_MIG_PROFILE = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<mem>\d+)gb(?P<attrs>(?:\+[a-z0-9]+)*)$")


class PluginError(ValueError):
    """The device plugin would fail (config, NVML or device layout) and advertise nothing."""


@dataclasses.dataclass(frozen=True)
class ReplicatedResource:
    """One ``sharing.*.resources[]`` entry after the plugin's own post-processing."""

    name: str
    replicas: int
    rename: str = ""


@dataclasses.dataclass(frozen=True)
class Sharing:
    """The active sharing strategy (``time-slicing`` or ``mps``) and its resources."""

    strategy: str
    resources: tuple
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False


@dataclasses.dataclass(frozen=True)
class PluginConfig:
    """The parts of the plugin's final config that decide what is advertised."""

    mig_strategy: str = "none"
    sharing: Sharing | None = None
    mps_root: str = ""
    device_list_strategy: tuple = ("envvar",)
    device_id_strategy: str = "uuid"
    fail_on_init_error: bool = True
    warnings: tuple = ()
    health: "HealthChecks" = None
    pass_device_specs: bool = False
    allocation_policy: str = ""
    driver_root: str = "/"
    container_driver_root: str = "/driver-root"
    nvidia_ctk_path: str = "/usr/bin/nvidia-ctk"


@dataclasses.dataclass(frozen=True)
class HealthChecks:
    """The XIDs the plugin's health check ignores, read from its environment as internal/rm/health.go reads it
    (getDisabledHealthCheckXids): ``entries`` maps an XID to "disabled" (True) or "enabled" (False); XID 0 stands for
    every XID."""

    entries: tuple = ()

    def table(self) -> dict:
        return dict(self.entries)

    def all_disabled(self) -> bool:
        """IsAllDisabled: only the "all" entry counts, so an enabled XID does not bring the check back."""
        return self.table().get(0, False)

    def disabled(self, xid: int) -> bool:
        table = self.table()
        if 0 in table and not table[0]:
            return False  # DP_ENABLE_HEALTHCHECKS=all
        if xid in table:
            return table[xid]
        return self.all_disabled()


# Application errors the plugin always ignores (health.go ignoredXids)
IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


def _xid_list(text: str) -> dict:
    """newHealthCheckXIDs: comma-separated XIDs; ``all`` or ``xids`` anywhere means every XID; what does not parse as
    an unsigned number is skipped."""
    out = {}
    for part in (text or "").lower().split(","):
        part = part.strip()
        if part in ("all", "xids"):
            return {0: True}
        if part.isdigit() and part.isascii():
            out[int(part)] = True
    return out


def health_checks(env: dict) -> HealthChecks:
    """The plugin's health-check XIDs from ``DP_DISABLE_HEALTHCHECKS`` and ``DP_ENABLE_HEALTHCHECKS``."""
    table = _xid_list(env.get("DP_DISABLE_HEALTHCHECKS", ""))
    for xid in IGNORED_XIDS:
        table[xid] = True
    for xid in _xid_list(env.get("DP_ENABLE_HEALTHCHECKS", "")):
        table[xid] = False
    return HealthChecks(tuple(sorted(table.items())))


# --------------------------------------------------------------------------- parsing


def resource_name(raw) -> str:
    """Return the fully qualified resource name the plugin builds from ``raw`` (NewResourceName)."""
    if not isinstance(raw, str):
        raise PluginError("resource name must be a string, got %r" % (raw,))
    name = raw if raw.startswith(RESOURCE_PREFIX + "/") else RESOURCE_PREFIX + "/" + raw
    if len(name) > MAX_RESOURCE_NAME_LENGTH:
        raise PluginError("fully-qualified resource name must be %d characters or less: %s" % (MAX_RESOURCE_NAME_LENGTH, name))
    short = name.split("/", 1)[1]
    if len(short) > 253 or not _DNS_SUBDOMAIN.match(short):
        raise PluginError("incorrect format for resource name '%s'" % name)
    return name


def _is_uint_string(value: str) -> bool:
    return value.isdigit() and value.isascii()


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _valid_device_ref(ref: str) -> bool:
    if _is_uint_string(ref):
        return True
    parts = ref.split(":")
    if len(parts) == 2 and all(_is_uint_string(p) for p in parts):
        return True
    if ref.startswith("GPU-"):
        return _is_uuid(ref[4:])
    if ref.startswith("MIG-"):
        suffix = ref[4:]
        if _is_uuid(suffix):
            return True
        pieces = suffix.split("/", 2)
        return len(pieces) == 3 and pieces[0].startswith("GPU-") and _is_uuid(pieces[0][4:]) and all(_is_uint_string(p) for p in pieces[1:])
    return False


def _check_devices(devices) -> bool:
    """Validate a ``devices`` value like ReplicatedDevices.UnmarshalJSON; return True if it means 'all'."""
    if isinstance(devices, str):
        if devices != "all":
            raise PluginError("devices set as '%s' but the only valid string input is 'all'" % devices)
        return True
    if isinstance(devices, int) and not isinstance(devices, bool):
        if devices <= 0:
            raise PluginError("devices set as '%d' but a count of devices must be > 0" % devices)
        return False
    if isinstance(devices, list):
        for item in devices:
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                continue
            if isinstance(item, str) and _valid_device_ref(item):
                continue
            raise PluginError("unsupported type for device in devices list: %r" % (item,))
        return False
    raise PluginError("unrecognized type for devices spec: %r" % (devices,))


def _bool_field(section: dict, key: str, where: str) -> bool:
    value = section.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise PluginError("%s.%s must be a boolean, got %r" % (where, key, value))
    return value


def _parse_replicated(section, where: str, warnings: list) -> tuple:
    """Parse a ReplicatedResources block; return (renameByDefault, failRequestsGreaterThanOne, resources)."""
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise PluginError("%s must be a mapping" % where)
    rename_by_default = _bool_field(section, "renameByDefault", where)
    fail_gt_one = _bool_field(section, "failRequestsGreaterThanOne", where)
    raw_resources = section.get("resources")
    if "resources" not in section or raw_resources is None or raw_resources == []:
        raise PluginError("no resources specified")
    if not isinstance(raw_resources, list):
        raise PluginError("%s.resources must be a list" % where)
    resources = []
    sets_rename = sets_devices = False
    for raw in raw_resources:
        if not isinstance(raw, dict):
            raise PluginError("%s.resources entries must be mappings" % where)
        if "name" not in raw:
            raise PluginError("no resource name specified")
        name = resource_name(raw["name"])
        is_all = _check_devices(raw.get("devices", "all"))
        if "replicas" not in raw:
            raise PluginError("no replicas specified")
        replicas = raw["replicas"]
        if not isinstance(replicas, int) or isinstance(replicas, bool):
            raise PluginError("replicas must be an integer, got %r" % (replicas,))
        if replicas < 2:
            raise PluginError("number of replicas must be >= 2")
        rename = resource_name(raw["rename"]) if raw.get("rename") else ""
        # renameByDefault fills in <name>.shared, then DisableResourceNamingInConfig drops any
        # other rename and any device subset.
        if rename_by_default and not rename:
            rename = name + ".shared"
        effective = name + ".shared" if rename_by_default else ""
        sets_rename = sets_rename or rename != effective
        sets_devices = sets_devices or not is_all
        resources.append(ReplicatedResource(name=name, replicas=replicas, rename=effective))
    short = where.rsplit(".", 1)[-1]
    if sets_rename:
        warnings.append("Setting the 'rename' field in sharing.%s.resources is not yet supported in the config. Ignoring..." % short)
    if sets_devices:
        warnings.append("Customizing the 'devices' field in sharing.%s.resources is not yet supported in the config. Ignoring..." % short)
    return rename_by_default, fail_gt_one, tuple(resources)


def _parse_bool_text(value: str, what: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise PluginError("invalid value %r for %s" % (value, what))


# flag name -> (env var, config key path)
_FLAGS = {
    "mig-strategy": ("MIG_STRATEGY", ("migStrategy",)),
    "fail-on-init-error": ("FAIL_ON_INIT_ERROR", ("failOnInitError",)),
    "mps-root": ("MPS_ROOT", ("mpsRoot",)),
    "device-list-strategy": ("DEVICE_LIST_STRATEGY", ("plugin", "deviceListStrategy")),
    "device-id-strategy": ("DEVICE_ID_STRATEGY", ("plugin", "deviceIDStrategy")),
    "shared-devices-allocation-policy": ("SHARED_DEVICES_ALLOCATION_POLICY", ("plugin", "sharedDevicesAllocationPolicy")),
    "pass-device-specs": ("PASS_DEVICE_SPECS", ("plugin", "passDeviceSpecs")),
    # where the CDI spec comes from (main.go: driver-root, driver-root-ctr-path, nvidia-cdi-hook-path)
    "driver-root": ("NVIDIA_DRIVER_ROOT", ("nvidiaDriverRoot",)),
    "driver-root-ctr-path": ("CONTAINER_DRIVER_ROOT", ("plugin", "containerDriverRoot")),
    "nvidia-cdi-hook-path": ("NVIDIA_CTK_PATH", ("plugin", "nvidiaCTKPath")),
}


def parse_cli_args(args) -> dict:
    """Return ``{flag: value}`` for the flags this simulator understands in a container's argv.

    Accepts ``--flag=value``, ``--flag value``, ``-flag=value`` and bare boolean ``--flag``.
    """
    known = set(_FLAGS) | {"config-file"}
    booleans = {"fail-on-init-error", "pass-device-specs"}
    out = {}
    items = list(args or [])
    i = 0
    while i < len(items):
        item = str(items[i])
        i += 1
        if not item.startswith("-"):
            continue
        body = item.lstrip("-")
        name, sep, value = body.partition("=")
        if name not in known:
            continue
        if not sep:
            if name in booleans:
                value = "true"
            elif i < len(items):
                value = str(items[i])
                i += 1
            else:
                continue
        out[name] = value
    return out


def _lookup(mapping: dict, path: tuple):
    node = mapping
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def parse_config(text, env=None, cli=None) -> PluginConfig:
    """Build the plugin's effective config from the config file text, env and parsed CLI flags.

    ``text`` is the config file content or None when no config file is given; ``env`` maps
    environment variable names to values; ``cli`` is ``parse_cli_args`` output.
    """
    env = dict(env or {})
    cli = dict(cli or {})
    warnings = []
    if text is None:
        doc = {}
    else:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PluginError("unable to parse config file: unmarshal error: %s" % exc) from exc
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise PluginError("unable to parse config file: unmarshal error: config is not a mapping")
    version = doc.get("version") or "v1"
    if version != "v1":
        raise PluginError("unable to parse config file: unknown version: %s" % version)
    flags = doc.get("flags") or {}
    if not isinstance(flags, dict):
        raise PluginError("flags must be a mapping")

    def effective(flag):
        env_name, path = _FLAGS[flag]
        if flag in cli:
            return cli[flag], "cli"
        if env_name in env:
            return env[env_name], "env"
        return _lookup(flags, path), "file"

    mig_strategy = effective("mig-strategy")[0]
    mig_strategy = "none" if mig_strategy in (None, "") else mig_strategy
    if mig_strategy not in MIG_STRATEGIES:
        raise PluginError("unable to validate flags: unknown MIG strategy: %s" % mig_strategy)

    fail_on_init, source = effective("fail-on-init-error")
    if fail_on_init is None:
        fail_on_init = True
    elif source != "file" or isinstance(fail_on_init, str):
        fail_on_init = _parse_bool_text(str(fail_on_init), "failOnInitError")
    elif not isinstance(fail_on_init, bool):
        raise PluginError("flags.failOnInitError must be a boolean")

    mps_root = effective("mps-root")[0]
    mps_root = mps_root or ""

    list_strategy, source = effective("device-list-strategy")
    if list_strategy in (None, "", []):
        list_strategy = ["envvar"]
    elif isinstance(list_strategy, str):
        list_strategy = [s.strip() for s in list_strategy.split(",")] if source != "file" else [list_strategy]
    if not isinstance(list_strategy, list):
        raise PluginError("flags.plugin.deviceListStrategy must be a string or a list")
    for strategy in list_strategy:
        if strategy not in DEVICE_LIST_STRATEGIES:
            raise PluginError("unable to validate flags: invalid --device-list-strategy option: %s" % strategy)

    id_strategy = effective("device-id-strategy")[0]
    id_strategy = id_strategy or "uuid"
    if id_strategy not in DEVICE_ID_STRATEGIES:
        raise PluginError("unable to validate flags: invalid --device-id-strategy option: %s" % id_strategy)

    policy = effective("shared-devices-allocation-policy")[0]
    if (policy or "") not in ALLOCATION_POLICIES:
        raise PluginError("unable to validate flags: invalid --shared-devices-allocation-policy option: %s" % policy)

    pass_specs, source = effective("pass-device-specs")
    if pass_specs is None:
        pass_specs = False
    elif source != "file" or isinstance(pass_specs, str):
        pass_specs = _parse_bool_text(str(pass_specs), "passDeviceSpecs")
    elif not isinstance(pass_specs, bool):
        raise PluginError("flags.plugin.passDeviceSpecs must be a boolean")

    resources_section = doc.get("resources")
    if isinstance(resources_section, dict) and (resources_section.get("gpus") or resources_section.get("mig")):
        warnings.append("Customizing the 'resources' field is not yet supported in the config. Ignoring...")

    sharing_doc = doc.get("sharing") or {}
    if not isinstance(sharing_doc, dict):
        raise PluginError("sharing must be a mapping")
    sharing = None
    time_slicing = None
    if "timeSlicing" in sharing_doc:
        # A non-pointer field: even an explicit null goes through UnmarshalJSON and needs resources.
        time_slicing = _parse_replicated(sharing_doc["timeSlicing"], "sharing.timeSlicing", warnings)
    if sharing_doc.get("mps") is not None:
        mps = _parse_replicated(sharing_doc["mps"], "sharing.mps", warnings)
        sharing = Sharing("mps", mps[2], mps[0], True)
    elif time_slicing is not None:
        sharing = Sharing("time-slicing", time_slicing[2], time_slicing[0], time_slicing[1])

    if sharing is not None and sharing.strategy == "mps":
        if mig_strategy == "mixed":
            raise PluginError("unable to validate flags: using --mig-strategy=mixed is not supported with MPS")
        if not mps_root:
            raise PluginError("unable to validate flags: using MPS requires a valid MPS root (--mps-root / MPS_ROOT / flags.mpsRoot)")

    return PluginConfig(
        mig_strategy=mig_strategy,
        sharing=sharing,
        mps_root=mps_root,
        device_list_strategy=tuple(list_strategy),
        device_id_strategy=id_strategy,
        fail_on_init_error=fail_on_init,
        warnings=tuple(warnings),
        health=health_checks(env),
        pass_device_specs=pass_specs,
        allocation_policy=policy or "",
        driver_root=effective("driver-root")[0] or "/",  # api/config/v1 flags.go defaults
        container_driver_root=effective("driver-root-ctr-path")[0] or "/driver-root",
        nvidia_ctk_path=effective("nvidia-cdi-hook-path")[0] or "/usr/bin/nvidia-ctk",
    )


# --------------------------------------------------------------------------- devices
#
# The plugin's start-up path over the GPUs the fake NVML reports from a profile (k8s-device-plugin v0.20.0:
# internal/rm/rm.go AddDefaultResourcesToConfig, internal/rm/device_map.go, internal/rm/devices.go BuildDevice,
# api/config/v1/resources.go; go-nvlib v0.13.0 pkg/nvlib/device VisitDevices, VisitMigDevices, VisitMigProfiles,
# GetProfile). Each step raises PluginError with the plugin's innermost reason.

# NVML GPU instance profile constants -> (slices, "+attributes" / "-attributes"), as go-nvlib's NewMigProfile reads
# them (mig_profile.go); CI profile constants -> slices.
_GI_PROFILES = {0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""), 7: (1, "+me"),
                8: (2, "+me"), 9: (1, ""), 10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"), 13: (1, "-me"),
                14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all")}
_CI_PROFILES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 7}
# The fake NVML's default constant for a slice count (its README: "the <n>_SLICE constant")
_SLICE_CONSTANT = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class _Exit(PluginError):
    """The plugin exits at start-up for this reason."""


def _nvml_error(obj: dict, call: str, top: dict | None = None):
    """Return the injected error code for ``call`` (any ABI version) on ``obj`` or the profile top level."""
    for errors in ((obj or {}).get("errors") or {}, (top or {}).get("errors") or {}):
        for name, code in errors.items():
            base = re.sub(r"_v\d+$", "", name)
            if base == call:
                return code
    return None


def go_nvlib_profile(gpu: dict, mig: dict) -> str:
    """The name go-nvlib's GetProfile gives a MIG device of the profile: from its GPU and compute instance profile
    constants, its memory and its GPU's memory (getMigMemorySizeGB: share rounded up to eighths, times whole GiB)."""
    gi = mig.get("gpu_instance_profile", _SLICE_CONSTANT.get(mig.get("gpu_instance_slices")))
    ci = mig.get("compute_instance_profile", _SLICE_CONSTANT.get(mig.get("compute_instance_slices")))
    if gi not in _GI_PROFILES:
        raise _Exit("invalid GPU Instance Profile ID: %s" % gi)
    if ci not in _CI_PROFILES:
        raise _Exit("invalid Compute Instance Profile ID: %s" % ci)
    g, suffix = _GI_PROFILES[gi]
    c = _CI_PROFILES[ci]
    total = gpu["memory_total_mib"]
    total_gib = -(-total // 1024)
    share = math.ceil(mig["memory_mib"] / total * 8) / 8
    gb = int(math.floor(share * total_gib + 0.5))
    return ("%dg.%dgb%s" % (g, gb, suffix)) if c == g else ("%dc.%dg.%dgb%s" % (c, g, gb, suffix))


def mig_resource_name(profile: str) -> str:
    """The mixed-strategy resource of a go-nvlib profile name whose compute and GPU instance sizes are equal
    (AddDefaultResourcesToConfig: ``mig-`` + the name with ``+`` turned into ``.``)."""
    return resource_name("mig-" + profile.replace("+", "."))


class _Node:
    """The GPUs of one profile as the plugin walks them."""

    def __init__(self, profile: dict):
        self.profile = profile
        self.devices = profile.get("devices") or []

    def error(self, obj, call):
        return _nvml_error(obj, call, self.profile)

    def init(self):
        for call in ("nvmlInit", "nvmlInitWithFlags"):
            code = self.error({}, call)
            if code:
                raise _Exit("failed to initialize NVML: %s" % code)
        code = self.error({}, "nvmlDeviceGetCount")
        if code:
            raise _Exit("error getting device count: %s" % code)

    def visit(self):
        """go-nvlib VisitDevices: every GPU's handle and name (isSkipped)."""
        for index, device in enumerate(self.devices):
            code = self.error(device, "nvmlDeviceGetHandleByIndex")
            if code:
                raise _Exit("error getting device handle for index '%d': %s" % (index, code))
            code = self.error(device, "nvmlDeviceGetName")
            if code:
                raise _Exit("error visiting device: error getting device name: %s" % code)

    def mig_mode(self, index, device):
        """(capable, enabled) as go-nvlib's IsMigCapable / IsMigEnabled answer them."""
        code = self.error(device, "nvmlDeviceGetMigMode")
        mig = device.get("mig")
        if code == "NOT_SUPPORTED" or (code is None and not (mig and mig.get("capable"))):
            return False, False
        if code:
            raise _Exit("error visiting device: error checking if MIG is enabled on GPU %d: error getting MIG mode: %s"
                        % (index, code))
        return True, bool(mig.get("current"))

    def migs(self, device):
        mig = device.get("mig") or {}
        return mig.get("devices") or [] if mig.get("current") else []

    def offered_profiles(self, index, device):
        """VisitMigProfiles on one MIG-capable GPU: it reads the GPU's memory and GPU instance profiles first."""
        code = self.error(device, "nvmlDeviceGetMemoryInfo")
        if code:
            raise _Exit("unable to add default resources to config: error visiting device: error getting device "
                        "memory info: %s" % code)
        code = self.error(device, "nvmlDeviceGetGpuInstanceProfileInfo")
        if code and code not in ("NOT_SUPPORTED", "INVALID_ARGUMENT"):
            raise _Exit("unable to add default resources to config: error visiting device: error getting GPU "
                        "Instance profile info: %s" % code)
        return {go_nvlib_profile(device, m) for m in self.migs(device)}

    def build_gpu(self, index, device):
        """BuildDevice of a full GPU: UUID, minor number (paths), PCI info (NUMA) and compute capability must answer;
        a failed memory read is only logged."""
        for call, step in (("nvmlDeviceGetUUID", "error getting UUID device"),
                           ("nvmlDeviceGetMinorNumber", "error getting device paths"),
                           ("nvmlDeviceGetPciInfo", "error getting device NUMA node"),
                           ("nvmlDeviceGetCudaComputeCapability", "error getting device compute capability")):
            code = self.error(device, call)
            if code:
                raise _Exit("error visiting device %d: %s: %s" % (index, step, code))

    def mig_profile(self, index, device, slot, mig):
        """go-nvlib GetProfile of a MIG device, then its UUID (BuildDevice)."""
        code = self.error(device, "nvmlDeviceGetMemoryInfo")
        calls = ("nvmlDeviceGetAttributes", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
                 "nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetComputeInstanceById", "nvmlGpuInstanceGetInfo",
                 "nvmlComputeInstanceGetInfo", "nvmlGpuInstanceGetComputeInstanceProfileInfo")
        code = code or next((c for c in (self.error(mig, call) for call in calls) if c), None)
        if code:
            raise _Exit("error getting MIG profile for MIG device at index '(%d, %d)': %s" % (index, slot, code))
        profile = go_nvlib_profile(device, mig)
        code = self.error(mig, "nvmlDeviceGetUUID")
        if code:
            raise _Exit("error visiting MIG device %d:%d: error getting UUID device: %s" % (index, slot, code))
        return profile


def _attributes(device: dict, mig: dict) -> tuple:
    """A MIG device's nvmlDeviceAttributes_t as the fake NVML fills it (its README), for the single strategy's
    "same MIG device type" comparison."""
    return (mig.get("multiprocessor_count"), mig.get("copy_engine_count", 0), mig.get("decoder_count", 0),
            mig.get("encoder_count", 0), mig.get("jpeg_count", 0), mig.get("ofa_count", 0),
            mig.get("gpu_instance_slices"), mig.get("compute_instance_slices"), mig.get("memory_mib"))


@dataclasses.dataclass(frozen=True)
class PluginDevice:
    """One device of a resource as the plugin holds it (k8s-device-plugin v0.20.0 internal/rm/devices.go ``Device``,
    built by BuildDevice in internal/rm/device_map.go):

    * ``id``: what ListAndWatch advertises and Allocate receives: the GPU or MIG UUID, ``<uuid>::<n>`` for replica n
      of a shared device (internal/rm/device_map.go updateDeviceMapWithReplicas, devices.go NewAnnotatedID);
    * ``uuid``: the device's own UUID (``AnnotatedID.GetID``);
    * ``index``: ``"<gpu>"`` for a full GPU, ``"<gpu>:<mig slot>"`` for a MIG device (newGPUDevice / newMigDevice),
      what ``deviceIDStrategy: index`` hands to the container; replicas keep their device's index;
    * ``gpu``: the parent GPU's index; ``minor``: its minor number (``/dev/nvidia<minor>``, GetPaths);
      ``mig``: ``(gpu instance id, compute instance id)`` of a MIG device, else None;
    * ``replicas``: how many times the device is replicated (0: not shared);
    * ``numa``: the NUMA node ListAndWatch reports (the stand-in fills it from sysfs; the rules leave it None)."""

    id: str
    uuid: str
    index: str
    gpu: int
    minor: int | None = None
    mig: tuple | None = None
    replicas: int = 0
    numa: int | None = None


def build_device_map(profile: dict, mig_strategy: str) -> dict:
    """Return ``{resource name: [PluginDevice, ...]}`` before sharing, like rm.NewDeviceMap."""
    node = _Node(profile)
    node.init()
    node.visit()
    devices = node.devices
    device_map = {}

    def insert(name, dev):
        device_map.setdefault(name, []).append(dev)

    resources = set()
    if mig_strategy == "mixed":
        for index, device in enumerate(devices):
            if node.mig_mode(index, device)[0]:
                resources |= {p for p in node.offered_profiles(index, device) if not re.match(r"^\d+c\.", p)}

    full = 0
    for index, device in enumerate(devices):
        capable, enabled = node.mig_mode(index, device)
        if enabled and mig_strategy != "none":
            continue
        node.build_gpu(index, device)
        dev_id = device.get("uuid") or "GPU-%d" % index
        insert(GPU_RESOURCE, PluginDevice(dev_id, dev_id, str(index), index, device.get("minor_number")))
        full += 1
    if mig_strategy == "none":
        return device_map

    migs = []
    for index, device in enumerate(devices):
        capable, enabled = node.mig_mode(index, device)
        if not capable:
            continue
        for call in ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex"):
            code = node.error(device, call)
            if code:
                raise _Exit("error visiting MIG devices of device %d: %s" % (index, code))
        for slot, mig in enumerate(node.migs(device)):
            name = node.mig_profile(index, device, slot, mig)
            if mig_strategy == "single":
                resource = GPU_RESOURCE
            elif name in resources:  # patterns match whole names (api/config/v1/resources_test.go)
                resource = mig_resource_name(name)
            else:
                raise _Exit("MIG profile '%s' does not match any resource patterns" % name)
            dev_id = mig.get("uuid") or "MIG-%d-%d" % (index, slot)
            insert(resource, PluginDevice(dev_id, dev_id, "%d:%d" % (index, mig.get("slot", slot)), index,
                                          device.get("minor_number"),
                                          (mig.get("gpu_instance_id"), mig.get("compute_instance_id"))))
            migs.append(_attributes(device, mig))

    if mig_strategy == "single":
        for index, device in enumerate(devices):
            if node.mig_mode(index, device)[1] and not node.migs(device):
                raise _Exit("invalid MIG configuration: at least one device with migEnabled=true was not configured "
                            "correctly: error visiting device: device %d has no MIG devices configured" % index)
        if len(set(migs)) > 1:
            raise _Exit("invalid MIG configuration: more than one MIG device type present on node")
        if full and migs:
            raise _Exit("all devices on the node must be configured with the same migEnabled value")
    # mixed: a GPU with MIG on and no MIG devices is only a warning (PR #806), and advertises nothing
    return device_map


def advertised_resources(profile: dict, config: PluginConfig) -> dict:
    """Return ``{resource name: count}`` the kubelet would show in capacity (allocatable: less
    :func:`unhealthy_devices`).

    ``profile`` is the parsed GPU profile JSON (``devices[]`` with optional ``mig``); a node
    without a GPU profile has no NVML and advertises nothing, so callers pass ``None`` there.
    """
    return {name: len(ids) for name, ids in sorted(_advertised_ids(profile, config).items()) if ids}


def plugin_devices(profile: dict, config: PluginConfig) -> dict:
    """``{resource name: [PluginDevice, ...]}``: every device the plugin serves per resource, replicas included, in the
    profile's order (a GPU's replicas one after the other). The one entry point shared by the simulator (which counts
    them) and the stand-in device plugin (sandbox/standins, which serves them over the kubelet's gRPC API, with
    ``profile`` read through NVML). A resource with no device is left out; refusals raise PluginError."""
    if profile is None:
        return {}
    device_map = build_device_map(profile, config.mig_strategy)
    sharing = config.sharing
    if sharing is not None and sharing.strategy == "mps" and config.mig_strategy != "none":
        node = _Node(profile)
        if any(node.mig_mode(i, d)[1] and node.migs(d) for i, d in enumerate(node.devices)):
            raise PluginError("sharing using MPS is not supported for MIG devices")
    if sharing is not None:
        replicated_names = {r.name for r in sharing.resources}
        result = {name: list(devs) for name, devs in device_map.items() if name not in replicated_names}
        for res in sharing.resources:
            devs = device_map.get(res.name)
            if not devs:
                continue
            bucket = result.setdefault(res.rename or res.name, [])
            for dev in devs:
                for replica in range(res.replicas):
                    bucket.append(dataclasses.replace(dev, id="%s::%d" % (dev.uuid, replica), replicas=res.replicas))
        device_map = result
    return {name: devs for name, devs in device_map.items() if devs}


def _advertised_ids(profile: dict, config: PluginConfig) -> dict:
    """``{resource name: {device id}}`` of every device the plugin advertises (one per replica, ``<id>::<n>``)."""
    return {name: {dev.id for dev in devs} for name, devs in plugin_devices(profile, config).items()}


_NVML_WHOLE_GPU = 0xFFFFFFFF


def unhealthy_devices(profile: dict, config: PluginConfig) -> dict:
    """``{resource name: count}`` of the devices the plugin's health check marks unhealthy on a node with this
    profile, which the kubelet leaves out of allocatable (k8s-device-plugin v0.20.0 internal/rm/health.go
    checkHealth, one check per resource; internal/plugin/server.go ListAndWatch):

    * the check does not run when every XID is disabled, or when the event set cannot be created;
    * a GPU whose supported event types or registration (other than NOT_SUPPORTED) fail: all its devices;
    * a failing wait: every device;
    * an XID event the check does not ignore, for a GPU registered for XID critical errors (the profile's
      ``event_types``): one device of that GPU per resource, since the check keeps one device per GPU UUID, and for an
      event with instance ids only a MIG device with those ids (where several devices of the resource sit on that GPU,
      Go's map order decides which one is kept; the simulator takes the event's own device).

    Guess: every ``xid_events`` entry counts, whatever its ``after_ms``: the plugin watches from its start and sees
    them all in the end; the simulator does not wait for them."""
    return {name: len(ids) for name, ids in unhealthy_device_ids(profile, config).items()}


def xid_hit(health: HealthChecks, devices, event: dict):
    """The device of ``devices`` (one resource's devices on the GPU the event came from) that the plugin's health check
    marks unhealthy for one XID event (``xid``, optional ``gpu_instance_id``/``compute_instance_id``), or None when the
    check ignores it (internal/rm/health.go: ignored or disabled XIDs; an event with instance ids hits only the MIG
    device with those ids, or a full GPU; whole-GPU ids hit the GPU's device, the first one where replicas share it).
    Shared by :func:`unhealthy_device_ids` and the stand-in plugin's live check (sandbox/standins)."""
    if health.disabled(int(event["xid"])):
        return None
    gi = event.get("gpu_instance_id", _NVML_WHOLE_GPU)
    ci = event.get("compute_instance_id", _NVML_WHOLE_GPU)
    for dev in devices:
        if gi == _NVML_WHOLE_GPU or ci == _NVML_WHOLE_GPU or dev.mig is None or dev.mig == (gi, ci):
            return dev
    return None


def unhealthy_device_ids(profile: dict, config: PluginConfig) -> dict:
    """``{resource name: {device id}}`` of the devices :func:`unhealthy_devices` counts."""
    health = config.health or health_checks({})
    if profile is None or health.all_disabled() or _nvml_error({}, "nvmlEventSetCreate", profile):
        return {}
    devices = profile.get("devices") or []
    every = bool(_nvml_error({}, "nvmlEventSetWait", profile))
    out = {}
    for name, members in plugin_devices(profile, config).items():
        by_gpu = {}
        for member in members:
            by_gpu.setdefault(member.gpu, []).append(member)
        bad = set()
        for index, gpu_members in by_gpu.items():
            device = devices[index]
            register = _nvml_error(device, "nvmlDeviceRegisterEvents", profile)
            if every or _nvml_error(device, "nvmlDeviceGetSupportedEventTypes", profile) or \
                    (register and register != "NOT_SUPPORTED"):
                bad.update(m.id for m in gpu_members)
                continue
            if register or "xid_critical" not in device.get("event_types", ["xid_critical"]):
                continue  # registered for no XID
            for event in device.get("xid_events") or []:
                hit = xid_hit(health, gpu_members, event)
                if hit is not None:
                    bad.add(hit.id)
                    break
        if bad:
            out[name] = bad
    return out
