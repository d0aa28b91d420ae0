# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The work of ``dra_host_prep``, on one node: is it ready for NVIDIA's DRA kubelet plugin?

- Its container runtime, found from the kubelet's CRI endpoint (or given), and what it reports
  (container_runtime_facts' own reading, :func:`.._runtime.facts.gather`), judged by :func:`.._runtime.cdi.verdict`:
  refused where it cannot start a claim's CDI devices, ``cdi.enable`` where CDI must be turned on (the role does that
  with ``nvidia_runtime_config cdi=true`` and the container_toolkit role's restart-and-rollback, not here), and the
  newest CDI spec version it reads.
- The kubelet's root dir (:func:`.._kubelet.find`), for the plugin's registration and plugin directories.
- NVIDIA's control device nodes (``nvidiactl``, ``nvidia-modeset``, ``nvidia-uvm``, ``nvidia-uvm-tools``: the ones
  ``nvidia-ctk system create-device-nodes --control-devices`` creates, NVIDIA/nvidia-container-toolkit
  pkg/system/nvdevices/devices.go CreateNVIDIAControlDevices). Nothing creates them at boot until a program opens the
  driver (kubernetes-sigs/dra-driver-nvidia-gpu#1380), and the DRA plugin's CDI specs name them: missing ones are
  created with that command (the kernel modules loaded first, ``--load-kernel-modules``). The role also installs a
  boot unit that runs it before the kubelet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import posixpath

from ansible_collections.kubegpu.cluster.plugins.module_utils import _kubelet
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import KubegpuError, OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import cdi, facts

CONTROL_DEVICES = ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools")
NVIDIA_CTK = "nvidia-ctk"


def create_command(ctk, dev_root="/"):
    """The command that loads NVIDIA's kernel modules and creates the control device nodes under ``dev_root``/dev."""
    command = [ctk, "system", "create-device-nodes", "--control-devices", "--load-kernel-modules"]
    if dev_root and dev_root != "/":
        command += ["--dev-root", dev_root]
    return command


def missing_devices(dev_root="/", exists=os.path.exists):
    return [name for name in CONTROL_DEVICES if not exists(posixpath.join(dev_root or "/", "dev", name))]


def which_runtime(params, kubelet, host):
    """The registry name of the node's runtime: given, or behind the kubelet's CRI endpoint (k3s and RKE2 share a
    socket; RKE2's binary tells them apart)."""
    if params.get("runtime"):
        return params["runtime"]
    name = cdi.runtime_of_endpoint(kubelet.get("runtime_endpoint"))
    if name is None:
        raise OptionError("runtime", "cannot tell the node's container runtime: %s; pass runtime"
                          % ("no kubelet runs on the node" if kubelet.get("pid") is None
                             else "the kubelet names no CRI endpoint this module knows (%s)"
                             % kubelet.get("runtime_endpoint")))
    if name == "k3s" and host.get_bin_path("rke2"):
        name = "rke2"
    return name


def runtime_facts(runtime, params, host):
    """``(version, enable_cdi as the daemon reports it)`` of ``runtime``, as container_runtime_facts reads them."""
    gathered = facts.gather({"runtimes": [runtime], "report": True,
                             "containerd_config": params.get("containerd_config")}, host)
    found = gathered["runtimes"].get(runtime)
    if not found:
        raise KubegpuError("the node's runtime %s is not installed here (its binary is not found)" % runtime,
                           runtime=runtime)
    report = found.get("reports") or {}
    return found.get("version"), report.get("cdi")


def run(params, host, check_mode=False, proc="/proc", read=None, exists=os.path.exists):
    """The module's result."""
    kubelet = _kubelet.find(params.get("kubelet_root_dir"), proc=proc, read=read or _kubelet._read, exists=exists)
    runtime = which_runtime(params, kubelet, host)
    version, cdi_setting = params.get("runtime_version"), None
    if runtime != "docker":  # refused whatever its version
        found_version, cdi_setting = runtime_facts(runtime, params, host)
        version = version or found_version
    judged_version = params.get("containerd_version") if runtime in cdi.CONTAINERD_DISTRIBUTIONS else version
    verdict = cdi.verdict(runtime, judged_version, cdi_setting)
    cdi.check_spec_version(runtime, judged_version, params.get("cdi_spec_version"), verdict["max_spec_version"])
    for note in verdict.pop("notes"):
        host.warn(note)
    dev_root = params.get("dev_root") or "/"
    missing = missing_devices(dev_root, exists)
    created = []
    if missing and params.get("device_nodes", True):
        ctk = params.get("nvidia_ctk_path") or host.get_bin_path(NVIDIA_CTK)
        if not ctk:
            raise KubegpuError("NVIDIA's device nodes %s are missing and nvidia-ctk, which creates them, is not "
                               "installed: install the NVIDIA Container Toolkit (kubegpu.cluster.container_toolkit)"
                               % ", ".join("/dev/" + m for m in missing), missing=missing)
        if not check_mode:
            rc, out, err = host.run_command(create_command(ctk, dev_root))
            if rc != 0:
                raise KubegpuError("nvidia-ctk could not create NVIDIA's device nodes (%s): %s"
                                   % (", ".join(missing), (err or out or "rc %d" % rc).strip()), missing=missing)
        created = missing
    return {
        "changed": bool(created),
        "runtime": runtime,
        "runtime_version": version,
        "cdi": verdict,
        "kubelet": kubelet,
        "kubelet_root_dir": kubelet["root_dir"],
        "device_nodes": {"missing": missing, "created": created},
    }
