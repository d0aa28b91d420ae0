# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The labels an NVIDIA GPU node carries, from its ``gpu`` fact, under GPU feature discovery's names and value rules
(NVIDIA/k8s-device-plugin internal/lm: resource.go for gpu.product/count/memory, nvml.go for the CUDA versions).
Pure functions; applying them to a cluster is :mod:`.._k8s.node_labels`."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from collections.abc import Mapping

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import names
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import (
    DEFAULT_ACCELERATOR_LABEL, LABEL_DRIVER_FULL, LABEL_DRIVER_MAJOR, LABEL_DRIVER_MINOR, LABEL_DRIVER_REVISION,
    LABEL_GPU_COUNT, LABEL_GPU_MEMORY, LABEL_GPU_PRESENT, LABEL_GPU_PRODUCT, LABEL_RUNTIME_FULL, LABEL_RUNTIME_MAJOR,
    LABEL_RUNTIME_MINOR,
)


def sanitize_label_value(text):
    """Turn any text into a valid label value the way GPU feature discovery writes ``gpu.product``.

    Characters other than letters, digits, ``-``, ``_``, ``.`` and blanks are dropped, runs of blanks become one
    ``-`` (``Tesla V100-PCIE-16GB`` -> ``Tesla-V100-PCIE-16GB``), then the value is cut to 63 characters and
    stripped of leading and trailing characters that are not alphanumeric. May return ``""``.
    """
    kept = re.sub(r"[^A-Za-z0-9_.\s-]", "", text or "", flags=re.ASCII)
    value = "-".join(kept.split())
    value = re.sub(r"^[^A-Za-z0-9]+", "", value)
    value = value[:names.LABEL_VALUE_MAX]
    return re.sub(r"[^A-Za-z0-9]+$", "", value)


def split_driver_version(version):
    """``510.47.03`` -> ``("510", "47", "03")``; ``390.30`` -> ``("390", "30", None)``; anything else -> None.

    Parts are kept as text (GFD keeps ``03``, not ``3``).
    """
    if not isinstance(version, str):
        return None
    parts = version.strip().split(".", 2)
    if len(parts) < 2 or not all(parts) or not all(names.is_valid_label_value(part) for part in parts):
        return None
    return parts[0], parts[1], parts[2] if len(parts) == 3 else None


def primary_device(facts):
    """The GPU whose model names the node: the first one (NVML index order) with a name.

    Nodes with mixed models are labelled after their first GPU, as GFD does for the whole node.
    """
    for device in facts.get("devices") or []:
        if isinstance(device, Mapping) and device.get("name"):
            return device
    return None


def has_gpu(facts):
    """A node has GPUs for labelling when its facts say so and NVML counted at least one."""
    try:
        count = int(facts.get("count") or 0)
    except (TypeError, ValueError):
        count = 0
    return bool(facts.get("present")) and count > 0


def check_facts(node, facts):
    """Raise OptionError unless ``facts`` looks like the ``gpu`` fact of gpu_facts."""
    if not isinstance(facts, Mapping) or "present" not in facts:
        raise OptionError("nodes",
                          "node %s: the value is not a gpu fact (a dict with 'present', 'count', 'devices', ... as "
                          "kubegpu.cluster.gpu_facts returns it); got %s. Were facts gathered on that host?"
                          % (node, type(facts).__name__ if not isinstance(facts, Mapping) else "a dict without 'present'"))


def labels_for_facts(facts, accelerator_label=DEFAULT_ACCELERATOR_LABEL):
    """The labels a node with this ``gpu`` fact should carry (all values valid label values); ``{}`` for no GPU."""
    if not has_gpu(facts):
        return {}
    labels = {LABEL_GPU_PRESENT: "true", LABEL_GPU_COUNT: str(int(facts["count"]))}
    device = primary_device(facts)
    if device is not None:
        product = sanitize_label_value(device["name"])
        if product:
            labels[LABEL_GPU_PRODUCT] = product
        memory = device.get("memory_total_mib")
        if isinstance(memory, int) and not isinstance(memory, bool) and memory >= 0:
            labels[LABEL_GPU_MEMORY] = str(memory)
        slug = device.get("product_slug")
        if accelerator_label and slug and names.is_valid_label_value(slug):
            labels[accelerator_label] = slug
    driver = split_driver_version(facts.get("driver_version"))
    if driver is not None:
        labels[LABEL_DRIVER_MAJOR], labels[LABEL_DRIVER_MINOR] = driver[0], driver[1]
        if driver[2] is not None:
            labels[LABEL_DRIVER_REVISION] = driver[2]
        labels[LABEL_DRIVER_FULL] = ".".join(part for part in driver if part is not None)
    cuda = split_driver_version(facts.get("cuda_driver_version"))
    if cuda is not None and cuda[2] is None:
        labels[LABEL_RUNTIME_MAJOR], labels[LABEL_RUNTIME_MINOR] = cuda[0], cuda[1]
        labels[LABEL_RUNTIME_FULL] = "%s.%s" % cuda[:2]
    return labels


def labels_for(host, facts, accelerator_label=DEFAULT_ACCELERATOR_LABEL):
    """The labels of one host from its facts, for :func:`.._k8s.node_labels.run`: its facts are checked first."""
    check_facts(host, facts)
    return labels_for_facts(facts, accelerator_label)
