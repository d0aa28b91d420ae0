# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every fact about nano-gpu (Tencent's fractional GPU sharing: nano-gpu/nano-gpu-scheduler, a kube-scheduler
extender, and nano-gpu/nano-gpu-agent, its device plugin) the collection uses, written once."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# --- The resource (nano-gpu-agent pkg/types: ResourceName; each physical GPU counts as 100 percent)
RESOURCE_NAME = "nano-gpu/gpu-percent"
PERCENT_PER_GPU = 100

# --- The kube-scheduler extender entry (KubeSchedulerConfiguration v1, kube-scheduler's config/v1 Extender type)
SCHEDULER_CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"
SCHEDULER_CONFIG_KIND = "KubeSchedulerConfiguration"
FILTER_VERB = "filter"
PRIORITIZE_VERB = "priorities"
BIND_VERB = "bind"
