# SPDX-License-Identifier: GPL-3.0-or-later
"""The CDI spec NVIDIA's device plugin writes at start when a CDI device list strategy is on (k8s-device-plugin
v0.20.0 cmd/nvidia-device-plugin/plugin-manager.go GetPlugins -> internal/cdi/cdi.go CreateSpecFile): the devices of
vendor ``k8s.device-plugin.nvidia.com``, class ``gpu``, named by the device ID strategy, generated from the driver root
mounted in the plugin's container (``driver-root-ctr-path``, /driver-root), their paths then moved to the host's
driver root (``driver-root``, getRootTransformer), saved as ``/var/run/cdi/<vendor>-<class>.json``
(GenerateNameForSpec). The runtime resolves the plugin's CDI names (allocate.py) against it.

The real plugin generates it in-process with the toolkit's nvcdi library. The stand-in runs the toolkit's own program
for the same work from the node's driver root: ``<driver root in the container><nvidiaCTKPath> cdi generate --mode
nvml`` and ``cdi transform root`` (the node's nvidia-ctk, installed there by the toolkit package; nvidiaCTKPath is the
hook path the plugin gives nvcdi too)."""

from __future__ import annotations

import os
import subprocess

VENDOR = "k8s.device-plugin.nvidia.com"
CLASS = "gpu"
CDI_ROOT = os.environ.get("KUBEGPU_STANDIN_CDI_ROOT") or "/var/run/cdi"  # tests move it; the plugin's is fixed
STRATEGIES = ("cdi-annotations", "cdi-cri")
TIMEOUT_S = 120


class SpecError(Exception):
    """The spec could not be made: the plugin cannot start (its reason)."""


def wanted(config):
    return any(s in STRATEGIES for s in config.device_list_strategy)


def spec_path(cdi_root=CDI_ROOT):
    return os.path.join(cdi_root, "%s-%s.json" % (VENDOR, CLASS))


def write_spec(config, cdi_root=CDI_ROOT):
    """Generate, transform and save the spec; return its path."""
    root = config.container_driver_root
    ctk = os.path.join(root, config.nvidia_ctk_path.lstrip("/"))
    if not os.access(ctk, os.X_OK):
        raise SpecError("unable to create cdi spec file: no nvidia-ctk at %s (the node's %s under %s)"
                        % (ctk, config.nvidia_ctk_path, root))
    generate = [ctk, "cdi", "generate", "--mode", "nvml", "--format", "json", "--driver-root", root, "--dev-root", root,
                "--vendor", VENDOR, "--class", CLASS, "--device-name-strategy", config.device_id_strategy,
                "--nvidia-cdi-hook-path", config.nvidia_ctk_path]
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # the generator finds the driver's libraries in the driver root, as nvcdi does
    made = subprocess.run(generate, capture_output=True, text=True, timeout=TIMEOUT_S, check=False, env=env)
    if made.returncode != 0:
        raise SpecError("unable to create cdi spec file: failed to get CDI spec: %s" % made.stderr.strip()[-2000:])
    path = spec_path(cdi_root)
    # nvidia-ctk names its output's format by the extension (it appends .yaml to any other): the spec is written as
    # <name>.json in a directory of its own below the CDI root (same file system; CDI reads no subdirectory), then moved
    scratch = os.path.join(cdi_root, ".kubegpu-standin")
    os.makedirs(scratch, exist_ok=True)
    partial = os.path.join(scratch, os.path.basename(path))
    moved = subprocess.run([ctk, "cdi", "transform", "root", "--from", root, "--to", config.driver_root,
                            "--relative-to", "host", "--input", "-", "--output", partial],
                           input=made.stdout, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if moved.returncode != 0:
        raise SpecError("unable to create cdi spec file: failed to transform driver root in CDI spec: %s"
                        % moved.stderr.strip()[-2000:])
    os.replace(partial, path)
    return path
