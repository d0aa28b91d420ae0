# SPDX-License-Identifier: GPL-3.0-or-later
"""What NVIDIA's device plugin and its MPS control daemon share on start-up: the config (file, environment, command
line, through the simulator's ``rules.parse_config``) and the devices per resource (NVML read, then
``rules.plugin_devices``). Both programs of the image load them the same way (cmd/nvidia-device-plugin/main.go,
cmd/mps-control-daemon/main.go: loadConfig, then rm.NewNVMLResourceManagers)."""

from __future__ import annotations

import dataclasses
import logging
import os

from sandbox.k8s.devsim import rules

from . import nvml_view

LOG = logging.getLogger("kubegpu-standins")
# The root the plugin and the MPS daemon see MPS under, inside their containers (cmd/mps-control-daemon/mps: ContainerRoot
# "/mps"). Tests move it with this variable, a stand-in's knob that NVIDIA's programs do not have.
MPS_CONTAINER_ROOT = os.environ.get("KUBEGPU_STANDIN_MPS_ROOT") or "/mps"


class StartError(Exception):
    """The program cannot start: its log line says why (``code``: exit status, None: wait instead of exiting)."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def setup_logging():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname).1s %(message)s")


def load(argv, env=None):
    """``(config, cli)`` from ``--config-file``/``CONFIG_FILE``, the environment and the command line."""
    env = dict(os.environ if env is None else env)
    cli = rules.parse_cli_args(argv)
    path = cli.get("config-file") or env.get("CONFIG_FILE")
    text = None
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise StartError("unable to load config: unable to read config file: %s" % exc) from exc
    try:
        config = rules.parse_config(text, env, cli)
    except rules.PluginError as exc:
        raise StartError("unable to load config: %s" % exc) from exc
    for warning in config.warnings:
        LOG.warning("%s", warning)
    return config, cli


def devices(config):
    """``(profile, {resource: [PluginDevice]})``: the GPUs through NVML and what the rules make of them, with each
    device's NUMA node from sysfs. NVML failing to start: exit 1 with ``failOnInitError``, else wait."""
    try:
        profile = nvml_view.read()
    except nvml_view.NvmlInitError as exc:
        raise StartError(str(exc), 1 if config.fail_on_init_error else None) from exc
    try:
        by_resource = rules.plugin_devices(profile, config)
    except rules.PluginError as exc:
        raise StartError("error starting plugins: %s" % exc) from exc
    numa = {index: nvml_view.numa_node(device.get("pci_bus_id"))
            for index, device in enumerate(profile.get("devices") or [])}
    return profile, {name: [dataclasses.replace(d, numa=numa.get(d.gpu)) for d in devs]
                     for name, devs in by_resource.items()}
