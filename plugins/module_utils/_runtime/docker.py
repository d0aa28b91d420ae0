# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""docker's daemon.json: register the NVIDIA runtime, make it the default, turn CDI on; and undo exactly that.

Text in, text out. Every other key keeps its value and its place. A file that needs no change is returned as it
was (not re-serialized); a changed one is written with the file's own indentation (4 spaces when it has none) and
a trailing newline.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime, failed, report
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import type_name


def parse(text, path):
    """daemon.json as a dict (keys in file order); a missing or blank file is ``{}``."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
        raise FileError("invalid JSON: %s" % getattr(exc, "msg", exc), path=path, line=line, column=column)
    if not isinstance(data, dict):
        raise FileError("the top level must be a JSON object, not %s" % type_name(data), path=path)
    return data


def _object(data, key, path, create=False):
    if key not in data:
        if not create:
            return None
        data[key] = {}
    value = data[key]
    if not isinstance(value, dict):
        raise FileError("must be a JSON object, not %s" % type_name(value), path=path, field=key)
    return value


def indentation(text):
    """The indentation a daemon.json uses (its first indented key), or 4 spaces."""
    match = re.search(r'^([ \t]+)"', text or "", re.MULTILINE)
    return match.group(1) if match else 4


def dumps(data, indent=4):
    """daemon.json text: keys in order, non-ASCII kept as it is, a trailing newline."""
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


def _render(text, before, after):
    if json.dumps(after) == json.dumps(before):  # strict: ``true`` is not ``1``
        return text
    return dumps(after, indentation(text))


def default_of(text, path):
    """The ``default-runtime`` a daemon.json names, or None."""
    return parse(text, path).get("default-runtime")


def _restore_default(data, settings):
    if settings.previous_default:
        data["default-runtime"] = settings.previous_default
    else:
        data.pop("default-runtime", None)


def _set_default(data, settings):
    wanted = settings.default_after(data.get("default-runtime"))
    if wanted != data.get("default-runtime"):
        if wanted:
            data["default-runtime"] = wanted
        else:
            data.pop("default-runtime", None)


def configure(text, path, settings):
    """``text`` (``None`` for a missing file) with ``runtimes.<name>``, ``default-runtime`` and ``features.cdi``."""
    before = parse(text, path)
    data = json.loads(json.dumps(before))  # a deep copy that keeps the order
    runtimes = _object(data, "runtimes", path, create=True)
    existing = runtimes.get(settings.name)
    if isinstance(existing, dict):
        existing["path"] = settings.path  # the user's runtimeArgs (docker's field for arguments) and the rest stay
    else:
        runtimes[settings.name] = {"path": settings.path, "args": []}  # what nvidia-ctk writes for a new runtime
    _set_default(data, settings)
    if settings.cdi:
        _object(data, "features", path, create=True)["cdi"] = True
    return _render(text, before, data)


def found_of(text, path, settings):
    """What :func:`unconfigure` must give back of ``text`` (None: missing) as ``state=present`` first found it: the
    user's own ``runtimes.<name>`` (None when there was none) and, where the user had made it the default already,
    ``default_before`` (the engine's ``previous_default`` is the other default ours replaced); for a file that held no
    setting at all (missing, empty, blank or ``{}``), its text (None: there was no file); for any other, its text as
    ``text_before``, so that the way back gives the user's own bytes back, not a re-serialization of their settings."""
    data = parse(text, path)
    runtimes = data.get("runtimes")
    found = {"runtime_before": runtimes.get(settings.name) if isinstance(runtimes, dict) else None}
    if found["runtime_before"] is not None and data.get("default-runtime") == settings.name:
        found["default_before"] = settings.name
    if not data:
        found["file_before"] = text
    else:
        # the user's own bytes (their layout, spacing, key order): given back as they were by unconfigure
        found["text_before"] = text
    return found


def unconfigure(text, path, settings):
    """``text`` without what :func:`configure` added.

    ``runtimes.<name>`` goes back to the user's own entry where ``settings.found`` remembers one (``runtime_before``),
    else goes, and ``runtimes`` when that empties it; ``default-runtime``, when it names our runtime, stays where the
    user had made it so (``default_before``), else goes back to ``settings.previous_default`` (or goes, so that docker
    falls back to runc); ``features.cdi`` only when
    ``settings.cdi_added`` (ours turned it on) and it is ``true``, and ``features`` when that empties it. A file left
    holding nothing (``{}``) after that becomes what it was before ``state=present`` (``file_before``: its text, or
    ``None``, it goes); without that record it goes, as what :func:`configure` made of a missing one. A file left
    holding exactly what ``text_before`` holds is given back as that text, byte for byte (a file the user changed
    since is rendered in its own indentation instead).
    """
    before = parse(text, path)
    data = json.loads(json.dumps(before))
    runtimes = _object(data, "runtimes", path)
    users_own = settings.found.get("runtime_before")
    if runtimes is not None and settings.name in runtimes:
        if users_own is not None:
            runtimes[settings.name] = users_own
        else:
            del runtimes[settings.name]
            if not runtimes:
                del data["runtimes"]
    if data.get("default-runtime") == settings.name and settings.found.get("default_before") != settings.name:
        _restore_default(data, settings)
    if settings.cdi_added:
        features = _object(data, "features", path)
        if features is not None and features.get("cdi") is True:
            if settings.cdi_before is None:
                del features["cdi"]
                if not features:
                    del data["features"]
            else:
                features["cdi"] = settings.cdi_before
    if before and not data:
        # nothing but ours was in it: the file as it was (empty, {}), or it goes, as a containerd stub does
        return settings.found.get("file_before")
    text_before = settings.found.get("text_before")
    if text_before is not None and _same(_loads(text_before), data):
        # what is left is exactly what the user had: their own text, byte for byte, not a re-serialization of it
        return text_before
    return _render(text, before, data)


def _loads(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _same(one, other):
    """Equal as JSON, strictly (``true`` is not ``1``), key order included."""
    return json.dumps(one) == json.dumps(other)


# What the daemon is asked (container_runtime_facts): its report, which names its version too
INFO = ("docker info", ["docker", "info", "--format", "{{json .}}"])
# What restarting docker stops when its live-restore is off: dockerd stops every container when it shuts down unless
# "live-restore" is set (docs.docker.com, "Live restore"; moby daemon/daemon.go, Shutdown: containers are stopped
# only when live-restore is off). containerd and CRI-O keep containers through a restart (their shims, conmon).
LIVE_RESTORE_OFF = ("restarting docker on this node to load the NVIDIA runtime stops every container on it, pods "
                    "included (docker info: LiveRestoreEnabled false); the kubelet starts the pods again afterwards. "
                    "To keep containers running through docker restarts, set \"live-restore\": true in daemon.json "
                    "and restart docker once at a time of your choosing; the stage restarts runtimes in batches "
                    "(kubegpu_runtime_restart_serial, docs/getting-started.md)")


def docker_report(text):
    """``docker info --format '{{json .}}'`` as a report (:func:`.base.report`)."""
    try:
        info = json.loads(text or "")
    except ValueError as exc:
        return report(INFO[0], error="not JSON: %s" % exc)
    if not isinstance(info, dict):
        return report(INFO[0], error="not a JSON object")
    runtimes = dict((name, {"path": (spec or {}).get("path") if isinstance(spec, dict) else None, "type": None})
                    for name, spec in (info.get("Runtimes") or {}).items())
    live = info.get("LiveRestoreEnabled")
    return report(INFO[0], default_runtime=info.get("DefaultRuntime"), runtimes=runtimes,
                  live_restore=live if isinstance(live, bool) else None)


def server_version(answer):
    """The daemon's version from a ``docker info`` that answered (``ServerVersion``), else None."""
    if not answer or answer[0] != 0:
        return None
    try:
        version = json.loads(answer[1] or "").get("ServerVersion")
    except (ValueError, AttributeError):
        return None
    return version if isinstance(version, str) and version else None


class Docker(Runtime):
    """dockerd: daemon.json, edited in place (docker has no drop-in directory)."""

    name = "docker"
    binary = "dockerd"
    service = "docker"
    config_path = "/etc/docker/daemon.json"
    config_file_flag = "--config-file"  # dockerd's own daemon.json, where its unit names another

    def ask(self, host):
        """``docker info``, or None where the docker CLI is not installed: the daemon that answers says its version
        (``ServerVersion``), which spares starting dockerd (a large binary) only to print it."""
        cli = host.get_bin_path("docker")
        return host.run_command([cli] + INFO[1][1:]) if cli else None

    def version_answered(self, answer):
        server = server_version(answer)
        version = self.version(server) if server else None
        return (version, "docker info: ServerVersion %s" % server) if version else None

    def report(self, binary, params, host, read, answer):
        if answer is None:
            return report(INFO[0], error="the docker CLI is not installed, so the daemon could not be asked")
        rc, out, err = answer
        return docker_report(out) if rc == 0 else report(INFO[0], error=failed(INFO[0], rc, out, err))

    def restart_warnings(self, found, the_plan):
        live = (found.get("reports") or {}).get("live_restore")
        return [LIVE_RESTORE_OFF] if the_plan.get("changed") and live is False else []

    def check(self, params):
        if params.get("drop_in_path"):
            raise KubegpuError("drop_in_path: docker has no drop-in directory (daemon.json is edited in place); "
                               "drop_in_path is for containerd and crio only")

    def default_of(self, text, the_plan):
        return default_of(text, the_plan.main_path)

    def cdi_of(self, text, the_plan):
        features = parse(text, the_plan.main_path).get("features")
        return features.get("cdi") if isinstance(features, dict) else None

    def found_of(self, text, the_plan):
        return found_of(text, the_plan.main_path, the_plan.settings)

    def plan(self, the_plan, host):
        """``state=present`` edits daemon.json (the engine's marker then remembers what it found, see
        :func:`found_of`); ``state=absent`` takes out only what the marker says the module put in: without a marker
        of this runtime, the module never changed the file (it was configured as asked already, or by hand), and
        everything in it is the user's."""
        text = _files.read_text(the_plan.main_path)
        settings = the_plan.settings
        if the_plan.present:
            after = configure(text, the_plan.main_path, settings)
        elif settings.found or settings.previous_default or settings.cdi_added:
            after = unconfigure(text, the_plan.main_path, settings)
        else:
            parse(text, the_plan.main_path)  # a broken file is still reported
            after = text
        the_plan.changes.append(Change(the_plan.main_path, text, after))
