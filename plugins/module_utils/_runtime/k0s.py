# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""k0s: its containerd reads ``/etc/k0s/containerd.toml``, which k0s writes itself while the file's first line is
``# k0s_managed=true`` (k0sproject/k0s pkg/component/worker/containerd/component.go, isK0sManagedConfig). The CRI
plugin's settings are not in that file: at every start k0s builds them from containerd's defaults and patches them,
as RFC 7396 merge patches, with each file of ``/etc/k0s/containerd.d/*.toml`` that has a CRI plugin table, in the
order of the file names; files without one are imported as they are (configurer.go, handleImports). The result is
``/run/k0s/containerd-cri.toml``.

So this adapter writes one file of ``containerd.d`` that is a patch: our runtime's table, and the default runtime and
CDI when asked, nothing else (a merge patch keeps everything it does not name, unlike a containerd import, which
replaces the plugin's table). Removing the file gives back exactly what the other files and k0s's defaults say. It
never edits ``containerd.toml`` or the generated CRI file. A ``containerd.toml`` the user took over (first line
changed) makes k0s ignore ``containerd.d``: that is refused with what to do instead.

The config version is the one k0s's CRI file has, else what its bundled containerd reads: k0s releases on containerd
2.x accept only version 3 in ``containerd.d`` (assertV3Config), on 1.x version 2.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime, real
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.common import toml_data
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import (
    CRI_PLUGIN, _new_runtime, _table, _template_runtime, binary_version, check_version, generated_report, go_match,
)
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.toml import PlainTree, render_tree

HEADER = "# Written by kubegpu.cluster (nvidia_runtime_config): k0s merges this into its containerd's CRI settings.\n"
MANAGED_LINE = "# k0s_managed=true"
MAIN = "/etc/k0s/containerd.toml"
GENERATED = "/run/k0s/containerd-cri.toml"
CONTAINERD = "/var/lib/k0s/bin/containerd"
DROP_IN_DIR = "/etc/k0s/containerd.d"


def is_managed(text):
    """Whether k0s writes ``containerd.toml`` itself (and so reads ``containerd.d``): no file, or its first line."""
    if text is None:
        return True
    return text.lstrip(u"\ufeff").splitlines()[:1] == [MANAGED_LINE]


def version_for(containerd):
    """The config version k0s takes in ``containerd.d`` for its containerd's ``(major, minor)``."""
    return 2 if containerd[0] < 2 else 3


def patch(generated_text, generated_path, settings, version, path):
    """The text of our file: a merge patch with our runtime (its template is the default runtime, runc or crun of the
    CRI settings k0s generated last), the default runtime and CDI when asked."""
    plugin = ("plugins", CRI_PLUGIN[version])
    merged = PlainTree(toml_data(generated_text, generated_path) or {}, generated_path)
    containerd = _table(merged, plugin + ("containerd",), generated_path)
    runtimes = _table(merged, plugin + ("containerd", "runtimes"), generated_path)
    _name, template = _template_runtime(containerd, runtimes, settings.name, settings.previous_default)
    tree = PlainTree({"version": version}, path)
    tree.set(plugin + ("containerd", "runtimes", settings.name), _new_runtime(template, settings))
    if settings.set_as_default:
        tree.set(plugin + ("containerd", "default_runtime_name"), settings.name)
    # the same rule as containerd's in-place edit: version 2 needs the switch, version 3 only where it was turned off
    if settings.cdi and (version == 2 or merged.get(plugin + ("enable_cdi",)) is not None):
        tree.set(plugin + ("enable_cdi",), True)
    return HEADER + render_tree(tree.data, path)


class K0s(Runtime):
    """k0s: a merge patch in /etc/k0s/containerd.d; the k0sworker (or k0scontroller) service restarts it."""

    name = "k0s"
    binary = "k0s"
    version_args = ("version",)
    service = "k0sworker"
    services = ("k0sworker", "k0scontroller")
    config_path = DROP_IN_DIR + "/nvidia.toml"
    config_versions = (2, 3)
    toml = True
    generated = GENERATED  # what k0s writes at every start (the role reads it to verify)

    def report(self, binary, params, host, read, answer):
        """The containerd config it generated at its last start."""
        return generated_report(self.generated, read)

    def owns(self, path):
        if path == real(GENERATED):
            return "is generated by k0s at every start from its defaults and the files of %s" % DROP_IN_DIR
        if path == real(MAIN) and is_managed(_files.read_text(MAIN)):
            return "is written by k0s at every start (its first line is %r)" % MANAGED_LINE
        return None

    def reads(self, path, the_plan):
        """``containerd.toml`` and the ``*.toml`` files of the directory ours is in (``containerd.d``: k0s's
        configurer.go, handleImports, filepath.Glob of ``containerd.d/*.toml``; a file with a CRI table is merged, any
        other imported by containerd as it is)."""
        if path == real(MAIN) or go_match(os.path.join(os.path.dirname(the_plan.main_path), "*.toml"), path):
            return "is read by k0s's containerd (%s and the *.toml files of %s)" % (MAIN, os.path.dirname(the_plan.main_path))
        return super(K0s, self).reads(path, the_plan)

    def check(self, params):
        if params.get("drop_in_path") is not None:
            raise KubegpuError("k0s: drop_in_path means nothing here; config_path is the file of %s this module "
                               "writes (k0s merges it into its CRI settings)" % DROP_IN_DIR)
        path = params.get("config_path") or self.config_path
        if real(path) in (real(MAIN), real(GENERATED)):
            raise KubegpuError("%s is written by k0s itself; leave config_path at its default (a file of %s), which k0s "
                               "merges into its CRI settings" % (path, DROP_IN_DIR))
        if not path.endswith(".toml"):
            raise KubegpuError("config_path %s: k0s reads only the *.toml files of %s" % (path, DROP_IN_DIR))

    def default_of(self, text, the_plan):
        return self._cri(text, the_plan).get(("containerd", "default_runtime_name"))

    def _cri(self, text, the_plan):
        data = toml_data(text, the_plan.main_path) or {}
        version = data.get("version", the_plan.version or 3)
        return PlainTree((data.get("plugins") or {}).get(CRI_PLUGIN.get(version, CRI_PLUGIN[3])) or {}, the_plan.main_path)

    def _version(self, params, ours, generated, host):
        """Our file's version, else the generated CRI file's, else what k0s's containerd reads; None: unknown."""
        requested = str(params.get("config_version") or "auto")
        found = None
        for text, path in ((ours, params["config_path"] or self.config_path), (generated, GENERATED)):
            data = toml_data(text, path)
            if data and "version" in data:
                found = check_version(data["version"], path)
                break
        if found is None and os.path.exists(CONTAINERD):
            rc, out, _err = host.run_command([CONTAINERD, "--version"])
            binary = binary_version(out) if rc == 0 else None
            found = version_for(binary) if binary else None
        if requested != "auto":
            wanted = check_version(int(requested), params["config_path"] or self.config_path, field="config_version")
            if found is not None and found != wanted:
                raise FileError("k0s's containerd takes config version %d here, not config_version=%d; leave "
                                "config_version=auto" % (found, wanted), path=GENERATED, field="version")
            return wanted
        return found

    def plan(self, the_plan, host):
        path = the_plan.main_path
        text = _files.read_text(path)
        if not the_plan.present:
            the_plan.changes.append(Change(path, text, None))
            return
        main_text = _files.read_text(MAIN)
        if not is_managed(main_text):
            raise FileError("is not managed by k0s (its first line is not %r), so k0s does not read %s; configure that "
                            "file itself (runtime=containerd config_path=%s; k0s restarts with the k0sworker service), "
                            "or give it back to k0s (remove it and restart k0s)" % (MANAGED_LINE, DROP_IN_DIR, MAIN),
                            path=MAIN)
        generated = _files.read_text(GENERATED)
        version = self._version(the_plan.params, text, generated, host)
        if version is None:
            raise KubegpuError("k0s: cannot tell which containerd config version k0s's containerd takes: neither %s nor "
                               "%s is there (k0s has not run on this host yet); start k0s first, or pass "
                               "config_version (3 for k0s on containerd 2.x, 2 on 1.x)" % (GENERATED, CONTAINERD))
        if version not in self.config_versions:
            raise FileError("config version %d: k0s takes 2 (containerd 1.x) or 3 (containerd 2.x) in %s"
                            % (version, DROP_IN_DIR), path=path, field="version")
        the_plan.version = version
        after = patch(generated, GENERATED, the_plan.settings, version, path)
        if text is not None and toml_data(text, path) == toml_data(after, path):
            after = text  # the same settings: no rewrite, no restart
        the_plan.changes.append(Change(path, text, after))
