# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""MIG layouts in NVIDIA mig-parted's config format, read as mig-parted reads them, and the plan that takes a host's
GPUs (its ``gpu`` facts) from the layout they have to the one asked for. Pure: no NVML, no host.

The format (mig-parted ``api/spec/v1/spec.go``)::

    version: v1
    mig-configs:
      <name>:
        - devices: all | [<index>, ...]
          device-filter: "0x20B510DE" | ["0x20B510DE:0x154710DE", ...]   # optional
          mig-enabled: true | false
          mig-devices: {"1g.10gb": 2, "2g.20gb": 2}                       # required when mig-enabled

What mig-parted (v0.15.0) checks when it reads a file, for every config in it, and this module with it (:func:`load`):

- ``version`` must be ``v1``; ``mig-configs`` needs at least one config and each config at least one entry; an entry
  needs ``devices`` and ``mig-enabled``, takes no other field than those and ``device-filter`` and ``mig-devices``,
  needs ``mig-devices`` when ``mig-enabled`` is true and has none when it is false (``api/spec/v1/spec.go``, the
  UnmarshalJSON methods). ``devices`` is the word ``all`` or a list of whole numbers; ``device-filter`` a string or a
  list of strings; ``mig-enabled`` true or false (empty reads as false).
- the file is YAML read into JSON before those checks (``sigs.k8s.io/yaml``), so a number written ``2.0`` is the whole
  number 2 wherever a count or an index goes, and an empty count is 0.
- a profile name is checked for its format only: go-nvlib's grammar (:func:`.naming.parse_mig_profile`, go-nvlib
  ``pkg/nvlib/device/mig_profile.go`` parseMigProfile, through mig-parted ``pkg/types/mig_profile.go``), any slice
  count and any attribute words after ``+`` or ``-``; counts are whole numbers, not negative, and not all 0 where
  profiles are listed ("all counts for all MigProfiles are 0", ``pkg/types/mig_config.go`` AssertValidFormat).
  Whether a GPU has the profile is checked when a layout is planned for that GPU (:func:`plan`), as mig-parted
  applies it (``pkg/mig/config/config.go``, resolveMigProfileOnDevice: a GPU profile that Matches the name).

What mig-parted reads without a word but can never do what it says, refused here in the selected config only
(:func:`select`), so that a file whose other configs hold such an entry still loads:

- a ``device-filter`` value that is not a PCI device id (``pkg/types/device.go`` NewDeviceIDFromString: more than
  two parts, not a number, more than 32 bits); ``api/spec/v1/helpers.go`` MatchesDeviceFilter drops the parse error
  and matches no GPU with it.
- a negative GPU index, which matches no GPU.
- an empty ``mig-enabled``, which mig-parted reads as false: it would turn MIG off and destroy the GPUs' instances.

How a config is applied:

- a ``device-filter`` is a PCI device id as the GPU's config space has it, device then vendor (``0x20B510DE``), with
  an optional subsystem id after a colon; a GPU matches when device and vendor (and the subsystem, where the filter
  names one) are equal (``pkg/types/device.go`` ``Matches``). No filter matches every GPU.
- the entries of the chosen config are walked in order and each GPU they match gets that entry, so a later entry
  wins over an earlier one for the same GPU (``cmd/nvidia-mig-parted/assert/assert.go``,
  ``WalkSelectedMigConfigForEachGPU``). A GPU no entry matches is left as it is (mig-parted's ``assert`` calls that
  "not all GPUs match"; the plan reports it).
- a GPU that is not MIG capable is skipped by an entry with ``devices: all`` whatever it asks, and by an entry with MIG
  disabled; an entry that names it by index with MIG enabled is refused (``cmd/nvidia-mig-parted/apply/mode.go`` and
  ``config.go``: "Skipping -- non MIG-capable GPU", "cannot set MIG mode on non MIG-capable GPU").
- a GPU with MIG disabled satisfies an entry that has MIG disabled whatever its instances; otherwise the GPU's
  instances, counted per profile, must equal ``mig-devices`` (``cmd/nvidia-mig-parted/assert/config.go``,
  ``AssertMigConfig``). Here a count of 0 in ``mig-devices`` is the same as leaving the profile out (mig-parted's
  ``Equals`` compares the number of keys too, so such a layout never counts as applied there), and a name is the
  GPU's profile it matches (``1c.1g.10gb`` is ``1g.10gb``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import naming
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import PCI_VENDOR_ID, VENDOR

VERSION = "v1"
ENTRY_FIELDS = ("devices", "device-filter", "mig-enabled", "mig-devices")
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # Go's int, which counts and indexes are read into
# strconv.ParseUint(text, 0, 32): a base prefix (0x, 0o, 0b, or a leading 0 for octal) or decimal, no sign, no spaces
_UINT = re.compile(r"(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[0-7]*|0[bB][01]+|[1-9][0-9]*)\Z")


def _at(path, message):
    """A message about the field at ``path`` of the document (OptionError puts the option's name first)."""
    return "%s: %s" % (path, message) if path else message


def profile_problem(name):
    """Why mig-parted would not read ``name`` as a MIG profile when it reads a config file (a sentence), or None
    when it would."""
    try:
        naming.parse_mig_profile(name)
    except ValueError as exc:
        return str(exc)
    return None


def _whole_number(value):
    """``value`` as the whole number Go's JSON reader makes of it after sigs.k8s.io/yaml (``2.0`` is 2), or None
    where it refuses it (text, true/false, a fraction, beyond 64 bits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    if isinstance(value, int) and _INT_MIN <= value <= _INT_MAX:
        return value
    return None


def parse_device_id(text):
    """``(device, vendor, subsystem or None)`` of a device-filter value such as ``0x20B510DE`` or
    ``0x20B510DE:0x154710DE``, each 16-bit half as an int; raises ValueError saying why, where mig-parted's
    NewDeviceIDFromString (pkg/types/device.go) fails."""
    parts = str(text).split(":")
    if len(parts) > 2:
        raise ValueError("%r is not <device><vendor> or <device><vendor>:<subdevice><subvendor>" % (text,))
    numbers = []
    for part in parts:
        if not _UINT.match(part):
            raise ValueError("%r is not a PCI device id such as 0x20B510DE" % (text,))
        value = int(part, 8) if part[:1] == "0" and part[1:2].isdigit() else int(part, 0)
        if value > 0xFFFFFFFF:
            raise ValueError("%r is more than 32 bits" % (text,))
        numbers.append(value)
    device, vendor = numbers[0] >> 16, numbers[0] & 0xFFFF
    subsystem = (numbers[1] >> 16, numbers[1] & 0xFFFF) if len(numbers) == 2 else None
    return device, vendor, subsystem


def load(document, option="mig_configs"):
    """The mig-parted config ``document`` (parsed YAML) checked as mig-parted checks a file when it reads it (every
    config), as ``{name: [entry, ...]}`` with each entry ``{"devices": "all" | [int], "device_filter": [(device,
    vendor, subsystem) or None], "mig_enabled": bool, "mig_devices": {profile: count}, "problems": [(field,
    why)]}`` (``None``: a filter that matches no GPU; ``problems``: what :func:`select` refuses). Raises
    :class:`OptionError` naming the field (``mig_configs: mig-configs.all-1g.10gb[0].mig-devices: ...``) and saying
    what to write instead."""
    if not isinstance(document, dict):
        raise OptionError(option, "a mig-parted config is a mapping with version: v1 and mig-configs")
    if document.get("version") != VERSION:
        raise OptionError(option, _at("version", "%r; mig-parted reads version: v1" % (document.get("version"),)))
    unexpected = sorted(str(k) for k in document if k not in ("version", "mig-configs"))
    if unexpected:
        raise OptionError(option, _at(unexpected[0], "unexpected field (a mig-parted config has version and mig-configs)"))
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise OptionError(option, _at("mig-configs", "at least one named config is required"))
    loaded = {}
    for name, entries in configs.items():
        path = "mig-configs.%s" % name
        if not isinstance(entries, list) or not entries:
            raise OptionError(option, _at(path, "a config is a list of at least one entry (devices, mig-enabled, ...)"))
        loaded[str(name)] = [_entry(entry, "%s[%d]" % (path, i), option) for i, entry in enumerate(entries)]
    return loaded


def _entry(entry, path, option):
    if not isinstance(entry, dict):
        raise OptionError(option, _at(path, "an entry is a mapping with devices and mig-enabled"))
    for field in entry:
        if field not in ENTRY_FIELDS:
            raise OptionError(option, _at("%s.%s" % (path, field), "unexpected field (an entry takes %s)"
                                          % ", ".join(ENTRY_FIELDS)))
    for field in ("devices", "mig-enabled"):
        if field not in entry:
            raise OptionError(option, _at(path, "missing required field %s" % field))
    problems = []
    devices = entry["devices"]
    if devices != "all":
        indexes = [_whole_number(d) for d in devices] if isinstance(devices, list) else [None]
        if None in indexes:
            raise OptionError(option, _at(path + ".devices", "%r; write all or a list of GPU indexes such as [0, 1]"
                                          % (devices,)))
        devices = indexes
        problems.extend(("devices", "%d is not a GPU index (0 or more); mig-parted reads it and matches no GPU with "
                                    "it" % d) for d in indexes if d < 0)
    enabled = entry["mig-enabled"]
    if enabled is None:
        problems.append(("mig-enabled", "is empty; mig-parted reads that as false, which turns MIG off and destroys "
                                        "the GPUs' MIG devices: write true or false"))
        enabled = False
    if not isinstance(enabled, bool):
        raise OptionError(option, _at(path + ".mig-enabled", "%r; write true or false" % (enabled,)))
    filters = entry.get("device-filter")
    if filters is None or filters == "":
        filters = []
    elif isinstance(filters, str):
        filters = [filters]
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        raise OptionError(option, _at(path + ".device-filter", "a PCI device id such as 0x20B510DE, or a list of them"))
    parsed_filters = []
    for text in filters:
        try:
            parsed_filters.append(parse_device_id(text))
        except ValueError as exc:
            parsed_filters.append(None)
            problems.append(("device-filter", "%s: mig-parted reads it and matches no GPU with it" % exc))
    counts = _mig_devices(entry.get("mig-devices"), path + ".mig-devices", option)
    if enabled and counts is None:
        raise OptionError(option, _at(path, "mig-devices is required when mig-enabled is true (write {} for MIG on"
                                            " and no instances)"))
    if not enabled and counts:
        raise OptionError(option, _at(path + ".mig-devices", "MIG devices are listed while mig-enabled is false; "
                                                             "enable MIG or drop them"))
    return {"devices": devices, "device_filter": parsed_filters, "mig_enabled": enabled,
            "mig_devices": dict((p, n) for p, n in (counts or {}).items() if n), "problems": problems}


def _mig_devices(wanted, path, option):
    """``mig-devices`` as ``{profile: count}`` (every profile, 0 included), or None where it is absent or empty."""
    if wanted is None:
        return None
    if not isinstance(wanted, dict):
        raise OptionError(option, _at(path, "profile names to counts, such as {\"1g.10gb\": 2}"))
    counts = {}
    for profile, count in wanted.items():
        where = '%s."%s"' % (path, profile)
        problem = profile_problem(profile)
        if problem:
            raise OptionError(option, _at(where, problem))
        number = 0 if count is None else _whole_number(count)
        if number is None or number < 0:
            raise OptionError(option, _at(where, "the count is %r; write a whole number, 0 or more" % (count,)))
        counts[profile] = number
    if counts and not any(counts.values()):
        raise OptionError(option, _at(path, "all counts are 0 (mig-parted: \"all counts for all MigProfiles are 0\"); "
                                            "write {} for MIG on and no instances"))
    return counts


def select(configs, name, option="mig_config", source="mig_configs"):
    """The entries of config ``name`` (mig-parted's ``--selected-config``; may be empty when there is one config).
    Refuses, naming the field of ``source`` (the option that holds the configs), an entry of that config that
    mig-parted reads but that could never do what it says (see the module's docstring)."""
    if not name:
        if len(configs) == 1:
            name = next(iter(configs))
        else:
            raise OptionError(option, "the configs have %d layouts (%s); name the one to apply" % (
                len(configs), ", ".join(sorted(configs))))
    if name not in configs:
        raise OptionError(option, "%r is not one of the configs (%s)" % (name, ", ".join(sorted(configs))))
    for i, entry in enumerate(configs[name]):
        for field, why in entry.get("problems") or []:
            raise OptionError(source, "mig-configs.%s[%d].%s: %s" % (name, i, field, why))
    return configs[name]


def _pci_ids(facts):
    """``{sysfs address: (device, vendor, subsystem)}`` from the facts' PCI bus."""
    ids = {}
    for entry in _host.pci_of(facts, VENDOR, untagged=True):  # gpu.pci lists every vendor's GPUs
        try:
            device = int(entry.get("device_id"), 16)
            subsystem = int(entry.get("subsystem_id"), 16) if entry.get("subsystem_id") else None
        except (TypeError, ValueError):
            continue
        sub = None if subsystem is None else (subsystem >> 16, subsystem & 0xFFFF)
        ids[str(entry.get("address") or "").lower()] = (device, PCI_VENDOR_ID, sub)
    return ids


def _matches(entry, index, device_id):
    if entry["devices"] != "all" and index not in entry["devices"]:
        return False
    if not entry["device_filter"]:
        return True
    if device_id is None:
        return False
    for wanted in entry["device_filter"]:
        if wanted is None:
            continue  # mig-parted matches no GPU with a filter it cannot parse
        device, vendor, subsystem = wanted
        if (device, vendor) == device_id[:2] and (subsystem is None or subsystem == device_id[2]):
            return True
    return False


def current_layout(gpu):
    """What one GPU of the facts has: ``{"mig_enabled": bool, "mig_devices": {profile: count}}``."""
    mig = gpu.get("mig") or {}
    counts = {}
    for device in mig.get("devices") or []:
        profile = device.get("profile")
        if profile:
            counts[profile] = counts.get(profile, 0) + 1
    return {"mig_enabled": bool(mig.get("current")), "mig_devices": counts}


def _on_gpu(mig_devices, profiles):
    """``mig_devices`` with each name as the GPU's profile it matches (go-nvlib's Matches: ``1c.1g.10gb`` is the
    GPU's ``1g.10gb``), and the names the GPU has no profile for. Without the GPU's list (``profiles`` empty), names
    are kept as written."""
    by_key = dict((naming.mig_profile_key(p), p) for p in profiles or [])
    counts, unknown = {}, []
    for name, count in mig_devices.items():
        own = by_key.get(naming.mig_profile_key(name)) if profiles else name
        if own is None:
            unknown.append(name)
        else:
            counts[own] = counts.get(own, 0) + count
    return counts, sorted(unknown)


def plan(entries, facts):
    """Per GPU of the host's ``gpu`` facts (NVML index order), what the selected config asks and what must change:

    ``{"index", "name", "wanted" (the entry's layout, its profiles named as the GPU names them, or None where no
    entry matches), "current", "action"}``, where ``action`` is ``none`` (already as asked, no entry matches, or a GPU
    that is not MIG capable under ``devices: all``: ``why`` says which), ``enable`` (MIG mode on, then the
    instances), ``disable`` (MIG mode off), ``reconfigure`` (MIG stays on; instances destroyed and created) or
    ``refuse`` (the GPU cannot take the layout; ``why`` says why). ``set_mode`` is true where MIG mode must be set,
    ``mode_change`` where the GPU's current mode changes (a GPU reset, or a reboot where the GPU cannot be reset),
    and ``pending`` where the facts show a mode change already waiting for one (NVML's pending mode is not the
    current one)."""
    pci = _pci_ids(facts)
    planned = []
    for gpu in facts.get("devices") or []:
        index = gpu.get("index")
        label = gpu.get("name") or "GPU %s" % index
        device_id = pci.get(_host.sysfs_address(gpu.get("pci_bus_id")))
        matched = [entry for entry in entries if _matches(entry, index, device_id)]
        wanted = None
        if matched:
            wanted = {"mig_enabled": matched[-1]["mig_enabled"], "mig_devices": dict(matched[-1]["mig_devices"])}
        current = current_layout(gpu)
        mig = gpu.get("mig") or {}
        after_reset = bool(mig.get("pending")) if mig.get("capable") else False  # the mode the next reset brings
        step = {"index": index, "name": gpu.get("name"), "wanted": wanted, "current": current, "action": "none",
                "set_mode": False, "mode_change": False, "pending": after_reset != current["mig_enabled"], "why": None}
        if wanted is None:
            step["why"] = "no entry of the config matches this GPU; it is left as it is"
        elif not mig.get("capable"):
            # mig-parted apply (mode.go, config.go), entry by entry: devices: all skips such a GPU, MIG off skips it,
            # an index with MIG on is an error
            if any(e["mig_enabled"] and e["devices"] != "all" for e in matched):
                step.update(action="refuse", why="%s is not MIG capable (the config names it by its index with MIG"
                                                 " enabled)" % label)
            elif wanted["mig_enabled"]:
                step["why"] = ("%s is not MIG capable: skipped, as mig-parted skips such a GPU under devices: all"
                               % label)
        elif not wanted["mig_enabled"]:
            if current["mig_enabled"] or after_reset:
                # MIG mode off: a reset (or reboot) only where it is on now; a pending switch on is merely cancelled
                step.update(action="disable", set_mode=True, mode_change=current["mig_enabled"])
        else:
            wanted["mig_devices"], unknown = _on_gpu(wanted["mig_devices"], mig.get("profiles"))
            if unknown:
                step.update(action="refuse", why="%s has no MIG profile %s (it has %s)" % (
                    label, ", ".join(unknown), ", ".join(mig["profiles"])))
            elif not current["mig_enabled"]:
                step.update(action="enable", set_mode=True, mode_change=True)
            elif current["mig_devices"] != wanted["mig_devices"] or not after_reset:
                # the instances differ, or a switch off waits for a reset: set MIG mode on again (no reset needed)
                step.update(action="reconfigure", set_mode=not after_reset)
        planned.append(step)
    return planned


def facts_after(steps, facts):
    """The ``gpu`` facts as the host will report them once the plan ``steps`` are applied: the MIG mode and instances
    of every GPU the plan changes as asked, everything else as it is. What the device plugin stage expects from the
    new layout is :func:`allocatable.expected_from_fact` of these."""
    after = copy.deepcopy(facts)
    by_index = dict((step["index"], step) for step in steps)
    for gpu in after.get("devices") or []:
        step = by_index.get(gpu.get("index"))
        if not step or step["action"] in ("none", "refuse"):
            continue
        wanted = step["wanted"]
        mig = gpu.setdefault("mig", {})
        mig["current"] = mig["pending"] = wanted["mig_enabled"]
        mig["devices"] = [{"profile": profile} for profile in sorted(wanted["mig_devices"])
                          for _count in range(wanted["mig_devices"][profile])] if wanted["mig_enabled"] else []
    return after
