# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every fact about node feature discovery (NFD, kubernetes-sigs/node-feature-discovery) the collection uses, written
once. NFD is vendor-neutral: GPU feature discovery publishes NVIDIA's labels through it, AMD's and Intel's plugins
label nodes through it too; vendor packages pass their own label namespaces and PCI classes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# --- The release: the GPU Operator v26.7.0 ships NFD's Helm chart 0.19.0 (deployments/gpu-operator/values.yaml), whose
# image tag is the chart's appVersion; the device plugin's chart 0.20.0 depends on the same chart.
NFD_VERSION = "v0.19.0"
NFD_IMAGE_REPOSITORY = "registry.k8s.io/nfd/node-feature-discovery"

# --- The API (pkg/apis/nfd/v1alpha1: register.go, annotations_labels.go)
API_GROUP = "nfd.k8s-sigs.io"
API_VERSION = API_GROUP + "/v1alpha1"
NODE_FEATURE = "NodeFeature"
CRD_NODE_FEATURES = "nodefeatures." + API_GROUP
CRD_NODE_FEATURE_RULES = "nodefeaturerules." + API_GROUP
CRD_NODE_FEATURE_GROUPS = "nodefeaturegroups." + API_GROUP
FEATURE_LABEL_NS = "feature.node.kubernetes.io"  # where unprefixed feature labels go (autoDefaultNs)
ANNOTATION_NS = "nfd.node.kubernetes.io"
FEATURE_LABELS_ANNOTATION = ANNOTATION_NS + "/feature-labels"  # the labels nfd-master set, to remove them later
NODE_NAME_LABEL = ANNOTATION_NS + "/node-name"  # on a NodeFeature: the node it describes

# --- The deployment (modelled on NFD's Helm chart 0.19.0, deployment/helm/node-feature-discovery)
NAMESPACE = "node-feature-discovery"
APP_NAME = "node-feature-discovery"
MASTER_NAME = "nfd-master"
WORKER_NAME = "nfd-worker"
MASTER_PROGRAM = "nfd-master"
WORKER_PROGRAM = "nfd-worker"
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"  # where each reads <name>.conf by default
MASTER_CONFIG_KEY = "nfd-master.conf"
WORKER_CONFIG_KEY = "nfd-worker.conf"
FEATURES_D = CONFIG_DIR + "/features.d"  # the local source's feature files on the host
HTTP_PORT = 8080  # metrics and /healthz of both
MASTER_TOLERATIONS = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "",
                       "effect": "NoSchedule"}]
DEFAULT_WAIT_TIMEOUT = 300
