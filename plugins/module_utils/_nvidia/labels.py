# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The labels an NVIDIA GPU node carries, from its ``gpu`` fact and the device plugin config of that node.

Ours in every case: ``nvidia.com/gpu.present``, the accelerator label (the product slug), the config label
``nvidia.com/device-plugin.config`` on a node with a named plugin config, and the operand deploy labels
``nvidia.com/gpu.deploy.device-plugin`` and ``.gpu-feature-discovery`` (``true``; they are set only where absent or
already ``true``, see :data:`SOFT_LABELS`). GPU feature discovery's labels (:mod:`.gfd`) are ours too when
GFD does not run, with GFD's values; when it runs they are GFD's, and :func:`.gfd.owns` says which keys to leave to it.
Pure functions; applying them to a cluster is :mod:`.._k8s.node_labels`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import names
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import gfd as gfd_rules, plugin_config
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEFAULT_ACCELERATOR_LABEL, DEFAULT_CONFIG_NAME, DEPLOY_LABEL_ON, LABEL_DEPLOY_DEVICE_PLUGIN, LABEL_DEPLOY_GFD,
    LABEL_DEVICE_PLUGIN_CONFIG, LABEL_GPU_PRESENT,
)

# Labels that others may hold at another value ("paused-for-mig-change" from NVIDIA's MIG manager, "false" from an
# admin): ours only where absent or already "true" (k8s/node_labels.run's soft keys).
SOFT_LABELS = (LABEL_DEPLOY_DEVICE_PLUGIN, LABEL_DEPLOY_GFD)

has_gpu = gfd_rules.has_gpu
split_driver_version = gfd_rules.split_driver_version


def sanitize_label_value(text):
    """Turn any text into a valid label value the way GPU feature discovery writes ``gpu.product``.

    Characters other than letters, digits, ``-``, ``_``, ``.`` and blanks are dropped, runs of blanks become one
    ``-`` (``Tesla V100-PCIE-16GB`` -> ``Tesla-V100-PCIE-16GB``), then the value is cut to 63 characters and
    stripped of leading and trailing characters that are not alphanumeric. May return ``""``.
    """
    return gfd_rules.valid_value(gfd_rules.gfd_sanitise(text))


def check_facts(node, facts):
    """Raise OptionError unless ``facts`` looks like the ``gpu`` fact of gpu_facts."""
    if not isinstance(facts, Mapping) or "present" not in facts:
        raise OptionError("nodes",
                          "node %s: the value is not a gpu fact (a dict with 'present', 'count', 'devices', ... as "
                          "kubegpu.cluster.gpu_facts returns it); got %s. Were facts gathered on that host?"
                          % (node, type(facts).__name__ if not isinstance(facts, Mapping) else "a dict without 'present'"))


def labels(facts, config, gfd=False, accelerator_label=DEFAULT_ACCELERATOR_LABEL):
    """Every label this collection wants on a node with this ``gpu`` fact under the plugin ``config`` (the dict
    :func:`.plugin_config.build_config` returns, for that node); ``{}`` for a node without GPUs.

    ``gfd``: GPU feature discovery runs on the node, so its labels are left to it.
    """
    if not isinstance(facts, Mapping) or not has_gpu(facts):
        return {}
    out = {LABEL_GPU_PRESENT: "true"}
    for key in SOFT_LABELS:
        out[key] = DEPLOY_LABEL_ON
    if not gfd:
        out.update(gfd_rules.labels(facts, config))
    devices = gfd_rules.named_devices(facts)
    if devices and accelerator_label:
        slug = gfd_rules.node_model(devices)[0].get("product_slug")
        if slug and names.is_valid_label_value(slug):
            out[accelerator_label] = slug
    return out


def labels_for_facts(facts, accelerator_label=DEFAULT_ACCELERATOR_LABEL, config=None, gfd=False):
    """:func:`labels` with the plugin's default config unless one is given."""
    return labels(facts, config or {}, gfd=gfd, accelerator_label=accelerator_label)


def labels_for(host, facts, accelerator_label=DEFAULT_ACCELERATOR_LABEL, config=None, gfd=False):
    """The labels of one host from its facts, for :func:`.._k8s.node_labels.run`: its facts are checked first, and an
    error names the host."""
    check_facts(host, facts)
    try:
        return labels_for_facts(facts, accelerator_label, config, gfd)
    except OptionError as exc:
        raise OptionError(exc.option, "node %s: %s" % (host, exc.message.split(": ", 1)[-1]))


def node_rules(params):
    """``(labels_for, soft, releases)`` for :func:`.._k8s.node_labels.run` from gpu_node_labels' options: the plugin
    configs are built (and validated) once from ``mig_strategy``, ``sharing``, ``configs`` and ``node_configs``
    (:mod:`.args`), and each node gets its own; a node with a named config also gets the config label that places its
    plugin pods. With ``gfd``, the keys GFD will publish on a node (by :func:`.gfd.labels` for its fact and config)
    are released to it; GFD's other keys that we set earlier (a MIG layout that is gone, say) are removed, since GFD
    will not write them. Raises :class:`OptionError` for an invalid config, before any API call."""
    configs = plugin_config.named_configs(params)
    by_name = dict(configs)
    names_by_node = plugin_config.node_config_names(params, configs)
    node_names = params.get("node_names") or {}
    gfd = bool(params.get("gfd"))
    published = {}  # host -> the keys GFD publishes there

    def labels_of(host, facts, accelerator_label):
        name = names_by_node.get(node_names.get(host) or host, DEFAULT_CONFIG_NAME)
        out = labels_for(host, facts, accelerator_label, by_name[name], gfd)
        if gfd and out:
            try:
                published[host] = set(gfd_rules.labels(facts, by_name[name]))
            except OptionError:
                published[host] = set()  # GFD fails there and publishes nothing
        if out and name != DEFAULT_CONFIG_NAME:
            out[LABEL_DEVICE_PLUGIN_CONFIG] = name
        return out

    def releases(host, key):
        return gfd_rules.owns(key) and key in published.get(host, ())

    return labels_of, SOFT_LABELS, releases if gfd else None
