# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The nvidia_runtime_config module's work: decide which files change and how, then validate and write them.

:func:`plan` reads the files and computes their new texts (nothing is written); :func:`apply` stages the candidates
beside the live files, validates, backs up and replaces them in an order that never leaves containerd importing a
missing file; :func:`run` does both and builds the module's result. The host (commands, binaries, warnings) is passed
in, so tests can run all of it without AnsibleModule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import traceback

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils import _runtime_containerd as containerd
from ansible_collections.kubegpu.cluster.plugins.module_utils import _runtime_crio as crio
from ansible_collections.kubegpu.cluster.plugins.module_utils import _runtime_docker as docker
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime_common import (
    TOMLKIT_IMPORT_ERROR, ConfigError, RuntimeSettings,
)

DEFAULT_CONFIG = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf",
}
CONTAINERD_VALIDATE = "containerd --config %s config dump"


class Host(object):
    """What the work needs from the machine. The module passes one built on AnsibleModule (:meth:`from_module`)."""

    def __init__(self, run_command=_files.run_command, get_bin_path=None, warn=None):
        self.run_command = run_command
        self.get_bin_path = get_bin_path or _which
        self.warnings = []
        self._warn = warn

    @classmethod
    def from_module(cls, module):
        return cls(run_command=module.run_command, get_bin_path=module.get_bin_path, warn=module.warn)

    def warn(self, message):
        self.warnings.append(message)
        if self._warn is not None:
            self._warn(message)


def _which(name):
    for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class Change(object):
    """One file's text before and after (``None``: missing before / deleted after)."""

    def __init__(self, path, before, after):
        self.path = path
        self.before = before
        self.after = after

    @property
    def changed(self):
        return self.before != self.after


class Plan(object):
    """What :func:`plan` decided: the changes in commit order, and how to validate them."""

    def __init__(self, params, settings, written_path, version=None):
        self.params = params
        self.settings = settings
        self.written_path = written_path
        self.version = version
        self.changes = []
        self.main_path = None  # containerd: the main config, whose merged view is validated
        self.drop_in_path = None  # containerd: the drop-in (symlinks resolved) ...
        self.drop_in_entry = None  # ... and the path as it goes into imports


def _settings(params):
    return RuntimeSettings(name=params["runtime_name"], path=params["runtime_path"],
                           set_as_default=params["set_as_default"], cdi=params["cdi"])


def _check_params(params):
    runtime = params["runtime"]
    if runtime in ("containerd", "crio") and TOMLKIT_IMPORT_ERROR is not None:
        raise ConfigError(missing_required_lib("tomlkit", url="https://pypi.org/project/tomlkit/")
                          + " (needed for %s's TOML config)" % runtime, details={"exception": TOMLKIT_IMPORT_ERROR})
    if runtime == "docker" and params.get("drop_in_path"):
        raise ConfigError("drop_in_path: docker has no drop-in directory (daemon.json is edited in place); "
                          "drop_in_path is for containerd and crio only")
    if params.get("drop_in_path") and _real(params["drop_in_path"]) == _real(params.get("config_path") or DEFAULT_CONFIG[runtime]):
        raise ConfigError("drop_in_path must be another file than config_path: %r" % params["drop_in_path"])
    if params.get("drop_in_path") and not os.path.isabs(params["drop_in_path"]):
        raise ConfigError("drop_in_path must be an absolute path (containerd imports it by that exact path): %r"
                          % params["drop_in_path"])
    if runtime != "containerd" and str(params.get("config_version") or "auto") != "auto":
        raise ConfigError("config_version applies to containerd only; leave it at auto for %s" % runtime)
    name = params.get("runtime_name") or ""
    if not name.strip() or name != name.strip() or "\n" in name:
        raise ConfigError("runtime_name must be a non-empty name without surrounding whitespace: %r" % name)
    if runtime in ("containerd", "crio") and params["state"] == "present" and not os.path.isabs(params["runtime_path"]):
        raise ConfigError("runtime_path must be an absolute path for %s: %r" % (runtime, params["runtime_path"]))
    if params.get("validate"):
        _files.command_line(params["validate"], "candidate")  # a malformed command fails before anything is read


def _real(path):
    return os.path.realpath(os.path.abspath(path))


def plan(params, host):
    """Read the files and compute every change; writes nothing."""
    _check_params(params)
    runtime = params["runtime"]
    settings = _settings(params)
    present = params["state"] == "present"
    main_path = _real(params.get("config_path") or DEFAULT_CONFIG[runtime])
    drop_path = _real(params["drop_in_path"]) if params.get("drop_in_path") else None
    # drop_in_path as given is what goes into containerd's imports (the user's spelling, not a resolved link)
    drop_entry = os.path.normpath(params["drop_in_path"]) if drop_path else None
    main_text = _files.read_text(main_path)
    result = Plan(params, settings, params.get("drop_in_path") or params.get("config_path") or DEFAULT_CONFIG[runtime])

    if runtime == "docker":
        after = docker.configure(main_text, main_path, settings) if present else docker.unconfigure(main_text, main_path, settings)
        result.changes.append(Change(main_path, main_text, after))
        return result

    if runtime == "crio":
        if settings.cdi:
            host.warn("cdi is ignored for crio: CRI-O has no CDI switch (it reads CDI specs from /etc/cdi and /var/run/cdi)")
        path = drop_path or main_path
        text = _files.read_text(drop_path) if drop_path else main_text
        after = crio.configure(text, path, settings) if present else crio.unconfigure(text, path, settings)
        if drop_path and not present and text is not None and crio.is_empty(after, path):
            after = None  # nothing of anybody's left in our drop-in
        result.changes.append(Change(path, text, after))
        return result

    def ask_binary():
        binary = host.get_bin_path("containerd")
        return _containerd_major(host, binary) if binary else None

    result.version = containerd.resolve_version(str(params.get("config_version") or "auto"), main_text, main_path, ask_binary)
    result.main_path = main_path
    if not drop_path:
        after = (containerd.configure(main_text, main_path, settings, result.version) if present
                 else containerd.unconfigure(main_text, main_path, settings, result.version))
        result.changes.append(Change(main_path, main_text, after))
        return result

    result.drop_in_path = drop_path
    drop_text = _files.read_text(drop_path)
    if present:
        # the drop-in first: the main config must never import a file that is not there yet
        result.changes.append(Change(drop_path, drop_text, containerd.drop_in(main_text, main_path, settings, result.version)))
        result.changes.append(Change(main_path, main_text, containerd.add_import(main_text, main_path, drop_entry, result.version)))
    else:
        if main_text is not None:
            result.changes.append(Change(main_path, main_text, containerd.remove_import(main_text, main_path, drop_entry)))
        result.changes.append(Change(drop_path, drop_text, None))
    result.drop_in_entry = drop_entry
    return result


# --- Validation --------------------------------------------------------------------------------------------------

def _containerd_major(host, binary):
    rc, out, _err = host.run_command([binary, "--version"])
    return containerd.binary_major(out) if rc == 0 else None


def _validation_command(the_plan, host):
    """(command string, containerd major or None when the command is the user's); ``(None, None)``: no validation."""
    params = the_plan.params
    command = params.get("validate")
    if command is not None:
        return (command or None), None
    if params["runtime"] != "containerd":
        return None, None
    binary = host.get_bin_path("containerd")
    if binary is None:
        return None, None
    major = _containerd_major(host, binary)
    if major is not None and major < 2 and the_plan.version >= 3:
        host.warn("not validated: the installed containerd (%d.x) cannot read config version %d; "
                  "pass validate to check with a containerd 2.x binary" % (major, the_plan.version))
        return None, None
    return CONTAINERD_VALIDATE.replace("containerd", binary, 1), major


def _validate(the_plan, staged, host):
    """Validate what containerd (or the daemon) will load once the staged candidates are in place.

    Returns the validation copy it staged (containerd drop-in), for the caller to discard, or ``None``.
    """
    command, major = _validation_command(the_plan, host)
    if command is None:
        return None
    params = the_plan.params
    view = None
    if params["runtime"] == "containerd" and the_plan.drop_in_path:
        view = _containerd_view(the_plan, dict((s.path, s) for s in staged))
        if view is None:
            return None
        target, live_path = view.tmp_path, the_plan.main_path
    elif staged:
        target, live_path = staged[0].tmp_path, staged[0].path
    else:
        return None  # only a deletion: there is no candidate file
    try:
        out = _files.validate(_files.command_line(command, target), host.run_command,
                              shown=params.get("validate") or CONTAINERD_VALIDATE, path=live_path)
        if major is not None:
            _check_dump(the_plan, host, command, major, out)
    except BaseException:
        if view is not None:
            view.discard()
        raise
    return view


def _check_dump(the_plan, host, command, major, out):
    """What containerd's own dump of the candidate says: our runtime must be there; other CRI settings should not move."""
    after = containerd.dumped_cri(out, major)
    if the_plan.params["state"] == "present":
        problems, notes = containerd.dumped_runtime_problems(after, the_plan.settings)
        for note in notes:
            host.warn(note)
        if problems:
            raise _files.ValidationError(
                "validation failed: 'containerd config dump' shows %s (does a file imported after ours replace the CRI "
                "plugin table?); the live files were left as they were" % "; ".join(problems),
                path=the_plan.main_path, details={"stdout": out})
    if the_plan.drop_in_path and os.path.exists(the_plan.main_path):
        rc, before, _err = host.run_command(_files.command_line(command, the_plan.main_path))
        if rc == 0:
            changed = containerd.changed_cri_settings(containerd.dumped_cri(before, major), after, the_plan.settings)
            if changed:
                host.warn("the drop-in changes CRI settings that containerd loads today from another imported file: %s; "
                          "the drop-in carries the CRI table of %s only" % (", ".join(changed[:10]), the_plan.main_path))


def _containerd_view(the_plan, by_path):
    """A validation copy of the main config, beside it, importing the candidate drop-in instead of the live one."""
    main = the_plan.main_path
    main_change = next((c for c in the_plan.changes if c.path == main), None)
    main_text = main_change.after if main_change is not None else _files.read_text(main)
    if main_text is None:
        return None
    drop_staged = by_path.get(the_plan.drop_in_path)
    candidate = drop_staged.tmp_path if drop_staged is not None else None
    exclude = set(s.tmp_path for s in by_path.values())
    imports = containerd.validation_imports(containerd.main_imports(main_text, main), main, the_plan.drop_in_entry,
                                            candidate, exclude=exclude)
    return _files.Staged(main, containerd.with_imports(main_text, main, imports), suffix=".validate")


# --- Writing -----------------------------------------------------------------------------------------------------

def apply(the_plan, host):
    """Stage, validate, back up and replace; returns ``{live path: backup path}``. Live files stay untouched on error."""
    changes = [c for c in the_plan.changes if c.changed]
    made_dirs = []
    staged = []
    view = None
    backups = {}
    try:
        for change in changes:
            if change.after is not None:
                made_dirs.extend(_files.make_dirs(os.path.dirname(change.path)))
                staged.append(_files.Staged(change.path, change.after))
        view = _validate(the_plan, staged, host)
        if the_plan.params.get("backup"):
            for change in changes:
                if change.before is not None:
                    backups[change.path] = _files.backup(change.path)
    except BaseException:
        for item in staged:
            item.discard()
        _files.remove_dirs(made_dirs)
        raise
    finally:
        if view is not None:
            view.discard()
    by_path = dict((s.path, s) for s in staged)
    for change in changes:
        if change.after is None:
            _files.remove(change.path)
        else:
            by_path[change.path].commit()
    return backups


def _diff(change):
    return {
        "before": change.before or "",
        "after": change.after or "",
        "before_header": change.path if change.before is not None else "%s (absent)" % change.path,
        "after_header": change.path if change.after is not None else "%s (deleted)" % change.path,
    }


def run(params, check_mode=False, want_diff=False, host=None):
    """The module's result for ``params`` (its argument spec's keys)."""
    host = host or Host()
    the_plan = plan(params, host)
    changes = [c for c in the_plan.changes if c.changed]
    backups = apply(the_plan, host) if changes and not check_mode else {}
    result = {
        "changed": bool(changes),
        "restart_required": bool(changes),
        "config_path": the_plan.written_path,
        "config_version": the_plan.version,
        "changed_files": [c.path for c in changes],
    }
    if params.get("backup"):
        result["backup_files"] = backups
        written = _real(the_plan.written_path)
        if written in backups:
            result["backup_file"] = backups[written]
    if want_diff:
        result["diff"] = [_diff(c) for c in the_plan.changes if c.changed] or [_diff(the_plan.changes[0])]
    return result


def failure(exc):
    """``fail_json`` arguments for an exception from :func:`run`: the message, plus a traceback when unexpected."""
    if isinstance(exc, (ConfigError, _files.FileError)):
        return dict(msg=str(exc), **getattr(exc, "details", {}))
    return dict(msg="unexpected error: %s: %s" % (type(exc).__name__, exc), exception=traceback.format_exc())
