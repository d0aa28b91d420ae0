# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The one interface every container runtime adapter has, and what adapters and the engine pass between them.

An adapter (one file per runtime, listed in :mod:`.registry`) knows its runtime's files and daemon: where they are by
default, how to detect it, which options it refuses, how to plan the edits (:meth:`Runtime.plan`) and validate the
candidates (:meth:`Runtime.validate`), and what its daemon reports it runs with (:meth:`Runtime.report`, for
container_runtime_facts). The engine (:mod:`.engine`) does what is the same for all of them: read, stage, validate,
back up, replace atomically, report; :mod:`.facts` asks every adapter the same questions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files


class RuntimeSettings(object):
    """What the caller asked for: the runtime's name and binary, whether it becomes the default, CDI.

    What the engine's marker (:data:`MARKER_SUFFIX`) remembers of an earlier run: ``previous_default``, the default
    runtime the user had before ours took its place (when ours stops being the default, that one comes back; None
    removes the setting, so that the daemon's built-in default applies); ``cdi_added``, whether CDI was turned on by
    us (only then does removal give it back: a user's own ``enable_cdi = true`` stays), and ``cdi_before``, what the
    setting was then (``False``, or None for no setting); ``found``, what the adapter's :meth:`Runtime.found_of` said
    of the main config when ``state=present`` first edited it (keys of :data:`FOUND_KEYS`, each only when remembered).
    """

    def __init__(self, name, path, set_as_default=True, cdi=False, previous_default=None, cdi_added=False,
                 cdi_before=None, found=None):
        self.name = name
        self.path = path
        self.set_as_default = set_as_default
        self.cdi = cdi
        self.previous_default = previous_default
        self.cdi_added = cdi_added
        self.cdi_before = cdi_before
        self.found = found or {}

    def __repr__(self):
        return ("RuntimeSettings(name=%r, path=%r, set_as_default=%r, cdi=%r, previous_default=%r, cdi_added=%r)"
                % (self.name, self.path, self.set_as_default, self.cdi, self.previous_default, self.cdi_added))

    def default_after(self, current):
        """The default runtime a file should name when it names ``current`` now (None: no setting)."""
        if self.set_as_default:
            return self.name
        return self.previous_default if current == self.name else current


# A file beside the runtime's main config, ours, that remembers what removal must give back and an in-place edit
# cannot tell afterwards: the default runtime ours replaced, the CDI setting before we turned CDI on, and what the
# adapter's found_of() said of the file before ours (in-place edits only: a drop-in that goes takes its settings with
# it). JSON: {"runtime": <ours>, "previous_default": <name>, "cdi_before": <false or null>, "runtime_before": <the
# user's own entry for the runtime, or null>, "default_before": <ours, where the user had made it the default>,
# "file_before": <the text of a file that held no setting, or null for no file>, "text_before": <the text of a file
# that held settings, given back byte for byte when removal leaves exactly those>}; a key only when it applies
# ("cdi_before" present: CDI was turned on by us). It holds the user's text, so it gets the main config's owner,
# group and mode when it is made.
MARKER_SUFFIX = ".kubegpu.json"
# What found_of() may remember.
FOUND_KEYS = ("runtime_before", "default_before", "file_before", "text_before")


class Host(object):
    """What the work needs from the machine. The module passes one built on AnsibleModule (:meth:`from_module`)."""

    def __init__(self, run_command=_files.run_command, get_bin_path=None, warn=None):
        self.run_command = run_command
        self.get_bin_path = get_bin_path or which
        self.warnings = []
        self._warn = warn

    @classmethod
    def from_module(cls, module):
        return cls(run_command=module.run_command, get_bin_path=module.get_bin_path, warn=module.warn)

    def warn(self, message):
        self.warnings.append(message)
        if self._warn is not None:
            self._warn(message)


def report(source, default_runtime=None, runtimes=None, cdi=None, error=None, live_restore=None):
    """What a daemon reports it runs with (``reports`` of container_runtime_facts): where it was read (``source``),
    whether that worked (``error``), its default runtime, its runtimes (``{name: {path, type, ...}}``), CDI and docker's
    live-restore (None where the daemon does not say)."""
    return {"source": source, "ok": error is None, "error": error, "default_runtime": default_runtime,
            "runtimes": runtimes or {}, "cdi": cdi, "live_restore": live_restore}


def failed(command, rc, out, err):
    """A command that did not answer, in one line: what ran, its exit status and the first 500 characters it said."""
    text = " ".join(((err or "").strip() or (out or "").strip() or "no output").split())
    return "'%s' exited %s: %s" % (command, rc, text[:500])


def asked(source, command, host, parse):
    """Run ``command`` through ``host`` and ``parse`` its output into a report, or report its failure."""
    rc, out, err = host.run_command(command)
    return parse(out) if rc == 0 else report(source, error=failed(source, rc, out, err))


def which(name):
    for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]:
        candidate = os.path.join(directory, name)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def real(path):
    return os.path.realpath(os.path.abspath(path))


class Change(object):
    """One file's text before and after (``None``: missing before / deleted after). A ``marker`` change is our own
    bookkeeping (:data:`MARKER_SUFFIX`), which no daemon reads: it needs no restart and no validation."""

    def __init__(self, path, before, after, marker=False):
        self.path = path
        self.before = before
        self.after = after
        self.marker = marker

    @property
    def changed(self):
        return self.before != self.after


class Plan(object):
    """What an adapter decided: the changes in commit order, and what its validation needs.

    ``main_path`` is the main config (links resolved), ``drop_in_path`` the drop-in (links resolved) and
    ``drop_in_entry`` the drop-in as the user spelled it; ``version`` a config version (containerd).
    """

    def __init__(self, params, settings, written_path, main_path, drop_in_path=None, drop_in_entry=None):
        self.params = params
        self.settings = settings
        self.written_path = written_path
        self.main_path = main_path
        self.drop_in_path = drop_in_path
        self.drop_in_entry = drop_in_entry
        self.version = None
        self.marker_path = None  # where the engine's marker is (in-place edits only)
        self.changes = []

    @property
    def present(self):
        return self.params["state"] == "present"


class Runtime(object):
    """A container runtime adapter. Subclasses set the class attributes and implement :meth:`plan`."""

    name = None  # the module's ``runtime`` value
    binary = None  # the daemon's executable, which tells its version when run with ``version_args``
    version_args = ("--version",)
    service = None  # the systemd unit the role restarts
    services = None  # the units it may be, in the order the role looks for them (None: just ``service``)
    config_path = None  # the main configuration file
    drop_in_path = None  # where NVIDIA's tools put their drop-in (None: the runtime has no drop-in directory)
    toml = False  # whether the configuration is TOML (tomlkit needed)
    config_versions = ()  # the containerd config versions the module's config_version may name (none: only auto)
    config_file_flag = None  # the daemon's flag that names its main config on its command line (docker: --config-file)

    # --- What the daemon says (container_runtime_facts): asked through a base.Host, nothing written

    def ask(self, host):
        """What the daemon is asked first, when the facts include its report: an answer (``(rc, out, err)``) that
        :meth:`version_answered` and :meth:`report` read, so that it is asked once (docker: ``docker info``). None (the
        default): nothing asked before the version."""
        return None

    def version_answered(self, answer):
        """``(version, the text it comes from)`` from :meth:`ask`'s answer, which spares running the binary to ask
        for it; None (the default): the binary is asked (``version_args``)."""
        return None

    def report(self, binary, params, host, read, answer):
        """What the daemon reports it runs with, as :func:`report` (its own errors in ``error``), or None where it
        cannot be asked (the default). ``binary``: its executable as found; ``params``: container_runtime_facts'
        options; ``read(path)``: a file's text or None; ``answer``: what :meth:`ask` got."""
        return None

    def restart_warnings(self, found, the_plan):
        """What restarting the daemon stops, when its plan (container_runtime_facts' ``plans`` entry) changes a file:
        sentences to warn with. ``found``: what the facts say of it (its ``reports`` among them)."""
        return []

    def version(self, version_output):
        """The ``X.Y[.Z]`` version from the daemon's ``--version`` output, or None."""
        match = re.search(r"v?([0-9]+\.[0-9]+(\.[0-9]+)?)", version_output or "")
        return match.group(1) if match else None

    def owns(self, path):
        """Why ``path`` (links resolved) is a file this runtime writes itself, which an edit by another adapter would
        not survive (a sentence), or None."""
        return None

    def reads(self, path, the_plan):
        """Why this runtime's daemon reads ``path`` (absolute, links resolved) as configuration, by its own include rules
        (a sentence), or None. The engine asks before it puts a file of its own anywhere (a backup, the marker, a
        staged candidate): none may be read, or the daemon would load an old copy of its settings on top of the new
        ones (issue 26: a backup beside a CRI-O drop-in was one). By default the daemon reads its main config and the
        drop-in, nothing else (docker: only the ``--config-file``, daemon.json)."""
        if path in (the_plan.main_path, the_plan.drop_in_path):
            return "is its configuration"
        return None

    def check(self, params):
        """Refuse options this runtime cannot take (raise ``FileError``/``OptionError``); nothing is read yet."""

    def default_of(self, text, the_plan):
        """The default runtime a text of the main config names, or None."""
        raise NotImplementedError

    def cdi_of(self, text, the_plan):
        """Whether a text of the main config turns CDI on (True), off (False), or says nothing (None)."""
        return None

    def found_of(self, text, the_plan):
        """What removal must give back of the main config ``text`` (None: missing) as ``state=present`` first finds
        it, beyond the default runtime and CDI: a dict of :data:`FOUND_KEYS` for the engine's marker, or None when the
        adapter's removal needs nothing more."""
        return None

    def plan(self, the_plan, host):
        """Read the files and add the changes to ``the_plan`` (a :class:`Plan`); writes nothing."""
        raise NotImplementedError

    def validate(self, the_plan, staged, host):
        """Validate the staged candidates (``_files.Staged``) before they go live; raise ``ValidationError``.

        By default the user's ``validate`` command, if any, runs on the first candidate. Returns a staged file to
        discard afterwards, or None.
        """
        command = the_plan.params.get("validate")
        candidate = candidate_of(the_plan, staged)
        if command and candidate is not None:
            _files.validate(_files.command_line(command, candidate.tmp_path), host.run_command, shown=command,
                            path=candidate.path)
        return None


def unread_place(path, the_plan, adapter, suffix=""):
    """Where a file of ours about ``path`` goes so that ``adapter``'s daemon does not read it: ``path + suffix`` when the
    daemon would not read that, else the first ancestor directory where it would not read
    ``<ancestor>/<path below it, with / as _><suffix>`` (CRI-O: ``/etc/crio/crio.conf.d_10-crio.conf.kubegpu.json``
    for a marker of ``/etc/crio/crio.conf.d/10-crio.conf``). None when there is no such place."""
    beside = path + suffix
    if not adapter.reads(beside, the_plan):
        return beside
    directory = os.path.dirname(path)
    while os.path.dirname(directory) != directory:
        parent = os.path.dirname(directory)
        candidate = os.path.join(parent, os.path.relpath(path, parent).replace("/", "_") + suffix)
        if not adapter.reads(candidate, the_plan):
            return candidate
        directory = parent
    return None


def staging_dir(path, the_plan, adapter):
    """The directory a candidate for ``path`` is staged in: beside it, unless the daemon reads every file there (CRI-O's
    crio.conf.d), then the nearest ancestor where it does not, on the same filesystem (the replace is a rename).
    None: beside it (no such ancestor)."""
    directory = os.path.dirname(path)
    probe = ".%s.staged" % os.path.basename(path)
    if not adapter.reads(os.path.join(directory, probe), the_plan):
        return None
    try:
        device = os.stat(directory).st_dev
    except OSError:
        return None
    while os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
        try:
            if os.stat(directory).st_dev != device:
                return None
        except OSError:
            return None
        if not adapter.reads(os.path.join(directory, probe), the_plan):
            return directory
    return None


def candidate_of(the_plan, staged):
    """The staged candidate of the file the runtime reads first: the drop-in when there is one, else the main config
    (None when that file is not being written)."""
    wanted = the_plan.drop_in_path or the_plan.main_path
    return next((s for s in staged if s.path == wanted), None)
