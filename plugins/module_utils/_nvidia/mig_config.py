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

What mig-parted does with it, and this module with it:

- ``version`` must be ``v1``; ``mig-configs`` needs at least one config and each config at least one entry; an entry
  needs ``devices`` and ``mig-enabled``, takes no other field than those and ``device-filter`` and ``mig-devices``,
  needs ``mig-devices`` when ``mig-enabled`` is true and has none when it is false (``spec.go``, the UnmarshalJSON
  methods). ``devices`` is the word ``all`` or a list of GPU indexes.
- a ``device-filter`` is a PCI device id as the GPU's config space has it, device then vendor (``0x20B510DE``), with
  an optional subsystem id after a colon; a GPU matches when device and vendor (and the subsystem, where the filter
  names one) are equal (``pkg/types/device.go``, ``NewDeviceIDFromString`` and ``Matches``; ``api/spec/v1/helpers.go``,
  ``MatchesDeviceFilter``). No filter matches every GPU.
- a profile name is ``[<c>c.]<g>g.<gb>gb[+me]`` with slice counts 1, 2, 3, 4, 6, 7 or 8 and no attribute but
  ``me`` (``pkg/types/mig_profile.go``, ``ParseMigProfile``); counts are not negative (``pkg/types/mig_config.go``).
- the entries of the chosen config are walked in order and each GPU they match gets that entry, so a later entry
  wins over an earlier one for the same GPU (``cmd/nvidia-mig-parted/assert/assert.go``,
  ``WalkSelectedMigConfigForEachGPU``). A GPU no entry matches is left as it is (mig-parted's ``assert`` calls that
  "not all GPUs match"; the plan reports it).
- a GPU that is not MIG capable satisfies an entry that has MIG disabled; a GPU with MIG disabled satisfies such an
  entry whatever its instances; otherwise the GPU's instances, counted per profile name, must equal ``mig-devices``
  (``cmd/nvidia-mig-parted/assert/config.go``, ``AssertMigConfig``). Here a count of 0 in ``mig-devices`` is the same
  as leaving the profile out (mig-parted's ``Equals`` compares the number of keys too, so such a layout never
  counts as applied there).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import PCI_VENDOR_ID, VENDOR

VERSION = "v1"
SLICES = (1, 2, 3, 4, 6, 7, 8)  # mig_profile.go: the slice counts ParseMigProfile knows
ATTRIBUTES = ("me",)  # mig_profile.go: AttributeMediaExtensions, the one attribute it knows
ENTRY_FIELDS = ("devices", "device-filter", "mig-enabled", "mig-devices")
_FIELD = re.compile(r"^(?P<n>[0-9]+)(?P<unit>c|g|gb)$")


def _at(path, message):
    """A message about the field at ``path`` of the document (OptionError puts the option's name first)."""
    return "%s: %s" % (path, message) if path else message


def profile_problem(name):
    """Why mig-parted would not read ``name`` as a MIG profile (a sentence), or None when it would."""
    if not isinstance(name, str) or not name:
        return "a MIG profile is a non-empty name such as 1g.10gb"
    base, _plus, attrs = name.partition("+")
    fields = base.split(".")
    if len(fields) not in (2, 3):
        return "%r is not [<c>c.]<g>g.<gb>gb[+me]" % name
    units = ("c", "g", "gb")[3 - len(fields):]
    values = []
    for text, unit in zip(fields, units):
        match = _FIELD.match(text)
        if not match or match.group("unit") != unit:
            return "%r is not [<c>c.]<g>g.<gb>gb[+me] (the part %r should be a number and %r)" % (name, text, unit)
        values.append(int(match.group("n")))
    slices = values[:-1]
    if any(v not in SLICES for v in slices):
        return "%r asks for %s slices; a MIG profile has %s" % (
            name, " and ".join(str(v) for v in slices), ", ".join(str(s) for s in SLICES))
    if _plus:
        seen = attrs.split(",")
        if "" in seen or len(set(seen)) != len(seen) or any(a not in ATTRIBUTES for a in seen):
            return "%r has the attributes %r; the only one is %s" % (name, attrs, ", ".join(ATTRIBUTES))
    return None


def parse_device_id(text):
    """``(device, vendor, subsystem or None)`` of a device-filter value such as ``0x20B510DE`` or
    ``0x20B510DE:0x154710DE``, each 16-bit half as an int; raises ValueError saying why."""
    parts = str(text).split(":")
    if len(parts) > 2:
        raise ValueError("%r is not <device><vendor> or <device><vendor>:<subdevice><subvendor>" % (text,))
    numbers = []
    for part in parts:
        try:
            value = int(part, 0)
        except ValueError:
            raise ValueError("%r is not a PCI device id such as 0x20B510DE" % (text,))
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError("%r is more than 32 bits" % (text,))
        numbers.append(value)
    device, vendor = numbers[0] >> 16, numbers[0] & 0xFFFF
    subsystem = (numbers[1] >> 16, numbers[1] & 0xFFFF) if len(numbers) == 2 else None
    return device, vendor, subsystem


def load(document, option="mig_configs"):
    """The mig-parted config ``document`` (parsed YAML) checked as mig-parted checks it, as
    ``{name: [entry, ...]}`` with each entry ``{"devices": "all" | [int], "device_filter": [(device, vendor,
    subsystem)], "mig_enabled": bool, "mig_devices": {profile: count}}``. Raises :class:`OptionError` naming the
    field (``mig_configs: mig-configs.all-1g.10gb[0].mig-devices: ...``) and saying what to write instead."""
    if not isinstance(document, dict):
        raise OptionError(option, "a mig-parted config is a mapping with version: v1 and mig-configs")
    unexpected = sorted(k for k in document if k not in ("version", "mig-configs"))
    if unexpected:
        raise OptionError(option, _at(unexpected[0], "unexpected field (a mig-parted config has version and mig-configs)"))
    if document.get("version") != VERSION:
        raise OptionError(option, _at("version", "%r; mig-parted reads version: v1" % (document.get("version"),)))
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
    devices = entry["devices"]
    indexes = isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in devices)
    if devices != "all" and not indexes:
        raise OptionError(option, _at(path + ".devices", "%r; write all or a list of GPU indexes such as [0, 1]" % (devices,)))
    enabled = entry["mig-enabled"]
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
            raise OptionError(option, _at(path + ".device-filter", str(exc)))
    wanted = entry.get("mig-devices")
    if enabled and wanted is None:
        raise OptionError(option, _at(path, "mig-devices is required when mig-enabled is true (write {} for MIG on"
                                            " and no instances)"))
    wanted = wanted or {}
    if not isinstance(wanted, dict):
        raise OptionError(option, _at(path + ".mig-devices", "profile names to counts, such as {\"1g.10gb\": 2}"))
    if not enabled and any(wanted.values()):
        raise OptionError(option, _at(path + ".mig-devices", "MIG devices are listed while mig-enabled is false; "
                                                             "enable MIG or drop them"))
    counts = {}
    for profile, count in wanted.items():
        where = '%s.mig-devices."%s"' % (path, profile)
        problem = profile_problem(profile)
        if problem:
            raise OptionError(option, _at(where, problem))
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise OptionError(option, _at(where, "the count is %r; write a whole number, 0 or more" % (count,)))
        if count:
            counts[profile] = count
    return {"devices": devices, "device_filter": parsed_filters, "mig_enabled": enabled, "mig_devices": counts}


def select(configs, name, option="mig_config"):
    """The entries of config ``name`` (mig-parted's ``--selected-config``; may be empty when there is one config)."""
    if not name:
        if len(configs) == 1:
            return next(iter(configs.values()))
        raise OptionError(option, "the configs have %d layouts (%s); name the one to apply" % (
            len(configs), ", ".join(sorted(configs))))
    if name not in configs:
        raise OptionError(option, "%r is not one of the configs (%s)" % (name, ", ".join(sorted(configs))))
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
    for device, vendor, subsystem in entry["device_filter"]:
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


def plan(entries, facts):
    """Per GPU of the host's ``gpu`` facts (NVML index order), what the selected config asks and what must change:

    ``{"index", "name", "wanted" (the entry's layout, or None where no entry matches), "current", "action"}``, where
    ``action`` is ``none`` (already as asked, or no entry matches), ``enable`` (MIG mode on, then the instances),
    ``disable`` (MIG mode off), ``reconfigure`` (MIG stays on; instances destroyed and created) or ``refuse`` (the
    GPU cannot take the layout; ``why`` says why). ``set_mode`` is true where MIG mode must be set,
    ``mode_change`` where the GPU's current mode changes (a GPU reset, or a reboot where the GPU cannot be reset),
    and ``pending`` where the facts show a mode change already waiting for one (NVML's pending mode is not the
    current one)."""
    pci = _pci_ids(facts)
    planned = []
    for gpu in facts.get("devices") or []:
        index = gpu.get("index")
        device_id = pci.get(_host.sysfs_address(gpu.get("pci_bus_id")))
        wanted = None
        for entry in entries:
            if _matches(entry, index, device_id):
                wanted = {"mig_enabled": entry["mig_enabled"], "mig_devices": dict(entry["mig_devices"])}
        current = current_layout(gpu)
        mig = gpu.get("mig") or {}
        after_reset = bool(mig.get("pending")) if mig.get("capable") else False  # the mode the next reset brings
        step = {"index": index, "name": gpu.get("name"), "wanted": wanted, "current": current, "action": "none",
                "set_mode": False, "mode_change": False, "pending": after_reset != current["mig_enabled"], "why": None}
        if wanted is None:
            step["why"] = "no entry of the config matches this GPU; it is left as it is"
        elif not mig.get("capable"):
            if wanted["mig_enabled"]:
                step.update(action="refuse", why="%s is not MIG capable" % (gpu.get("name") or "GPU %s" % index))
        elif not wanted["mig_enabled"]:
            if current["mig_enabled"] or after_reset:
                # MIG mode off: a reset (or reboot) only where it is on now; a pending switch on is merely cancelled
                step.update(action="disable", set_mode=True, mode_change=current["mig_enabled"])
        else:
            unknown = sorted(p for p in wanted["mig_devices"] if mig.get("profiles") and p not in mig["profiles"])
            if unknown:
                step.update(action="refuse", why="%s has no MIG profile %s (it has %s)" % (
                    gpu.get("name") or "GPU %s" % index, ", ".join(unknown), ", ".join(mig["profiles"])))
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
