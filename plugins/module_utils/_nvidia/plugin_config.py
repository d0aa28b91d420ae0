# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The NVIDIA device plugin's config file (its v1 schema, api/config/v1 in NVIDIA/k8s-device-plugin) as plain data,
built from the modules' options and validated with the plugin's own rules before anything talks to a cluster.
Pure functions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import names
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import health
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    APP_NAME, CONFIG_KEY, CONFIG_NAME_MAX, DEFAULT_CONFIG_NAME, DEFAULT_DEVICE_ID_STRATEGY, DEFAULT_DEVICE_LIST_STRATEGY,
    DEFAULT_DRIVER_ROOT, DEFAULT_MIG_STRATEGY, DEVICE_ID_STRATEGIES, DEVICE_LIST_STRATEGIES, MAX_RESOURCE_NAME_LENGTH,
    MIG_STRATEGIES, MPS_DAEMON_NAME, MPS_ROOT, PLUGIN_NAME, RESOURCE_GPU, SHARING_STRATEGIES, resource,
)

_DEVICE_INDEX = re.compile(r"^[0-9]+(:[0-9]+)?$")
_DEVICE_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def resource_name(raw, option="sharing.resources[].name"):
    """The fully qualified resource name the plugin builds from ``raw`` (NewResourceName in the plugin's
    api/config/v1/resources.go: the nvidia.com/ prefix added, at most 63 characters, a DNS subdomain), or an error."""
    if not isinstance(raw, str) or not raw:
        raise OptionError(option, "a resource name must be a non-empty string, got %r" % (raw,))
    name = resource(raw)
    if len(name) > MAX_RESOURCE_NAME_LENGTH:
        raise OptionError(option, "fully-qualified resource name must be %d characters or less: %s"
                          % (MAX_RESOURCE_NAME_LENGTH, name))
    short = name.split("/", 1)[1]
    if not names.is_dns_subdomain(short):
        raise OptionError(option, "'%s' is not a valid resource name (DNS subdomain: lower case "
                          "letters, digits, '-' and '.')" % name)
    return name


def _devices(value, option):
    """``devices`` as the plugin accepts it (ReplicaDevices in its api/config/v1/replicas.go): V(all), a count > 0, or
    a list of GPU indexes, ``gpu:mig`` indexes or UUIDs."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise OptionError(option, "must be 'all', a count > 0 or a list of GPU indexes or UUIDs")
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        if int(value) <= 0:
            raise OptionError(option, "a device count must be > 0, got %s" % value)
        return int(value)
    if isinstance(value, str):
        if value != "all":
            raise OptionError(option, "unknown value '%s' (use 'all', a count > 0 or a list)" % value)
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            raise OptionError(option, "an empty device list selects nothing")
        out = []
        for item in value:
            text = str(item)
            if not (_DEVICE_INDEX.match(text) or _DEVICE_UUID.match(text)):
                raise OptionError(option, "'%s' is neither a GPU index, a 'gpu:mig' index nor a "
                                  "GPU-/MIG- UUID" % text)
            out.append(text)
        return out
    raise OptionError(option, "must be 'all', a count > 0 or a list of GPU indexes or UUIDs")


def _choice(params, key, choices):
    value = params.get(key)
    if value is not None and value not in choices:
        raise OptionError(key, "unknown strategy '%s' (one of: %s)" % (value, ", ".join(choices)))
    return value


def build_config(params):
    """Validate the options with the plugin's rules and return ``config.yaml`` as data (the plugin's v1 schema).

    Raises :class:`OptionError` naming the first offending option.
    """
    mig = _choice(params, "mig_strategy", MIG_STRATEGIES) or DEFAULT_MIG_STRATEGY
    list_strategy = params.get("device_list_strategy") or DEFAULT_DEVICE_LIST_STRATEGY
    if isinstance(list_strategy, str):
        list_strategy = [list_strategy]
    for item in list_strategy:
        if item not in DEVICE_LIST_STRATEGIES:
            raise OptionError("device_list_strategy", "unknown strategy '%s' (one of: %s)"
                              % (item, ", ".join(DEVICE_LIST_STRATEGIES)))
    id_strategy = _choice(params, "device_id_strategy", DEVICE_ID_STRATEGIES) or DEFAULT_DEVICE_ID_STRATEGY
    fail_on_init = params.get("fail_on_init_error")
    flags = {
        "migStrategy": mig,
        "failOnInitError": True if fail_on_init is None else bool(fail_on_init),
        "nvidiaDriverRoot": params.get("nvidia_driver_root") or DEFAULT_DRIVER_ROOT,
        "plugin": {
            "passDeviceSpecs": False,
            "deviceListStrategy": list(list_strategy),
            "deviceIDStrategy": id_strategy,
        },
    }
    config = {"version": "v1", "flags": flags}

    sharing = params.get("sharing") or {}
    strategy = sharing.get("strategy") or "none"
    if strategy not in SHARING_STRATEGIES:
        raise OptionError("sharing.strategy", "unknown strategy '%s' (one of: %s)"
                          % (strategy, ", ".join(SHARING_STRATEGIES)))
    if strategy != "none":
        if strategy == "mps" and mig == "mixed":
            raise OptionError("sharing.strategy", "MPS is not supported with mig_strategy=mixed "
                              "(the plugin says: using --mig-strategy=mixed is not "
                              "supported with MPS)")
        default_replicas = sharing.get("replicas")
        wanted = sharing.get("resources") or [{"name": RESOURCE_GPU}]
        resources = []
        for index, res in enumerate(wanted):
            where = "sharing.resources[%d]" % index if sharing.get("resources") else "sharing"
            name = resource_name(res.get("name") or RESOURCE_GPU, where + ".name")
            replicas = res.get("replicas") if res.get("replicas") is not None else default_replicas
            if replicas is None:
                raise OptionError(where + ".replicas", "is required for sharing strategy '%s'" % strategy)
            # the plugin refuses fewer than 2 at start-up ("number of replicas must be >= 2", as users of it report);
            # its parser, api/config/v1/replicas.go, refuses <= 0 already when it reads the file
            if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
                raise OptionError(
                    where + ".replicas",
                    "number of replicas must be >= 2, got %r (the plugin refuses it and advertises nothing)" % (replicas,))
            entry = {"name": name, "replicas": replicas}
            devices = _devices(res.get("devices") if res.get("devices") is not None else sharing.get("devices"),
                               where + ".devices")
            if devices is not None:
                entry["devices"] = devices
            resources.append(entry)
        section = {"renameByDefault": bool(sharing.get("rename_by_default")), "resources": resources}
        fail_gt_one = sharing.get("fail_requests_greater_than_one")
        if fail_gt_one is not None:
            section["failRequestsGreaterThanOne"] = bool(fail_gt_one)
        elif strategy == "mps":
            section["failRequestsGreaterThanOne"] = True  # what the plugin forces for MPS
        config["sharing"] = {"timeSlicing" if strategy == "time-slicing" else "mps": section}
        if strategy == "mps":
            flags["mpsRoot"] = MPS_ROOT
    if params.get("gfd"):
        flags["useNodeFeatureAPI"] = True
        flags["gfd"] = {"oneshot": False, "noTimestamp": False, "sleepInterval": "60s"}
    return config


# What a named config may set; everything else is the same for every node (images, strategies of device lists).
CONFIG_OPTIONS = ("mig_strategy", "sharing")


def _taken_by_the_default(name):
    """``(object name, whose)`` where a named config ``name`` would give its plugin DaemonSet (``<app>-<name>``) the
    name of another one: the default config's plugin (``<app>-daemonset``) or an MPS control daemon
    (``<app>-mps-control-daemon[-<config>]``); else None."""
    plugin = "%s-%s" % (APP_NAME, name)
    if plugin == PLUGIN_NAME:
        return plugin, "default config's device plugin"
    if plugin == MPS_DAEMON_NAME or plugin.startswith(MPS_DAEMON_NAME + "-"):
        whose = ("the default config" if plugin == MPS_DAEMON_NAME
                 else "config '%s'" % plugin[len(MPS_DAEMON_NAME) + 1:])
        return plugin, "MPS control daemon of %s" % whose
    return None


def named_configs(params):
    """``[(name, config)]``: ``default`` (the top-level options) first, then each of ``configs`` by name, each the
    top-level options with the named config's ``mig_strategy`` and ``sharing`` in their place. Raises
    :class:`OptionError` naming the config."""
    out = [(DEFAULT_CONFIG_NAME, build_config(params))]
    for name, options in sorted((params.get("configs") or {}).items()):
        where = "configs.%s" % name
        if name == DEFAULT_CONFIG_NAME:
            raise OptionError(where, "'%s' is the top-level options' name: set those instead" % name)
        if not names.is_dns_label(name) or len(name) > CONFIG_NAME_MAX:
            raise OptionError(where, "a config name must be a DNS label (lower case letters, digits and '-') of at "
                                     "most %d characters" % CONFIG_NAME_MAX)
        taken = _taken_by_the_default(name)
        if taken:
            raise OptionError(where, "'%s' would give a named config's DaemonSet the name %s, which the %s has; choose "
                                     "another name" % (name, taken[0], taken[1]))
        if not isinstance(options, dict):
            raise OptionError(where, "must be a dict with mig_strategy and/or sharing")
        unknown = sorted(set(options) - set(CONFIG_OPTIONS))
        if unknown:
            raise OptionError(where, "unknown option(s) %s (a config sets only %s)"
                              % (", ".join(unknown), ", ".join(CONFIG_OPTIONS)))
        merged = dict(params)
        merged.update(options)
        try:
            out.append((name, build_config(merged)))
        except OptionError as exc:
            raise OptionError("%s.%s" % (where, exc.option), exc.message.split(": ", 1)[-1])
    return out


def config_key(name):
    """The ConfigMap key of a config: ``config.yaml`` for the default one, ``<name>.yaml`` for a named one."""
    return CONFIG_KEY if name == DEFAULT_CONFIG_NAME else "%s.yaml" % name


def node_config_names(params, configs):
    """``{node: config name}`` for every node ``node_configs`` names (inventory names mapped by ``node_names``), each
    name one of ``configs`` (:func:`named_configs`)."""
    known = set(name for name, _config in configs)
    mapped = params.get("node_names") or {}
    out = {}
    for host, name in sorted((params.get("node_configs") or {}).items()):
        if name not in known:
            raise OptionError("node_configs.%s" % host, "'%s' is not a config; known: %s"
                              % (name, ", ".join(sorted(known))))
        out[mapped.get(host) or host] = name
    return out


def configs_by_node(params, configs):
    """``{node: config}`` (the plugin config data) for every node ``node_configs`` names."""
    by_name = dict(configs)
    return dict((node, by_name[name]) for node, name in node_config_names(params, configs).items())


def max_unavailable(value):
    """``max_unavailable`` as the DaemonSet's ``rollingUpdate.maxUnavailable``: a count of nodes (1 or more) or a
    percentage of them (``"1%"`` to ``"100%"``); raises :class:`OptionError` for anything else."""
    text = str(value).strip()
    if text.endswith("%") and text[:-1].isdigit() and 1 <= int(text[:-1]) <= 100:
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise OptionError("max_unavailable", "'%s' is neither a count of nodes (1 or more) nor a percentage of them "
                      "('1%%' to '100%%')" % value)


def validate(params):
    """Check every option that does not end up in the config file too; raises :class:`OptionError`."""
    namespace = params.get("namespace")
    if namespace and not names.is_dns_label(namespace):
        raise OptionError("namespace", "'%s' is not a valid namespace name (DNS label)" % namespace)
    runtime_class = params.get("runtime_class")
    if runtime_class and not names.is_dns_subdomain(runtime_class):
        raise OptionError("runtime_class", "'%s' is not a valid RuntimeClass name (DNS subdomain)" % runtime_class)
    for name in params.get("image_pull_secrets") or []:
        if not names.is_dns_subdomain(name or ""):
            raise OptionError("image_pull_secrets", "'%s' is not a valid Secret name" % name)
    if params.get("max_unavailable") is not None:
        max_unavailable(params["max_unavailable"])
    health.settings(params.get("health_checks"))  # raises for what the plugin would not do as written
    expected = params.get("expected") or {}
    for node, resources in expected.items():
        if not isinstance(resources, dict):
            raise OptionError("expected", "node '%s' must map resource names to counts" % node)
        for res, count in resources.items():
            resource_name(res, "expected.%s" % node)
            try:
                if int(count) < 0:
                    raise ValueError(count)
            except (TypeError, ValueError):
                raise OptionError("expected", "node '%s' resource '%s': count must be an integer >= 0, "
                                  "got %r" % (node, res, count))
    return named_configs(params)


def config_yaml(config):
    """The config file text. JSON is valid YAML, and sorted keys make it (and its hash) deterministic."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def config_hash(config):
    return hashlib.sha256(config_yaml(config).encode("utf-8")).hexdigest()


def expected_counts(expected):
    """``expected`` with fully qualified resource names and int counts."""
    return dict((node, dict((resource_name(r), int(c)) for r, c in (res or {}).items()))
                for node, res in (expected or {}).items())
