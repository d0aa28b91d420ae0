# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The NVIDIA Container Toolkit's CDI spec of a host, brought in line with its GPUs after a change (a MIG layout, a
driver upgrade): regenerated with ``nvidia-ctk cdi generate`` as the toolkit's ``nvidia-cdi-refresh.service`` runs
it, and checked with ``nvidia-ctk cdi list``. The work of ``nvidia_cdi_spec``.

What the toolkit does, read in NVIDIA/nvidia-container-toolkit v1.20.0:

* ``deployments/systemd/nvidia-cdi-refresh.service`` runs ``nvidia-ctk cdi generate`` with
  ``NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml`` and the variables of
  ``/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env`` (an EnvironmentFile: every ``nvidia-ctk cdi generate``
  flag has a variable there, ``cmd/nvidia-ctk/cdi/generate/generate.go``); ``nvidia-cdi-refresh.path`` starts it when
  the kernel modules or nvidia-ctk change, not when a MIG layout does. The service only runs where the NVIDIA kernel
  module is in ``modules.dep``, and as a oneshot with ``Restart=on-failure`` its errors stay in the journal, so this
  module runs the same command itself, with the same environment, and reports what nvidia-ctk says.
* ``generate`` names each device by index (``0``, ``1:0``: a MIG device's index depends on the tool that made the
  layout) and by UUID (``GPU-...``, ``MIG-...``, stable) by default (``--device-name-strategy``), plus ``all``; a GPU
  in MIG mode is named by its MIG devices only. It refuses to write a spec without a device ("invalid spec, no
  devices") and an ``all`` device without edits ("invalid device, empty device edits"), which is what a node whose GPUs
  all have MIG on and no MIG device gives (the GPU Operator's ``all-enabled``).
* ``cmd/nvidia-ctk/cdi/list/list.go`` prints every device of the CDI registry (``/etc/cdi`` and ``/var/run/cdi``),
  one ``<vendor>/<class>=<name>`` per line.
* NVIDIA's MIG manager regenerates a CDI spec after each reconfiguration (mig-parted
  ``pkg/mig/reconfigure/reconfigure.go`` createCDISpec, the management spec there).

Decisions: the spec is checked by the UUID names (what stays true whoever made the layout), and ``uuid`` is added to
the naming strategies where the environment file leaves it out; a host whose GPUs expose no device loses the spec
(none can be valid, and the old one names devices that are gone); the spec is generated beside itself and replaces the
old one only when it differs, so a rerun changes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError

NVIDIA_CTK = "/usr/bin/nvidia-ctk"
REFRESH_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"  # nvidia-cdi-refresh.service's NVIDIA_CTK_CDI_OUTPUT_FILE_PATH
STATIC_OUTPUT = "/etc/cdi/nvidia.yaml"  # the install guide's "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
REFRESH_UNITS = tuple(os.path.join(d, "nvidia-cdi-refresh.service")
                      for d in ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"))
OUTPUT_VAR = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"
STRATEGIES_VAR = "NVIDIA_CTK_CDI_GENERATE_DEVICE_NAME_STRATEGIES"
DEFAULT_VENDOR, DEFAULT_CLASS = "nvidia.com", "gpu"
UUID_PREFIXES = ("GPU-", "MIG-")


class CdiError(KubegpuError):
    """The CDI spec could not be brought in line with the GPUs."""


def read_env_file(path):
    """The variables of a systemd EnvironmentFile (``KEY=value`` lines, ``#`` and ``;`` comments, quoted values);
    ``{}`` when there is no such file."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (IOError, OSError) as exc:
        if not os.path.exists(path):
            return {}
        raise FileError("cannot read nvidia-cdi-refresh's environment file: %s" % exc, path=path)
    out = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum():
            raise FileError("not a KEY=value line", path=path, line=number, column=1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def expected_names(gpu):
    """The devices a CDI spec of this host names by UUID, from its ``gpu`` fact: the MIG devices of a GPU in MIG mode,
    every other GPU itself (generate's rule), sorted."""
    names = []
    for device in (gpu or {}).get("devices") or []:
        if not isinstance(device, dict):
            continue
        mig = device.get("mig") or {}
        if mig.get("current"):
            names.extend(m.get("uuid") for m in mig.get("devices") or [] if isinstance(m, dict) and m.get("uuid"))
        elif device.get("uuid"):
            names.append(device["uuid"])
    return sorted(names)


def listed_names(stdout, kind):
    """The device names of ``kind`` (``<vendor>/<class>``) that ``nvidia-ctk cdi list`` printed, and of those the ones
    by UUID, both sorted."""
    names = []
    for line in (stdout or "").splitlines():
        line = line.strip()
        if line.startswith(kind + "="):
            names.append(line[len(kind) + 1:])
    return sorted(names), sorted(n for n in names if n.startswith(UUID_PREFIXES))


def spec_paths(params, env):
    """The specs to keep in line: ``paths`` when given; else the toolkit's: nvidia-cdi-refresh's output (its
    environment file's ``NVIDIA_CTK_CDI_OUTPUT_FILE_PATH``, else /var/run/cdi/nvidia.yaml) where that file exists or
    the service is installed, and /etc/cdi/nvidia.yaml where it exists. ``[]``: the host does not use the toolkit's
    CDI spec."""
    if params.get("paths"):
        return list(params["paths"])
    refresh = env.get(OUTPUT_VAR) or REFRESH_OUTPUT
    static = params.get("static_output", STATIC_OUTPUT)  # the other two are the host's own, but for the tests
    out = []
    if os.path.exists(refresh) or any(os.path.exists(unit) for unit in params.get("refresh_units", REFRESH_UNITS)):
        out.append(refresh)
    if os.path.exists(static) and static not in out:
        out.append(static)
    return out


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


class Spec(object):
    """The host side: nvidia-ctk run through ``runner(args, environ) -> (rc, stdout, stderr)``."""

    def __init__(self, params, runner):
        self.params = params
        self.runner = runner
        self.ctk = params.get("nvidia_ctk") or NVIDIA_CTK
        self.env_file = params.get("env_file") or REFRESH_ENV_FILE
        self.env = read_env_file(self.env_file)
        self.kind = "%s/%s" % (self.env.get("NVIDIA_CTK_CDI_GENERATE_VENDOR") or DEFAULT_VENDOR,
                               self.env.get("NVIDIA_CTK_CDI_GENERATE_CLASS") or DEFAULT_CLASS)
        self.warnings = []

    def _run(self, args, env=None):
        rc, out, err = self.runner([self.ctk] + args, env or {})
        return rc, out or "", err or ""

    def _tail(self, text):
        lines = [line for line in (text or "").strip().splitlines() if line.strip()]
        return " / ".join(lines[-3:]) or "no output"

    def listed(self):
        args = ["cdi", "list"]
        for folder in self.params.get("spec_dirs") or []:
            args.append("--spec-dir=%s" % folder)
        rc, out, err = self._run(args)
        if rc != 0:
            raise CdiError("nvidia-ctk cdi list failed (rc %d): %s" % (rc, self._tail(err or out)))
        return listed_names(out, self.kind)

    def generate_env(self):
        """The environment nvidia-cdi-refresh.service gives nvidia-ctk, with ``uuid`` among the naming strategies."""
        env = dict(self.env)
        strategies = [s.strip() for s in env.get(STRATEGIES_VAR, "").split(",") if s.strip()]
        if strategies and "uuid" not in strategies:
            self.warnings.append("%s sets %s=%s: MIG devices' index names depend on the tool that made the layout, so "
                                 "uuid is added to the names this module writes"
                                 % (self.env_file, STRATEGIES_VAR, env[STRATEGIES_VAR]))
            env[STRATEGIES_VAR] = ",".join(strategies + ["uuid"])
        env.pop(OUTPUT_VAR, None)  # the output is given on the command line
        return env

    def generate(self, path):
        """The spec nvidia-ctk generates for ``path``, as ``{file name: bytes}`` (more than one where it splits off
        coherent devices), generated in a folder of its own."""
        folder = tempfile.mkdtemp(prefix="kubegpu-cdi-")
        try:
            target = os.path.join(folder, os.path.basename(path))
            rc, out, err = self._run(["cdi", "generate", "--output=%s" % target], self.generate_env())
            files = dict((name, _read(os.path.join(folder, name))) for name in sorted(os.listdir(folder)))
            if rc != 0 or os.path.basename(path) not in files:
                raise CdiError("nvidia-ctk cdi generate failed for %s (rc %d): %s" % (path, rc, self._tail(err or out)),
                               path=path)
            return files
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def install(self, path, files):
        """Put the generated files beside ``path``, each replacing its old one atomically; True when any differed."""
        directory = os.path.dirname(path) or "."
        changed = False
        for name, content in files.items():
            live = os.path.join(directory, name)
            if _read(live) == content:
                continue
            changed = True
            if self.params.get("check_mode"):
                continue
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            handle, staged = tempfile.mkstemp(prefix=".%s." % name, dir=directory)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(content)
                os.chmod(staged, 0o644)
                os.rename(staged, live)
            except (IOError, OSError) as exc:
                if os.path.exists(staged):
                    os.unlink(staged)
                raise FileError("cannot write the CDI spec: %s" % exc, path=live)
        return changed


def run(params, runner, check_mode=False):
    """Bring the toolkit's CDI specs of this host in line with ``params["gpu"]``; returns the module's result."""
    spec = Spec(dict(params, check_mode=check_mode), runner)
    paths = spec_paths(params, spec.env)
    result = {"changed": False, "paths": paths, "expected": expected_names(params.get("gpu")), "regenerated": [],
              "removed": []}
    if not paths:
        result["not_in_use"] = ("the host has no CDI spec of the NVIDIA Container Toolkit (no %s or %s, no "
                                "nvidia-cdi-refresh.service)" % (REFRESH_OUTPUT, STATIC_OUTPUT))
        return result
    if not os.access(spec.ctk, os.X_OK):
        raise CdiError("the host uses the NVIDIA Container Toolkit's CDI spec (%s) but has no nvidia-ctk at %s: "
                       "install the toolkit (the container_toolkit role) or set nvidia_ctk"
                       % (", ".join(paths), spec.ctk))
    _all, before = spec.listed()
    result["before"] = before
    wanted = result["expected"]
    if before == wanted and not params.get("force") and all(os.path.exists(p) for p in paths):
        result["devices"] = before
        return result
    for path in paths:
        if not wanted:
            # no device: no valid spec can be written, and the old one names devices that are gone
            if os.path.exists(path):
                result["removed"].append(path)
                if not check_mode:
                    os.unlink(path)
            continue
        if spec.install(path, spec.generate(path)):
            result["regenerated"].append(path)
    result["changed"] = bool(result["regenerated"] or result["removed"])
    if check_mode:
        result["devices"] = wanted
    else:
        _all, after = spec.listed()
        result["devices"] = after
        if after != wanted:
            missing = sorted(set(wanted) - set(after))
            extra = sorted(set(after) - set(wanted))
            raise CdiError("after regenerating %s, nvidia-ctk cdi list names %s by UUID, NVML %s (%s%s%s); another "
                           "spec of %s in the CDI folders may be stale: list them with 'nvidia-ctk cdi list'"
                           % (", ".join(paths), after or "nothing", wanted or "nothing",
                              "missing: %s" % ", ".join(missing) if missing else "",
                              "; " if missing and extra else "", "not on the GPUs: %s" % ", ".join(extra) if extra else "",
                              spec.kind), **result)
    if spec.warnings:
        result["warnings"] = spec.warnings
    return result
