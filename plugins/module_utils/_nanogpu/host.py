# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""A GPU node's side of nano-gpu (the module nano_gpu_host): whether the node can work with nano-gpu-agent, the
backup of the two binaries the agent's installer replaces, and the way back.

nano-gpu-agent's installer (constants.py says what it does and where that is written upstream) swaps the host's
``nvidia-container-runtime-hook`` and ``nvidia-container-toolkit`` for nano-gpu's own, which only ever run as the
toolkit's legacy prestart hook, in containers docker starts with its default runtime ``nvidia``. So, in order:

- :func:`observe` reads the node (PCI bus, the two binaries, the toolkit's mode and version, docker's default runtime,
  the kubelet's container runtime, what the agent may have left);
- :func:`problems` decides, from that data only, why nano-gpu cannot work here and what to do (pure, unit-tested);
- :func:`run` backs the binaries up once (owner, mode, a symlink as a symlink) with a record in
  ``/var/lib/kubegpu/nano-gpu/host.json`` that the container_toolkit role reads to leave the packages alone, holds
  the toolkit's packages on apt, and with ``state=absent`` puts the host's own binaries back from that backup.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re
import shutil
import socket
import stat

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files, _host
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import facts as runtime_facts
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.docker import docker_report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import common as _toml_common
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import toml_data

RECORD_VERSION = 1
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_ENDPOINT_FLAG = re.compile(r"--container-runtime-endpoint[= ]['\"]?([^'\"\s]+)")
_RUNTIME_FLAG = re.compile(r"--container-runtime[= ]['\"]?([A-Za-z0-9_-]+)")
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_MODE = re.compile(r"^\s*mode\s*=\s*[\"']([^\"']*)[\"']\s*(#.*)?$")
_ENDPOINT_KEY = re.compile(r"^containerRuntimeEndpoint:\s*['\"]?([^'\"\s#]+)", re.M)


# --- Reading the node: small parsers (pure) ------------------------------------------------------------------------

def version_tuple(text):
    """``(1, 17, 8)`` from a package version such as ``1.17.8-1``; None when there is none."""
    match = _VERSION.search(str(text or ""))
    return tuple(int(p or 0) for p in match.groups()) if match else None


def _scan_mode(text):
    """The ``mode`` of the ``[nvidia-container-runtime]`` table read line by line, where Python has no TOML reader
    (no tomllib before 3.11, no tomlkit): the toolkit writes that key as a plain ``mode = "..."`` line."""
    table, mode = None, C.AUTO_MODE
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            table = header.group(1).strip().strip('"')
            continue
        found = _MODE.match(line)
        if found and table == C.MODE_KEY[0]:
            mode = found.group(1)
    return mode


def toolkit_mode(text, path=C.TOOLKIT_CONFIG):
    """The toolkit's ``[nvidia-container-runtime] mode`` from its config.toml text (``auto`` when unset or no file)."""
    if not (text or "").strip():
        return C.AUTO_MODE
    if _toml_common.tomlkit is None and _toml_common._tomllib is None:  # pylint: disable=protected-access
        return _scan_mode(text)
    data = toml_data(text or "", path)
    section = data.get(C.MODE_KEY[0])
    if section is not None and not isinstance(section, dict):
        raise FileError("is not a table", path=path, field=C.MODE_KEY[0])
    mode = (section or {}).get(C.MODE_KEY[1], C.AUTO_MODE)
    if not isinstance(mode, str):
        raise FileError("is not a string", path=path, field=".".join(C.MODE_KEY))
    return mode


def effective_mode(mode, version):
    """What the runtime does with ``mode`` at toolkit ``version`` (a tuple, or None when unknown): ``auto`` is
    legacy before 1.18.0 and jit-cdi from it on an NVML platform; None where that cannot be told."""
    if mode != C.AUTO_MODE:
        return mode
    if version is None:
        return None
    return "jit-cdi" if version >= C.AUTO_IS_CDI_FROM else C.LEGACY_MODE


def kubelet_runtime(texts):
    """Which CRI the kubelet talks to, from its files ``{path: text or None}``: ``(runtime, endpoint, path)`` with
    runtime one of docker (dockershim or cri-dockerd), containerd, crio, ``other``, or None when no file says.
    Flags (kubeadm's flags file, Kubespray's kubelet.env, the distributions' defaults) come before the
    KubeletConfiguration's containerRuntimeEndpoint, as the kubelet lets a flag override its config file."""
    for path in C.KUBELET_FLAG_FILES:
        text = texts.get(path)
        if not text:
            continue
        found = _ENDPOINT_FLAG.search(text)
        if found:
            return classify_endpoint(found.group(1)), found.group(1), path
        legacy = _RUNTIME_FLAG.search(text)
        if legacy and legacy.group(1) == "docker":  # dockershim, Kubernetes 1.23 and older
            return "docker", "dockershim", path
    text = texts.get(C.KUBELET_CONFIG)
    found = _ENDPOINT_KEY.search(text or "")
    if found:
        return classify_endpoint(found.group(1)), found.group(1), C.KUBELET_CONFIG
    return None, None, None


def classify_endpoint(endpoint):
    """The runtime behind a CRI endpoint (``unix:///run/cri-dockerd.sock`` is docker through cri-dockerd)."""
    name = os.path.basename(str(endpoint))
    if "dockershim" in name or "cri-dockerd" in name:
        return "docker"
    if "containerd" in name:
        return "containerd"
    if "crio" in name:
        return "crio"
    return "other"


def docker_default(info, daemon_json):
    """docker's default runtime and where it was read: ``docker info`` where the daemon answers (``info``: the
    ``(rc, out, err)`` of ``docker info --format '{{json .}}'``), else ``default-runtime`` of daemon.json."""
    if info is not None and info[0] == 0:
        report = docker_report(info[1])
        if report["ok"]:
            return report["default_runtime"], "docker info"
    try:
        data = json.loads(daemon_json) if daemon_json and daemon_json.strip() else {}
    except ValueError as exc:
        raise FileError("is not JSON (%s)" % exc, path=C.DOCKER_CONFIG)
    if not isinstance(data, dict):
        raise FileError("is not a JSON object", path=C.DOCKER_CONFIG)
    return data.get("default-runtime") or "runc", C.DOCKER_CONFIG + " (docker did not answer)"


# --- The decision (pure) -------------------------------------------------------------------------------------------

def problems(observed):
    """Why nano-gpu cannot work on the node ``observed`` describes, one line each with what to do; [] when it can.

    ``observed``: nvidia_gpus (int), binaries ({path: describe() or None}), toolkit_version (tuple or None),
    mode, docker (bool), docker_default and docker_source, kubelet_runtime/kubelet_endpoint/kubelet_source,
    backed_up (bool), leftovers (paths of the agent's files found).
    """
    found = []
    if not observed["nvidia_gpus"]:
        found.append("no NVIDIA GPU is on the PCI bus (vendor 0x10de): nano-gpu-agent shares NVIDIA GPUs only; "
                     "take the host out of the GPU group")
    missing = [p for p in C.REPLACED_BINARIES if not (observed["binaries"].get(p) or {}).get("exists")]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        found.append("%s %s missing: install the NVIDIA container toolkit first (the container_toolkit role; NVIDIA's "
                     "deb links nvidia-container-toolkit to the hook)" % (" and ".join(missing), verb))
    if observed["leftovers"] and not observed["backed_up"]:
        found.append("nano-gpu-agent has run here already (%s) and no backup of the host's own binaries was taken "
                     "before: reinstall the toolkit's package (apt-get install --reinstall nvidia-container-toolkit, "
                     "or dnf reinstall) so that NVIDIA's hook is back, then run again" % ", ".join(observed["leftovers"]))
    mode = observed["mode"]
    effective = effective_mode(mode, observed["toolkit_version"])
    if effective != C.LEGACY_MODE:
        why = ("mode is %s" % mode if mode != C.AUTO_MODE else
               "mode is auto, which is jit-cdi from toolkit 1.18.0 (installed: %s)" % (
                   ".".join(str(p) for p in observed["toolkit_version"]) if observed["toolkit_version"] else "unknown"))
        found.append("the NVIDIA container toolkit is not in legacy mode (%s, %s): nano-gpu's hook only runs as the "
                     "legacy prestart hook; set mode = \"legacy\" under [nvidia-container-runtime] in %s"
                     % (why, C.TOOLKIT_CONFIG, C.TOOLKIT_CONFIG))
    if not observed["docker"]:
        found.append("docker is not installed: nano-gpu needs docker with the NVIDIA runtime as its default "
                     "(dockershim or cri-dockerd); containerd and CRI-O nodes cannot run it")
    elif observed["docker_default"] != C.DOCKER_DEFAULT_RUNTIME:
        found.append("docker's default runtime is %s (%s), not %s: run the container_toolkit role with "
                     "container_toolkit_set_as_default true (it sets \"default-runtime\": \"%s\" in %s)"
                     % (observed["docker_default"], observed["docker_source"], C.DOCKER_DEFAULT_RUNTIME,
                        C.DOCKER_DEFAULT_RUNTIME, C.DOCKER_CONFIG))
    runtime = observed["kubelet_runtime"]
    if runtime not in (None, "docker"):
        found.append("the kubelet runs its pods on %s (%s in %s), not docker: nano-gpu's hook only runs in "
                     "containers docker starts; move the node to docker through cri-dockerd, or leave it out of "
                     "nano-gpu" % (runtime, observed["kubelet_endpoint"], observed["kubelet_source"]))
    return found


def warnings_for(observed):
    """What cannot be decided but should be said."""
    out = []
    if observed["kubelet_runtime"] is None:
        out.append("no kubelet configuration says which container runtime the kubelet uses (%s); nano-gpu works only "
                   "where it is docker (dockershim or cri-dockerd)" % ", ".join((C.KUBELET_CONFIG,) + C.KUBELET_FLAG_FILES))
    return out


# --- The node, read ------------------------------------------------------------------------------------------------

def describe(path):
    """A binary as the backup needs it: kind (file or symlink), symlink target, mode, owner, SHA-256; None if absent."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    out = {"exists": True, "kind": "symlink" if stat.S_ISLNK(info.st_mode) else "file", "target": None,
           "mode": "%04o" % stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid, "sha256": None}
    if out["kind"] == "symlink":
        out["target"] = os.readlink(path)
        out["exists"] = os.path.exists(path)
    else:
        out["sha256"] = sha256_of(path)
    return out


def sha256_of(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (IOError, OSError) as exc:
        raise FileError("cannot read: %s" % (exc.strerror or exc), path=path)
    return digest.hexdigest()


def observe(host, state_dir=C.HOST_STATE_DIR, pci_devices=_host.PCI_DEVICES_PATH):
    """The node as :func:`problems` needs it. ``host``: a ``_runtime.base.Host``."""
    held = []
    versions = runtime_facts.packages(list(C.TOOLKIT_PACKAGES), host, held)
    config_text = _files.read_text(C.TOOLKIT_CONFIG)
    docker_cli = host.get_bin_path("docker")
    dockerd = host.get_bin_path("dockerd")
    info = host.run_command([docker_cli, "info", "--format", "{{json .}}"]) if docker_cli else None
    docker = bool(docker_cli or dockerd)
    default, source = docker_default(info, _files.read_text(C.DOCKER_CONFIG)) if docker else (None, None)
    texts = dict((p, _files.read_text(p)) for p in (C.KUBELET_CONFIG,) + C.KUBELET_FLAG_FILES)
    runtime, endpoint, where = kubelet_runtime(texts)
    record = read_record(state_dir)
    return {
        "hostname": socket.gethostname(),
        "nvidia_gpus": len(_host.pci_gpus(C.NVIDIA_PCI_VENDOR, pci_devices)),
        "binaries": dict((p, describe(p)) for p in C.REPLACED_BINARIES),
        "packages": versions,
        "held": held,
        "toolkit_version": version_tuple(versions.get("nvidia-container-toolkit") or versions.get("nvidia-container-toolkit-base")),
        "mode": toolkit_mode(config_text),
        "docker": docker,
        "docker_default": default,
        "docker_source": source,
        "kubelet_runtime": runtime,
        "kubelet_endpoint": endpoint,
        "kubelet_source": where,
        "backed_up": record is not None,
        "record": record,
        "leftovers": [p for p in C.AGENT_LEFTOVERS if os.path.lexists(p)],
        "apt_mark": host.get_bin_path("apt-mark"),
    }


def record_path(state_dir=C.HOST_STATE_DIR):
    return os.path.join(state_dir, C.HOST_STATE_FILE)


def read_record(state_dir=C.HOST_STATE_DIR):
    """The record of the backup (host.json), or None."""
    path = record_path(state_dir)
    text = _files.read_text(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise FileError("is not JSON (%s); it is the record of the nano-gpu backup: restore it, or remove the "
                        "directory once the host's own binaries are back" % exc, path=path)
    if not isinstance(record, dict) or not isinstance(record.get("binaries"), dict):
        raise FileError("is not a record of the nano-gpu backup", path=path, field="binaries")
    return record


# --- Changes -------------------------------------------------------------------------------------------------------

def _backup_name(state_dir, path):
    return os.path.join(state_dir, "bin", os.path.basename(path))


def take_backup(binaries, state_dir=C.HOST_STATE_DIR):
    """Copy each binary (a symlink is recorded, not followed) into ``state_dir``; returns the record's binaries."""
    _files.make_dirs(os.path.join(state_dir, "bin"))
    out = {}
    for path, info in sorted(binaries.items()):
        entry = dict(info)
        entry["backup"] = None
        if info["kind"] == "file":
            entry["backup"] = _backup_name(state_dir, path)
            try:
                shutil.copy2(path, entry["backup"])
                os.chown(entry["backup"], info["uid"], info["gid"])
            except (IOError, OSError) as exc:
                raise FileError("cannot back up to %s: %s" % (entry["backup"], exc.strerror or exc), path=path)
            if sha256_of(entry["backup"]) != info["sha256"]:
                raise FileError("changed while it was backed up; run again", path=path)
        out[path] = entry
    return out


def check_backup(record, state_dir=C.HOST_STATE_DIR):
    """Refuse a backup that could not be put back: a copy missing or not what the record says."""
    for path, entry in sorted(record["binaries"].items()):
        if entry.get("kind") != "file":
            continue
        backup = entry.get("backup") or ""
        if not os.path.isfile(backup) or sha256_of(backup) != entry.get("sha256"):
            raise FileError("the backup of %s is missing or not the file recorded in %s, so the host's own binary could "
                            "not be given back: reinstall the toolkit's package, remove %s, and run again"
                            % (path, record_path(state_dir), state_dir), path=backup or state_dir)


def write_record(record, state_dir=C.HOST_STATE_DIR):
    _files.make_dirs(state_dir)
    staged = _files.Staged(record_path(state_dir), json.dumps(record, indent=2, sort_keys=True) + "\n")
    staged.commit()


def differs(entry, current):
    """Whether the binary now (``current``, :func:`describe`) is not the one backed up (``entry``)."""
    if current is None:
        return True
    if entry["kind"] != current["kind"]:
        return True
    if entry["kind"] == "symlink":
        return entry["target"] != current["target"]
    return (entry["sha256"], entry["mode"], entry["uid"], entry["gid"]) != (
        current["sha256"], current["mode"], current["uid"], current["gid"])


def restore(path, entry):
    """Put the backed-up binary back at ``path`` in one rename (a temporary beside it, owner and mode first)."""
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, ".%s.kubegpu-restore" % os.path.basename(path))
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if entry["kind"] == "symlink":
            os.symlink(entry["target"], tmp)
        else:
            if sha256_of(entry["backup"]) != entry["sha256"]:
                raise FileError("the backup does not match its record (SHA-256); it cannot be put back", path=entry["backup"])
            shutil.copy2(entry["backup"], tmp)
            os.chown(tmp, entry["uid"], entry["gid"])
            os.chmod(tmp, int(entry["mode"], 8))
        os.replace(tmp, path)
    except (IOError, OSError) as exc:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise FileError("cannot put the host's own binary back: %s" % (exc.strerror or exc), path=path)


def _summary(binaries):
    return dict((p, None if i is None else (("-> %s" % i["target"]) if i["kind"] == "symlink" else
                                            "sha256 %s mode %s owner %s:%s" % (i["sha256"], i["mode"], i["uid"], i["gid"])))
                for p, i in sorted(binaries.items()))


def run(params, host, check_mode=False, want_diff=False, observed=None):
    """The module's result. ``params``: state, hold_packages, remove_leftovers, state_dir."""
    state_dir = params.get("state_dir") or C.HOST_STATE_DIR
    observed = observed if observed is not None else observe(host, state_dir)
    record = observed["record"]
    result = {"changed": False, "backup_dir": state_dir, "record": record_path(state_dir), "actions": [],
              "checks": dict((k, observed[k]) for k in ("nvidia_gpus", "mode", "docker_default", "docker_source",
                                                        "kubelet_runtime", "kubelet_endpoint", "kubelet_source")),
              "problems": []}
    result["checks"]["toolkit_version"] = ".".join(str(p) for p in observed["toolkit_version"] or ()) or None
    if params["state"] == "absent":
        return _absent(params, host, observed, record, state_dir, result, check_mode, want_diff)
    found = problems(observed)
    result["problems"] = found
    if found:
        raise KubegpuError("nano-gpu cannot work on %s: %s" % (observed["hostname"], "; ".join(
            "(%d) %s" % (i + 1, p) for i, p in enumerate(found))), problems=found, checks=result["checks"])
    result["warnings"] = warnings_for(observed)
    if record is not None:
        check_backup(record, state_dir)
    new_record = dict(record or {"version": RECORD_VERSION, "by": "kubegpu.cluster.nano_gpu_host", "held": []})
    if record is None:
        result["actions"].append("back up %s into %s" % (" and ".join(C.REPLACED_BINARIES), state_dir))
    to_hold = []
    if params.get("hold_packages", True):
        if observed["apt_mark"]:
            to_hold = [p for p in C.TOOLKIT_PACKAGES if observed["packages"].get(p) and p not in observed["held"]]
            if to_hold:
                result["actions"].append("hold %s (apt-mark)" % ", ".join(to_hold))
        elif record is None:
            result["warnings"].append("no apt-mark here: the toolkit's packages are not held; keep unattended upgrades "
                                      "off them (an upgrade puts NVIDIA's binaries back over nano-gpu's)")
    result["changed"] = bool(result["actions"])
    if want_diff and result["changed"]:
        held = sorted(set(new_record["held"]) | set(to_hold))
        result["diff"] = {"before": json.dumps(record, indent=2, sort_keys=True) + "\n" if record else "",
                          "after": "backup of %s\nheld: %s\n" % (json.dumps(_summary(observed["binaries"]), indent=2), held)}
    if check_mode or not result["changed"]:
        return result
    if record is None:
        new_record["binaries"] = take_backup(dict((p, observed["binaries"][p]) for p in C.REPLACED_BINARIES), state_dir)
        new_record["toolkit_version"] = result["checks"]["toolkit_version"]
    if to_hold:
        _apt_mark(host, observed["apt_mark"], "hold", to_hold)
        new_record["held"] = sorted(set(new_record.get("held") or []) | set(to_hold))
    write_record(new_record, state_dir)
    return result


def _apt_mark(host, apt_mark, verb, names):
    rc, out, err = host.run_command([apt_mark, verb] + list(names))
    if rc != 0:
        raise KubegpuError("apt-mark %s %s exited %d: %s" % (verb, " ".join(names), rc, (err or out).strip()))


def _absent(params, host, observed, record, state_dir, result, check_mode, want_diff):
    if record is None:
        return result
    current = dict((p, describe(p)) for p in record["binaries"])
    to_restore = sorted(p for p, entry in record["binaries"].items() if differs(entry, current[p]))
    leftovers = observed["leftovers"] if params.get("remove_leftovers", True) else []
    to_unhold = [p for p in record.get("held") or [] if observed["packages"].get(p)] if observed["apt_mark"] else []
    result["actions"] = (["put back %s from %s" % (p, state_dir) for p in to_restore]
                         + ["remove %s (left by nano-gpu-agent)" % p for p in leftovers]
                         + (["release the hold on %s" % ", ".join(to_unhold)] if to_unhold else [])
                         + ["remove %s" % state_dir])
    result["changed"] = True
    if want_diff:
        result["diff"] = {"before": json.dumps(_summary(current), indent=2) + "\n",
                          "after": json.dumps(_summary(dict((p, record["binaries"][p]) for p in current)), indent=2) + "\n"}
    if check_mode:
        return result
    for path in to_restore:
        restore(path, record["binaries"][path])
    for path in leftovers:
        _files.remove(path)
    if to_unhold:
        _apt_mark(host, observed["apt_mark"], "unhold", to_unhold)
    try:
        shutil.rmtree(state_dir)
    except OSError as exc:
        raise FileError("cannot remove the backup once the binaries are back: %s" % (exc.strerror or exc), path=state_dir)
    return result
