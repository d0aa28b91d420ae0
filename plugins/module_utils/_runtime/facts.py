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

The parsers are pure functions; :func:`gather` runs the commands through the host passed in. Nothing is written.
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

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import engine, registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import toml_data
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import CRI_PLUGIN

# systemd's unit file states of a unit that starts (the role restarts the first unit of a runtime in one of them)
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect")
UNIT_PROPERTIES = ("Id", "LoadState", "ActiveState", "UnitFileState", "ExecStart", "Environment", "EnvironmentFiles")
# what each daemon is asked, besides the containerd config a distribution generates (its adapter's ``generated``)
REPORTERS = {
    "docker": ("docker info", ["docker", "info", "--format", "{{json .}}"]),
    "crio": ("crio config", ["crio", "config"]),
}
CONTAINERD_DUMP = "containerd config dump"
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

def report(source, default_runtime=None, runtimes=None, cdi=None, error=None, live_restore=None):
    return {"source": source, "ok": error is None, "error": error, "default_runtime": default_runtime,
            "runtimes": runtimes or {}, "cdi": cdi, "live_restore": live_restore}


def docker_report(text):
    """``docker info --format '{{json .}}'`` as a report."""
    try:
        info = json.loads(text or "")
    except ValueError as exc:
        return report(REPORTERS["docker"][0], error="not JSON: %s" % exc)
    if not isinstance(info, Mapping):
        return report(REPORTERS["docker"][0], error="not a JSON object")
    runtimes = dict((name, {"path": (spec or {}).get("path") if isinstance(spec, Mapping) else None, "type": None})
                    for name, spec in (info.get("Runtimes") or {}).items())
    live = info.get("LiveRestoreEnabled")
    return report(REPORTERS["docker"][0], default_runtime=info.get("DefaultRuntime"), runtimes=runtimes,
                  live_restore=live if isinstance(live, bool) else None)


# What restarting docker stops when its live-restore is off: dockerd stops every container when it shuts down unless
# "live-restore" is set (docs.docker.com, "Live restore"; moby daemon/daemon.go, Shutdown: containers are stopped
# only when live-restore is off). containerd and CRI-O keep containers through a restart (their shims, conmon).
LIVE_RESTORE_OFF = ("restarting docker on this node to load the NVIDIA runtime stops every container on it, pods "
                    "included (docker info: LiveRestoreEnabled false); the kubelet starts the pods again afterwards. "
                    "To keep containers running through docker restarts, set \"live-restore\": true in daemon.json "
                    "and restart docker once at a time of your choosing; the stage restarts runtimes in batches "
                    "(kubegpu_runtime_restart_serial, docs/getting-started.md)")


def restart_warnings(found, plans):
    """Warnings about what the planned restarts stop: docker with live-restore off, where its plan changes a file."""
    docker = found.get("docker") or {}
    live = ((docker.get("reports") or {}).get("live_restore"))
    if (plans.get("docker") or {}).get("changed") and live is False:
        return [LIVE_RESTORE_OFF]
    return []


def cri_table(data):
    """The CRI runtime plugin table of a containerd config (any version), or None."""
    plugins = data.get("plugins") if isinstance(data, Mapping) else None
    if not isinstance(plugins, Mapping):
        return None
    for plugin in (CRI_PLUGIN[3], CRI_PLUGIN[2]):
        if isinstance(plugins.get(plugin), Mapping):
            return plugins[plugin]
    return None


def containerd_report(text, source):
    """A containerd config (``config dump`` output or a generated ``config.toml``) as a report."""
    try:
        data = toml_data(text or "", source)
    except (FileError, AttributeError) as exc:  # AttributeError: neither tomllib nor tomlkit
        return report(source, error="cannot be read as TOML: %s" % exc)
    cri = cri_table(data)
    if cri is None:
        return report(source, error="no CRI runtime plugin table")
    containerd = cri.get("containerd") if isinstance(cri.get("containerd"), Mapping) else {}
    runtimes = {}
    for name, spec in (containerd.get("runtimes") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        options = spec.get("options") if isinstance(spec.get("options"), Mapping) else {}
        runtimes[name] = {"type": spec.get("runtime_type"), "path": options.get("BinaryName"),
                          "systemd_cgroup": options.get("SystemdCgroup")}
    return report(source, default_runtime=containerd.get("default_runtime_name"), runtimes=runtimes,
                  cdi=cri.get("enable_cdi"))


def crio_report(text):
    """``crio config`` as a report."""
    source = REPORTERS["crio"][0]
    try:
        data = toml_data(text or "", source)
    except (FileError, AttributeError) as exc:
        return report(source, error="cannot be read as TOML: %s" % exc)
    runtime = ((data.get("crio") or {}).get("runtime") or {}) if isinstance(data.get("crio"), Mapping) else {}
    runtimes = dict((name, {"path": (spec or {}).get("runtime_path"), "type": (spec or {}).get("runtime_type")})
                    for name, spec in (runtime.get("runtimes") or {}).items() if isinstance(spec, Mapping))
    return report(source, default_runtime=runtime.get("default_runtime"), runtimes=runtimes)


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


def _failed(command, rc, out, err):
    text = " ".join(((err or "").strip() or (out or "").strip() or "no output").split())
    return "'%s' exited %s: %s" % (command, rc, text[:500])


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
PLAN_DEFAULTS = {"config_path": None, "drop_in_path": None, "set_as_default": True, "cdi": False, "config_version": "auto",
                 "state": "present", "backup": False, "validate": None}


def plan_changes(entries, found, host):
    """``{runtime: {changed, files, config_path, error}}`` for each plan of a runtime found: whether
    ``nvidia_runtime_config`` with those options would change a file (``changed`` None, with the reason in ``error``,
    when it cannot tell: the module then says why itself). docker without ``config_path`` follows its unit's
    ``--config-file``, as the container_toolkit role does."""
    out = {}
    for entry in entries:
        name = entry["runtime"]
        if name not in found:
            continue
        params = dict(PLAN_DEFAULTS)
        params.update(dict((k, v) for k, v in entry.items() if v is not None and v != ""))
        if name == "docker" and not params.get("config_path"):
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


def _docker_info(host):
    """``docker info`` as ``(rc, out, err)``, or None where the docker CLI is not installed."""
    cli = host.get_bin_path("docker")
    return host.run_command([cli] + REPORTERS["docker"][1][1:]) if cli else None


def _server_version(info):
    """The daemon's version from a ``docker info`` that answered (``ServerVersion``), else None."""
    if not info or info[0] != 0:
        return None
    try:
        version = json.loads(info[1] or "").get("ServerVersion")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and version else None


def _daemon_report(name, adapter, binary, params, host, read=_read, docker_info=None):
    if name == "docker":  # asked once, before the version (gather)
        shown = REPORTERS["docker"][0]
        if docker_info is None:
            return report(shown, error="the docker CLI is not installed, so the daemon could not be asked")
        rc, out, err = docker_info
        return docker_report(out) if rc == 0 else report(shown, error=_failed(shown, rc, out, err))
    if name == "containerd":
        command = [binary, "--config", params.get("containerd_config") or adapter.config_path, "config", "dump"]
        rc, out, err = host.run_command(command)
        if rc != 0:
            return report(CONTAINERD_DUMP, error=_failed(CONTAINERD_DUMP, rc, out, err))
        return containerd_report(out, CONTAINERD_DUMP)
    generated = getattr(adapter, "generated", None)
    if generated:
        text = read(generated)
        if text is None:
            return report(generated, error="%s is not there (the service writes it when it starts)" % generated)
        return containerd_report(text, generated)
    if name in REPORTERS:
        shown, command = REPORTERS[name]
        rc, out, err = host.run_command(command)
        if rc != 0:
            return report(shown, error=_failed(shown, rc, out, err))
        return crio_report(out)
    return None


def gather(params, host, read=_read):
    """The facts (``ansible_facts.container_runtimes``); runs commands through ``host`` (a ``base.Host``)."""
    wanted = params.get("runtimes") or registry.NAMES
    found = {}
    docker_info = None
    for name in wanted:
        adapter = registry.get(name)
        binary = host.get_bin_path(adapter.binary) if not os.path.isabs(adapter.binary) else (
            adapter.binary if os.access(adapter.binary, os.X_OK) else None)
        if not binary:
            continue
        if name == "docker" and params.get("report", True):
            # The daemon that answers says its version (docker info's ServerVersion), which spares starting dockerd
            # (a large binary) only to print it; a daemon that does not answer is asked through its binary.
            docker_info = _docker_info(host)
            server = _server_version(docker_info)
            if server and adapter.version(server):
                found[name] = {"binary": binary, "version": adapter.version(server),
                               "version_output": "docker info: ServerVersion %s" % server}
                continue
        rc, out, err = host.run_command([binary] + list(adapter.version_args))
        version = adapter.version(out) if rc == 0 else None
        if version is None:
            continue  # a binary that cannot tell its version is not a runtime the role can work with
        found[name] = {"binary": binary, "version": version, "version_output": (out or "").strip()[:500]}
    units = _units(sorted(set(u for n in found for u in (registry.get(n).services or (registry.get(n).service,)))), host)
    for name, entry in found.items():
        entry.update(_unit_facts(registry.get(name), units, read))
        entry["config_file"] = flag_value(entry["command_line"], "--config-file") if name == "docker" else None
        entry["reports"] = (_daemon_report(name, registry.get(name), entry["binary"], params, host, read, docker_info)
                            if params.get("report", True) else None)
    crictl = host.get_bin_path("crictl")
    crictl_facts = {"path": crictl, "reports": None}
    if crictl and params.get("report", True):
        rc, out, err = host.run_command([crictl, "info"])
        crictl_facts["reports"] = crictl_report(out) if rc == 0 else report("crictl info", error=_failed("crictl info", rc, out, err))
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
