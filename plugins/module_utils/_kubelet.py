# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""What a node's kubelet runs with, read on the node: its root directory (where a DRA or device plugin must register:
``<root>/plugins_registry``, ``<root>/plugins``) and its container runtime endpoint.

The root directory is a command-line flag only (kubernetes cmd/kubelet/app/options/options.go ``--root-dir``; the
KubeletConfiguration has no such field), so it is read from the running kubelet's command line (``/proc/<pid>/cmdline``);
microk8s runs the kubelet inside ``kubelite``, whose flags are in the file ``--kubelet-args-file`` names. Without a
running kubelet, the distribution's default: k0s ``/var/lib/k0s/kubelet``, microk8s
``/var/snap/microk8s/common/var/lib/kubelet``, else ``/var/lib/kubelet``. The runtime endpoint is the flag
``--container-runtime-endpoint``, or ``containerRuntimeEndpoint`` in the ``--config`` file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import posixpath
import re
import shlex

DEFAULT_ROOT_DIR = "/var/lib/kubelet"
# microk8s' args files name the snap's directories by the variables its wrapper expands (the snap's environment)
SNAP_VARIABLES = {"SNAP_COMMON": "/var/snap/microk8s/common", "SNAP_DATA": "/var/snap/microk8s/current"}
K0S_ROOT_DIR = "/var/lib/k0s/kubelet"
MICROK8S_ROOT_DIR = "/var/snap/microk8s/common/var/lib/kubelet"
# where a distribution's presence shows without a running kubelet: (path that exists, root dir, source)
DISTRIBUTION_HINTS = (("/var/lib/k0s", K0S_ROOT_DIR, "k0s default"),
                      ("/var/snap/microk8s", MICROK8S_ROOT_DIR, "microk8s default"))
KUBELET_BINARIES = ("kubelet", "kubelite")
# Under the root dir: where plugins register, where they keep their sockets and data (k8s.io/dynamic-resource-allocation
# kubeletplugin: /var/lib/kubelet/plugins_registry and /var/lib/kubelet/plugins/<driver name> by default).
PLUGINS_REGISTRY = "plugins_registry"
PLUGINS = "plugins"
_ENDPOINT_LINE = re.compile(r"^\s*containerRuntimeEndpoint:\s*[\"']?([^\"'\s#]+)", re.M)


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def flag(words, name):
    """The value of ``--name=value`` or ``--name value`` (the last one given, as the kubelet's flag parsing keeps),
    or None."""
    value = None
    for i, word in enumerate(words):
        if word.startswith("--%s=" % name):
            value = word.split("=", 1)[1]
        elif word == "--" + name and i + 1 < len(words):
            value = words[i + 1]
    return value


def kubelet_processes(proc="/proc", read=_read):
    """``[(pid, argv)]`` of the processes whose program is the kubelet (or microk8s' kubelite)."""
    found = []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return found
    for pid in sorted(pids, key=int):
        raw = read(posixpath.join(proc, pid, "cmdline"))
        if not raw:
            continue
        argv = [w for w in raw.split("\0") if w]
        if argv and posixpath.basename(argv[0]) in KUBELET_BINARIES:
            found.append((int(pid), argv))
    return found


def kubelet_flags(argv, read=_read):
    """The kubelet's flags from its command line; for kubelite, those of its ``--kubelet-args-file``."""
    words = list(argv[1:])
    args_file = flag(words, "kubelet-args-file")
    if args_file:
        text = read(args_file) or ""
        for name, value in SNAP_VARIABLES.items():
            text = text.replace("${%s}" % name, value).replace("$%s" % name, value)
        words = shlex.split(text, comments=True) + words
    return words


def find(root_dir=None, proc="/proc", read=_read, exists=os.path.exists):
    """``{"root_dir", "source", "runtime_endpoint", "pid", "registrar_dir", "plugins_dir"}``: ``root_dir`` as given,
    else the running kubelet's, else the distribution's default."""
    pid = endpoint = None
    source = "given"
    processes = kubelet_processes(proc, read)
    if processes:
        pid, argv = processes[0]
        words = kubelet_flags(argv, read)
        found = flag(words, "root-dir")
        endpoint = flag(words, "container-runtime-endpoint")
        config = flag(words, "config")
        if not endpoint and config:
            match = _ENDPOINT_LINE.search(read(config) or "")
            endpoint = match.group(1) if match else None
        if not root_dir:
            root_dir, source = ((found, "kubelet command line (pid %d)" % pid) if found
                                else (DEFAULT_ROOT_DIR, "kubelet default (pid %d has no --root-dir)" % pid))
    if not root_dir:
        root_dir, source = _default(exists)
        source += " (no kubelet running)"
    root_dir = root_dir.rstrip("/") or "/"
    registrar, plugins = dirs(root_dir)
    return {"root_dir": root_dir, "source": source, "runtime_endpoint": endpoint, "pid": pid,
            "registrar_dir": registrar, "plugins_dir": plugins}


def dirs(root_dir=None):
    """``(registrar dir, plugins dir)`` under the kubelet's root dir."""
    root = (root_dir or DEFAULT_ROOT_DIR).rstrip("/") or "/"
    return posixpath.join(root, PLUGINS_REGISTRY), posixpath.join(root, PLUGINS)


def _default(exists):
    for path, root, source in DISTRIBUTION_HINTS:
        if exists(path):
            return root, source
    return DEFAULT_ROOT_DIR, "default"
