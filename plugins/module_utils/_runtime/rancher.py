# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""k3s and RKE2: their embedded containerd's config.toml is generated again at every start of the service, from the
distribution's template (k3s-io/k3s pkg/agent/containerd/config_linux.go, setupContainerdConfig), so an edit of it
is lost at the next restart. What survives is what the distribution itself reads:

- it registers the NVIDIA runtime itself when it finds ``nvidia-container-runtime`` on its PATH or in the GPU
  operator's directory (pkg/agent/containerd/nvidia.go, findNvidiaContainerRuntimes: runtime ``nvidia``, runc shim,
  ``BinaryName`` the absolute path found);
- its ``default-runtime`` option ("Set the default runtime in containerd", pkg/cli/cmds/agent.go, DefaultRuntimeFlag;
  a flag, or a key of ``/etc/rancher/<k3s|rke2>/config.yaml`` and of the files of ``config.yaml.d/``, read in order,
  the later winning) becomes the CRI plugin's ``default_runtime_name`` in the base template. RKE2 runs the same agent
  code; this collection has not run RKE2 itself.

So this adapter never touches the generated config.toml. It writes one drop-in of its own in ``config.yaml.d`` with
``default-runtime: <name>`` (only when the runtime is to be the default: the registration is the distribution's), and
removing it gives back whatever the user's own files say. The rest (restart, verification through the regenerated
config.toml) is the role's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Change, Runtime
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import generated_report

HEADER = "# Written by kubegpu.cluster (nvidia_runtime_config): the default runtime of %s's containerd.\n"
# Where the distributions look for the runtime besides PATH (the GPU operator's toolkit directory).
OPERATOR_TOOLKIT = "/usr/local/nvidia/toolkit"
_KEY = re.compile(r"^default-runtime\s*:\s*(.*?)\s*$", re.MULTILINE)


def default_of(text):
    """The ``default-runtime`` a config.yaml (or a drop-in of it) sets, or None (a flat key of a flat YAML map)."""
    match = _KEY.search(text or "")
    if not match:
        return None
    value = match.group(1)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value or None


def drop_in(program, name):
    """The drop-in's text: the default runtime, nothing else."""
    return HEADER % program + "default-runtime: %s\n" % name


class Rancher(Runtime):
    """The adapter of a distribution that generates its containerd config from a template (k3s, RKE2)."""

    program = None  # the name in the paths and the header
    toml = False

    @property
    def generated(self):
        """The containerd config the distribution writes at every start (read, never written, by this adapter)."""
        return "/var/lib/rancher/%s/agent/etc/containerd/config.toml" % self.program

    def report(self, binary, params, host, read, answer):
        """The containerd config it generated at its last start."""
        return generated_report(self.generated, read)

    def owns(self, path):
        if path.startswith(os.path.dirname(self.generated) + "/"):
            return "is generated again by %s from its template at every start of the service" % self.name
        return None

    def check(self, params):
        if params.get("drop_in_path") is not None and params.get("config_path") is not None:
            raise KubegpuError("%s: give config_path (the drop-in of /etc/rancher/%s/config.yaml.d this module writes) "
                               "or leave both at their defaults; drop_in_path means nothing here"
                               % (self.name, self.program))
        if params["state"] == "present" and params.get("set_as_default") and not os.path.isabs(params["runtime_path"]):
            raise KubegpuError("runtime_path must be an absolute path for %s: %r" % (self.name, params["runtime_path"]))

    def default_of(self, text, the_plan):
        return default_of(text)

    def reads(self, path, the_plan):
        """``config.yaml`` and the ``*.yaml``/``*.yml`` files (any case) directly in ``config.yaml.d`` (k3s-io/k3s
        pkg/configfilearg/parser.go, dotDFiles: a directory's entries by suffix, not its subdirectories)."""
        drop_ins = os.path.dirname(the_plan.main_path)
        if drop_ins.endswith(".d") and path == drop_ins[:-2]:
            return "is %s's config file" % self.name
        if os.path.dirname(path) == drop_ins and path.lower().endswith((".yaml", ".yml")):
            return "is a *.yaml or *.yml file of %s, all of which %s reads" % (drop_ins, self.name)
        return super(Rancher, self).reads(path, the_plan)

    def plan(self, the_plan, host):
        settings = the_plan.settings
        if settings.cdi:
            host.warn("cdi is ignored for %s: its containerd template decides on CDI (use a config.toml.tmpl built on "
                      "its base template to change it)" % self.name)
        path = the_plan.main_path
        text = _files.read_text(path)
        if the_plan.present and settings.set_as_default:
            self._check_found(settings, host)
            after = drop_in(self.program, settings.name)
            if text is not None and default_of(text) == settings.name and text.startswith(HEADER % self.program):
                after = text  # ours, as it should be
        else:
            after = None  # no default of ours: the distribution registers the runtime by itself
        the_plan.changes.append(Change(path, text, after))

    def _check_found(self, settings, host):
        """The distribution registers the runtime only where it finds it: on PATH, or in the GPU operator's directory,
        under the name ``nvidia-container-runtime``. Not installed yet (check mode before the toolkit's install) is
        a warning; installed elsewhere than ``runtime_path`` is an error."""
        binary = os.path.basename(settings.path)
        if binary != "nvidia-container-runtime":
            raise KubegpuError("%s registers the NVIDIA runtime itself, by the name nvidia-container-runtime, not %s; "
                               "give %s a config.toml.tmpl built on its base template for another one"
                               % (self.name, settings.path, self.name))
        if os.path.dirname(settings.path) == OPERATOR_TOOLKIT:
            return
        found = host.get_bin_path(binary)
        if found is None:
            host.warn("%s is not installed yet: %s registers it at its first start after the toolkit's install"
                      % (settings.path, self.name))
        elif found != settings.path:
            raise KubegpuError(
                "%s registers the NVIDIA runtime itself, from nvidia-container-runtime on its PATH or in %s, but "
                "runtime_path %s is not what it finds (%s); set runtime_path to it, or give %s a config.toml.tmpl "
                "built on its base template" % (self.name, OPERATOR_TOOLKIT, settings.path, found, self.name))


class K3s(Rancher):
    """k3s: /etc/rancher/k3s/config.yaml.d; the k3s (server) or k3s-agent service restarts it."""

    name = "k3s"
    program = "k3s"
    binary = "k3s"
    service = "k3s"
    services = ("k3s", "k3s-agent")
    config_path = "/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml"


class Rke2(Rancher):
    """RKE2: /etc/rancher/rke2/config.yaml.d; the rke2-server or rke2-agent service restarts it."""

    name = "rke2"
    program = "rke2"
    binary = "rke2"
    service = "rke2-server"
    services = ("rke2-server", "rke2-agent")
    config_path = "/etc/rancher/rke2/config.yaml.d/99-nvidia.yaml"
