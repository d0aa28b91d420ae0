# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The nvidia_runtime_config module's work, the same for every runtime: check the options, let the runtime's adapter
(:mod:`.registry`) plan the edits, then validate and write them.

:func:`plan` reads the files and computes their new texts (nothing is written); :func:`apply` stages the candidates
beside the live files, has the adapter validate them, backs up and replaces them in the plan's order (for containerd
that never leaves config.toml importing a missing file); :func:`run` does both and builds the module's result. The
host (commands, binaries, warnings) is passed in, so tests can run all of it without AnsibleModule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import (
    FOUND_KEYS, MARKER_SUFFIX, Change, Host, Plan, RuntimeSettings, real, staging_dir, unread_place,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import TOMLKIT_IMPORT_ERROR


def _settings(params):
    return RuntimeSettings(name=params["runtime_name"], path=params["runtime_path"],
                           set_as_default=params["set_as_default"], cdi=params["cdi"])


def _check_params(params, adapter):
    """What is wrong with the options whatever the files hold; nothing is read yet."""
    runtime = adapter.name
    if adapter.toml and TOMLKIT_IMPORT_ERROR is not None:
        raise KubegpuError(missing_required_lib("tomlkit", url="https://pypi.org/project/tomlkit/")
                           + " (needed for %s's TOML config)" % runtime, exception=TOMLKIT_IMPORT_ERROR)
    adapter.check(params)
    for path in (params.get("config_path"), params.get("drop_in_path")):
        for other in (registry.get(n) for n in registry.NAMES if n != runtime):
            why = path and other.owns(real(path))
            if why:
                raise KubegpuError("%s %s, so an edit of it is lost; use runtime=%s, which sets what %s reads"
                                   % (path, why, other.name, other.name))
    drop_in = params.get("drop_in_path")
    if drop_in and real(drop_in) == real(params.get("config_path") or adapter.config_path):
        raise KubegpuError("drop_in_path must be another file than config_path: %r" % drop_in)
    if drop_in and not os.path.isabs(drop_in):
        raise KubegpuError("drop_in_path must be an absolute path (containerd imports it by that exact path): %r" % drop_in)
    requested = str(params.get("config_version") or "auto")
    if requested != "auto" and int(requested) not in adapter.config_versions:
        raise KubegpuError("config_version applies to containerd's configs (%s); %s takes %s" % (
            ", ".join(n for n in registry.NAMES if registry.get(n).config_versions), runtime,
            "only auto" if not adapter.config_versions else
            "auto or " + " or ".join(str(v) for v in adapter.config_versions)))
    name = params.get("runtime_name") or ""
    if not name.strip() or name != name.strip() or "\n" in name:
        raise KubegpuError("runtime_name must be a non-empty name without surrounding whitespace: %r" % name)
    if adapter.toml and params["state"] == "present" and not os.path.isabs(params["runtime_path"]):
        raise KubegpuError("runtime_path must be an absolute path for %s: %r" % (runtime, params["runtime_path"]))
    if params.get("validate"):
        _files.command_line(params["validate"], "candidate")  # a malformed command fails before anything is read


def plan(params, host):
    """Read the files and compute every change (the runtime's adapter decides which); writes nothing."""
    adapter = registry.get(params["runtime"])
    _check_params(params, adapter)
    drop_in = params.get("drop_in_path")
    the_plan = Plan(params, _settings(params), drop_in or params.get("config_path") or adapter.config_path,
                    main_path=real(params.get("config_path") or adapter.config_path),
                    drop_in_path=real(drop_in) if drop_in else None,
                    # as given, this is what goes into containerd's imports (the user's spelling, not a resolved link)
                    drop_in_entry=os.path.normpath(drop_in) if drop_in else None)
    the_plan.marker_path = _marker_path(the_plan, adapter) if not drop_in else None
    marker = _read_marker(the_plan) if not drop_in else None
    if marker is not None and marker.get("runtime") == the_plan.settings.name:
        the_plan.settings.previous_default = marker.get("previous_default")
        the_plan.settings.cdi_added = "cdi_before" in marker
        the_plan.settings.cdi_before = marker.get("cdi_before")
        the_plan.settings.found = dict((k, marker[k]) for k in FOUND_KEYS if k in marker)
    adapter.plan(the_plan, host)
    if not drop_in:
        _remember(the_plan, adapter, marker)
    _check_backups(the_plan, adapter)
    return the_plan


def _marker_path(the_plan, adapter):
    """Beside the main config, unless the daemon reads files there (a CRI-O config in crio.conf.d edited in place: the
    JSON would be read as TOML), then the nearest ancestor directory it does not read."""
    path = unread_place(the_plan.main_path, the_plan, adapter, MARKER_SUFFIX)
    if path is None:
        raise KubegpuError("%s: no place near it that %s does not read, for the marker that remembers what removal gives "
                           "back; use drop_in_path" % (the_plan.main_path, adapter.name))
    return path


def _check_backups(the_plan, adapter):
    """Refuse a backup_dir the daemon would read (a backup there would be loaded as configuration), before anything."""
    if not the_plan.params.get("backup"):
        return
    for change in the_plan.changes:
        if change.changed and change.before is not None and not change.marker:
            target = _files.backup_name(change.path, directory=_backup_dir(the_plan.params))
            why = adapter.reads(target, the_plan)
            if why:
                raise KubegpuError("backup_dir %s: a backup of %s would go to %s, which %s, so the old settings would be "
                                   "loaded again; choose a directory %s does not read (the default is %s)"
                                   % (_backup_dir(the_plan.params), change.path, target, why, adapter.name, _files.BACKUP_DIR))


def _backup_dir(params):
    return params.get("backup_dir") or _files.BACKUP_DIR


def _read_marker(the_plan):
    """Our marker beside the main config (the default runtime ours replaced), or None."""
    text = _files.read_text(the_plan.marker_path)
    if text is None:
        return None
    try:
        marker = json.loads(text)
    except ValueError:
        marker = None
    if not isinstance(marker, dict):
        raise KubegpuError("%s is not the marker this module writes (a JSON object with 'runtime', "
                           "'previous_default' and 'cdi_added'); remove it, then run again" % the_plan.marker_path)
    return marker


def _remember(the_plan, adapter, marker):
    """Keep, in our marker, what removal must give back and an in-place edit cannot tell afterwards: the default
    runtime the user had when ours took its place, that CDI was turned on by us, and what the adapter's
    :meth:`~.base.Runtime.found_of` says of the file as the first ``state=present`` of this runtime that changed it
    found it (docker: the user's own entry for the runtime, and the text of a file that held nothing). That first run
    is the one with no marker of this runtime: a later one sees the file as ours made it. A run that changes nothing
    records nothing (a file configured as asked already, by the user or by a version of this module that kept no such
    record: removal then takes the runtime out, as before). No marker is needed where the file named no default, CDI
    was already on (or not asked for) and the adapter remembers nothing. The marker is written before the config and
    removed after it; it goes when nothing is left to remember."""
    main = next((c for c in the_plan.changes if c.path == the_plan.main_path), None)
    if main is None:
        return
    name = the_plan.settings.name
    state = {}
    if the_plan.present:
        state = dict(marker or {}, runtime=name)
        before, after = adapter.default_of(main.before, the_plan), adapter.default_of(main.after, the_plan)
        if after == name and before not in (None, name):
            state["previous_default"] = before
        if after != name:
            state.pop("previous_default", None)
        cdi = adapter.cdi_of(main.before, the_plan)
        if adapter.cdi_of(main.after, the_plan) is True and cdi is not True:
            state["cdi_before"] = cdi
        if marker is None or marker.get("runtime") != name:
            for key in FOUND_KEYS:
                state.pop(key, None)  # another runtime's
            if main.changed:  # a run that changes nothing writes nothing, not even the marker (no change, no restart)
                state.update(adapter.found_of(main.before, the_plan) or {})
    path = the_plan.marker_path
    old = _files.read_text(path) if marker is not None else None
    kept = state.get("previous_default") or "cdi_before" in state or any(k in state for k in FOUND_KEYS)
    new = json.dumps(state, indent=2, sort_keys=True) + "\n" if kept else None
    if new == old:
        return
    if new is not None:
        the_plan.changes.insert(0, Change(path, old, new, marker=True))
    else:
        the_plan.changes.append(Change(path, old, None, marker=True))


# --- Writing -----------------------------------------------------------------------------------------------------

def apply(the_plan, host):
    """Stage, validate, back up and replace; returns ``{live path: backup path}``. Live files stay untouched on error."""
    adapter = registry.get(the_plan.params["runtime"])
    changes = [c for c in the_plan.changes if c.changed]
    made_dirs = []
    staged = []
    view = None
    backups = {}
    try:
        for change in changes:
            if change.after is not None:
                made_dirs.extend(_files.make_dirs(os.path.dirname(change.path)))
                # a new marker may hold the user's text (text_before): it is as readable as their file, no more
                staged.append(_files.Staged(change.path, change.after,
                                            directory=staging_dir(change.path, the_plan, adapter),
                                            like=the_plan.main_path if change.marker else None))
        view = adapter.validate(the_plan, staged, host)
        if the_plan.params.get("backup"):
            for change in changes:
                if change.before is not None and not change.marker:
                    backups[change.path] = _files.backup(change.path, directory=_backup_dir(the_plan.params))
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
        "restart_required": any(not c.marker for c in changes),
        "config_path": the_plan.written_path,
        "config_version": the_plan.version,
        "changed_files": [c.path for c in changes],
    }
    if params.get("backup"):
        result["backup_files"] = backups
        written = real(the_plan.written_path)
        if written in backups:
            result["backup_file"] = backups[written]
    if want_diff:
        # the configuration first, our marker after it (whatever the order they are written in)
        shown = [c for c in changes if not c.marker] + [c for c in changes if c.marker]
        result["diff"] = [_diff(c) for c in shown] or [_diff(next(c for c in the_plan.changes if not c.marker))]
    return result
