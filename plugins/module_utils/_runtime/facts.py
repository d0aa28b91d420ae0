# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What a host's container runtimes are and what they say, read in one go: the work of ``container_runtime_facts``.

One module run replaces a role's read-only probes, each of which is a round trip to the host: which runtimes of the
registry are installed and their versions, the systemd unit that runs each (the first enabled one of its units),
that unit's command line with the variables of its ``Environment`` and ``EnvironmentFile`` settings expanded (where
Debian's ``DOCKER_OPTS`` comes from), what each daemon reports it runs with (``docker info``, ``containerd config
dump``, ``crio config``, the containerd config a distribution generated at its last start, ``crictl info``), the
versions of installed packages, the state of a few files (a repository key, a repository definition, a marker), and,
for each runtime a plan names, whether ``nvidia_runtime_config`` with those options would change a file (its own
planning, :func:`.engine.plan`, which reads and writes nothing), so that a role calls the writer only where it must.

Each adapter of the registry says what is its own (:class:`.base.Runtime`: how its daemon is asked and what its answer
means, the flag that names its config on its command line, what its restart stops); this file asks every adapter the
same questions and never branches on a runtime's name. The parsers are pure functions; :func:`gather` runs the
commands through the host passed in. Nothing is written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import platform
import re
import stat

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import args, engine, registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import failed, report

# systemd's unit file states of a unit that starts (the role restarts the first unit of a runtime in one of them)
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect")
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "ExecStart", "Environment", "EnvironmentFiles")
TEXT_LIMIT = 65536  # a file's content is returned up to this size (repository definitions, keys, markers)
CHECKSUM_LIMIT = 16 * 1048576
_VARIABLE = re.compile(r"\$(\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


# --- systemd -------------------------------------------------------------------------------------------------------

def parse_show(text):
    """``systemctl show`` output of several units (blocks separated by a blank line) as ``{unit: {property: [values]}}``
    (a property given more than once, such as ``EnvironmentFiles``, keeps every value)."""
    units = {}
    block = {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if block.get("Id"):
                units[block["Id"][0]] = block
            block = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            block.setdefault(key, []).append(value)
    return units


def exec_argv(exec_start):
    """The command line of an ``ExecStart`` property (``{ path=... ; argv[]=/usr/sbin/dockerd -H fd:// ; ... }``)."""
    match = re.search(r"argv\[\]=(.*?)(?: ;| \}|$)", exec_start or "")
    return match.group(1).split() if match else []


def environment_files(values):
    """``[(path, optional)]`` from ``EnvironmentFiles`` values (``/etc/default/docker (ignore_errors=yes)``)."""
    out = []
    for value in values or []:
        match = re.match(r"^(?P<path>\S+)(?: \(ignore_errors=(?P<ignore>yes|no)\))?", value.strip())
        if match:
            out.append((match.group("path"), match.group("ignore") == "yes"))
    return out


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def parse_environment_file(text):
    """``KEY=VALUE`` lines of an environment file (``#`` and ``;`` comments, optional quotes, ``export``)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        key, sep, value = line.partition("=")
        if sep and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key.strip()):
            out[key.strip()] = _unquote(value)
    return out


def parse_environment(values):
    """The ``Environment`` property (``KEY=VALUE`` pairs separated by spaces, each line one setting)."""
    out = {}
    for value in values or []:
        for word in value.split():
            key, sep, item = word.partition("=")
            if sep:
                out[key] = item
    return out


def expand(argv, environment):
    """The words of a command line with ``$VAR`` and ``${VAR}`` replaced from ``environment`` and split on
    whitespace, as the flags end up on the daemon's command line (an unset variable gives nothing)."""
    words = []
    for word in argv:
        words.extend(_VARIABLE.sub(lambda m: environment.get(m.group("braced") or m.group("plain"), ""), word).split())
    return words


def flag_names(words):
    """The ``--flags`` of a command line, without their values (``--default-runtime=runc`` gives ``--default-runtime``)."""
    return [w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2]


def flag_value(words, flag):
    """The value of the last ``--flag=value`` or ``--flag value`` in ``words``, or None."""
    value = None
    for index, word in enumerate(words):
        if word.startswith(flag + "="):
            value = word[len(flag) + 1:]
        elif word == flag and index + 1 < len(words) and not words[index + 1].startswith("-"):
            value = words[index + 1]
    return value


# --- What the daemons report ---------------------------------------------------------------------------------------

def restart_warnings(found, plans):
    """Warnings about what the planned restarts stop (each adapter's :meth:`.base.Runtime.restart_warnings`), where a
    runtime's plan changes a file."""
    warnings = []
    for name, entry in sorted(found.items()):
        warnings += registry.get(name).restart_warnings(entry, plans.get(name) or {})
    return warnings


def crictl_report(text):
    """``crictl info`` (JSON) as a report: the runtimes the CRI says it has."""
    try:
        info = json.loads(text or "")
    except ValueError as exc:
        return report("crictl info", error="not JSON: %s" % exc)
    config = info.get("config") if isinstance(info, Mapping) else None
    containerd = (config or {}).get("containerd") if isinstance(config, Mapping) else None
    if not isinstance(containerd, Mapping):
        return report("crictl info", error="no config.containerd in its answer")
    runtimes = dict((name, {"path": ((spec or {}).get("options") or {}).get("BinaryName") if isinstance(spec, Mapping) else None,
                            "type": (spec or {}).get("runtimeType") if isinstance(spec, Mapping) else None})
                    for name, spec in (containerd.get("runtimes") or {}).items())
    return report("crictl info", default_runtime=containerd.get("defaultRuntimeName"), runtimes=runtimes,
                  cdi=config.get("enableCDI"))


# --- Packages and files --------------------------------------------------------------------------------------------

def package_manager(get_bin_path):
    for name in ("apt-get", "dnf", "yum", "zypper"):
        if get_bin_path(name):
            return name.replace("apt-get", "apt")
    return None


def parse_dpkg(text, held=None):
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'`` as ``{package: version}`` (installed
    only: the status's second letter ``i``, whatever is wanted of it). The installed packages on hold (wanted ``h``)
    are added to the list ``held`` when one is given."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][:2] in ("ii", "hi"):
            out[parts[0]] = parts[1]
            if parts[2].startswith("h") and held is not None:
                held.append(parts[0])
    return out


def parse_rpm(text):
    """``rpm -q --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\n'`` as ``{package: version}``."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[0] and " " not in parts[0]:
            out[parts[0]] = parts[1]
    return out


def packages(names, host, held=None):
    """``{name: installed version or None}``; with dpkg, the installed ones on hold are added to ``held``."""
    found = {}
    if names and host.get_bin_path("dpkg-query"):
        _rc, out, _err = host.run_command(["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"]
                                          + list(names))
        found = parse_dpkg(out, held)
    elif names and host.get_bin_path("rpm"):
        _rc, out, _err = host.run_command(["rpm", "-q", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\n"] + list(names))
        found = parse_rpm(out)
    return dict((name, found.get(name)) for name in names)


def describe_file(path):
    """Whether ``path`` exists, its kind, mode, size, SHA-256 and (small UTF-8 text) content. Never raises."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return {"exists": False, "error": None if exc.errno == 2 else exc.strerror}
    out = {"exists": True, "directory": stat.S_ISDIR(info.st_mode), "mode": "%04o" % stat.S_IMODE(info.st_mode),
           "size": info.st_size, "sha256": None, "content": None, "error": None}
    if not stat.S_ISREG(info.st_mode):
        return out
    try:
        if info.st_size <= CHECKSUM_LIMIT:
            with open(path, "rb") as handle:
                data = handle.read()
            out["sha256"] = hashlib.sha256(data).hexdigest()
            if len(data) <= TEXT_LIMIT:
                try:
                    out["content"] = data.decode("utf-8")
                except UnicodeDecodeError:
                    pass
    except (IOError, OSError) as exc:
        out["error"] = exc.strerror or str(exc)
    return out


# --- Would nvidia_runtime_config change anything? ----------------------------------------------------------------

# What a plan takes besides the options given: nvidia_runtime_config's own defaults where they do not depend on a vendor
# (the runtime options' argument spec, args.py), and no backup or validation
PLAN_DEFAULTS = dict(args.defaults(), backup=False, validate=None)


def plan_changes(entries, found, host):
    """``{runtime: {changed, files, config_path, error}}`` for each plan of a runtime found: whether
    ``nvidia_runtime_config`` with those options would change a file (``changed`` None, with the reason in ``error``,
    when it cannot tell: the module then says why itself). A plan without ``config_path`` follows the config its
    daemon's command line names (``config_file``: docker's ``--config-file``), as the container_toolkit role does."""
    out = {}
    for entry in entries:
        name = entry["runtime"]
        if name not in found:
            continue
        params = dict(PLAN_DEFAULTS)
        params.update(dict((k, v) for k, v in entry.items() if v is not None and v != ""))
        if not params.get("config_path"):
            params["config_path"] = found[name].get("config_file") or None
        try:
            the_plan = engine.plan(params, host)
        except KubegpuError as exc:
            out[name] = {"changed": None, "files": [], "config_path": params.get("config_path"), "error": str(exc)}
            continue
        files = [c.path for c in the_plan.changes if c.changed]
        out[name] = {"changed": bool(files), "files": files, "config_path": the_plan.written_path, "error": None}
    return out


# --- Everything, in one go -----------------------------------------------------------------------------------------

def _read(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def _units(names, host):
    """``{unit: properties}`` of the given units, from one ``systemctl show`` (empty without systemd)."""
    systemctl = host.get_bin_path("systemctl")
    if not names or not systemctl:
        return {}
    rc, out, _err = host.run_command([systemctl, "show"] + ["--property=%s" % p for p in UNIT_PROPERTIES]
                                     + ["%s.service" % n for n in names])
    return parse_show(out) if rc == 0 else {}


def _unit_facts(adapter, units, read=_read):
    """The unit that runs a runtime (its first unit systemd would start, else its first) and its command line."""
    names = list(adapter.services or (adapter.service,))
    states = dict((n, ((units.get("%s.service" % n) or {}).get("UnitFileState") or [""])[0] or None) for n in names)
    service = next((n for n in names if states[n] in ENABLED_STATES), names[0])
    props = units.get("%s.service" % service) or {}
    environment = {}
    for path, _optional in environment_files(props.get("EnvironmentFiles")):
        environment.update(parse_environment_file(read(path)))
    environment.update(parse_environment(props.get("Environment")))
    argv = exec_argv((props.get("ExecStart") or [""])[0])
    words = expand(argv, environment)
    return {
        "service": service,
        "unit_states": states,
        "active": ((props.get("ActiveState") or [""])[0] or None),
        "exec_start": argv,
        "environment_files": [p for p, _o in environment_files(props.get("EnvironmentFiles"))],
        "command_line": words,
        "flags": flag_names(words[1:]),
    }


def gather(params, host, read=_read):
    """The facts (``ansible_facts.container_runtimes``); runs commands through ``host`` (a ``base.Host``)."""
    wanted = params.get("runtimes") or registry.NAMES
    found = {}
    answers = {}  # what each daemon answered when it was asked first (Runtime.ask), for its version and its report
    for name in wanted:
        adapter = registry.get(name)
        binary = host.get_bin_path(adapter.binary) if not os.path.isabs(adapter.binary) else (
            adapter.binary if os.access(adapter.binary, os.X_OK) else None)
        if not binary:
            continue
        if params.get("report", True):
            # A daemon that answers may say its version (docker info's ServerVersion), which spares starting its
            # binary (a large one) only to print it; one that does not answer is asked through its binary.
            answers[name] = adapter.ask(host)
            answered = adapter.version_answered(answers[name])
            if answered:
                found[name] = {"binary": binary, "version": answered[0], "version_output": answered[1]}
                continue
        rc, out, err = host.run_command([binary] + list(adapter.version_args))
        version = adapter.version(out) if rc == 0 else None
        if version is None:
            continue  # a binary that cannot tell its version is not a runtime the role can work with
        found[name] = {"binary": binary, "version": version, "version_output": (out or "").strip()[:500]}
    units = _units(sorted(set(u for n in found for u in (registry.get(n).services or (registry.get(n).service,)))), host)
    for name, entry in found.items():
        adapter = registry.get(name)
        entry.update(_unit_facts(adapter, units, read))
        entry["config_file"] = (flag_value(entry["command_line"], adapter.config_file_flag) if adapter.config_file_flag
                                else None)
        entry["reports"] = (adapter.report(entry["binary"], params, host, read, answers.get(name))
                            if params.get("report", True) else None)
    crictl = host.get_bin_path("crictl")
    crictl_facts = {"path": crictl, "reports": None}
    if crictl and params.get("report", True):
        rc, out, err = host.run_command([crictl, "info"])
        crictl_facts["reports"] = crictl_report(out) if rc == 0 else report("crictl info", error=failed("crictl info", rc, out, err))
    held = []
    versions = packages(params.get("packages") or [], host, held)
    plans = plan_changes(params.get("plans") or [], found, host)
    for warning in restart_warnings(found, plans):
        host.warn(warning)
    return {
        "architecture": platform.machine(),
        "package_manager": package_manager(host.get_bin_path),
        "runtimes": found,
        "crictl": crictl_facts,
        "packages": versions,
        "held": sorted(held),
        "files": dict((path, describe_file(path)) for path in params.get("files") or []),
        "plans": plans,
    }


def run(params, host):
    """The module's result: the facts, nothing changed."""
    return {"changed": False, "ansible_facts": {"container_runtimes": gather(params, host)}}
