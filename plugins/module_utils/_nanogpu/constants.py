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

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv

# --- The resource (nano-gpu-agent pkg/types: ResourceName; each physical GPU counts as 100 percent)
RESOURCE_NAME = "nano-gpu/gpu-percent"
PERCENT_PER_GPU = 100

# --- The kube-scheduler extender entry (KubeSchedulerConfiguration v1, kube-scheduler's config/v1 Extender type)
SCHEDULER_CONFIG_API_VERSION = "kubescheduler.config.k8s.io/v1"
SCHEDULER_CONFIG_KIND = "KubeSchedulerConfiguration"
FILTER_VERB = "filter"
PRIORITIZE_VERB = "priorities"
BIND_VERB = "bind"

# ============================================================================ the cluster side (nano_gpu_deploy; H3)
# Upstream: nano-gpu/nano-gpu-scheduler (now elastic-ai/elastic-gpu-scheduler, whose history holds it) and
# nano-gpu/nano-gpu-agent (now elastic-ai/elastic-gpu-agent); the paths below are those repositories' files.

# --- The release and images, pinned once (deploy/nano-gpu-scheduler.yaml and deploy/nano-gpu-agent.yaml of the
# 0.3.0 release: nanogpu/nano-gpu-scheduler:0.3.0, nanogpu/nano-gpu-agent:0.3.0; 0.4.0 of the scheduler needs a
# Prometheus and a policy ConfigMap for its load-aware mode, which this collection does not set up)
VERSION = "0.3.0"
SCHEDULER_IMAGE_REPOSITORY = "nanogpu/nano-gpu-scheduler"
AGENT_IMAGE_REPOSITORY = "nanogpu/nano-gpu-agent"


def scheduler_image(version=VERSION):
    """The extender's image for a release."""
    return "%s:%s" % (SCHEDULER_IMAGE_REPOSITORY, version)


def agent_image(version=VERSION):
    """The agent's image for a release."""
    return "%s:%s" % (AGENT_IMAGE_REPOSITORY, version)


# --- The deployment (upstream puts both in kube-system)
NAMESPACE = "kube-system"
APP_NAME = "nano-gpu"
SCHEDULER_NAME = "nano-gpu-scheduler"  # Deployment, Service and ServiceAccount (deploy/nano-gpu-scheduler.yaml)
AGENT_NAME = "nano-gpu-agent"  # DaemonSet and ServiceAccount (deploy/nano-gpu-agent.yaml)
SCHEDULER_COMPONENT = "scheduler-extender"
AGENT_COMPONENT = "agent"
# The extender's binary and flags (cmd/main.go: --priority binpack|spread, the port from $PORT, default 39999)
SCHEDULER_COMMAND = "/usr/bin/nano-gpu-scheduler"
SCHEDULER_PORT = 39999
PORT_ENV = "PORT"
PRIORITIES = ("binpack", "spread")  # pkg/types/types.go PriorityBinPack, PrioritySpread
DEFAULT_PRIORITY = "binpack"
# Its HTTP API (pkg/routes/routes.go): POST <prefix>/filter, /priorities, /bind; GET /version answers "0.1.0"
URL_PATH = "/scheduler"
VERSION_PATH = "/version"
# The agent's binary, its installer (tools/install.sh: swaps the host's nvidia-container-runtime-hook and
# nvidia-container-toolkit for nano-gpu's) and its state file (deploy/nano-gpu-agent.yaml)
AGENT_COMMAND = "/usr/bin/nano-gpu-agent"
AGENT_INSTALLER_COMMAND = "/usr/bin/install.sh"
AGENT_DB_FILE = "/host/var/lib/nanogpu/meta.db"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
KUBELET_POD_RESOURCES = "/var/lib/kubelet/pod-resources"

# --- What the extender writes on a pod it binds (pkg/types/types.go; pkg/utils/pod.go GetUpdatedPodAnnotationSpec):
# per container the index of the GPU it got, and the "assumed" mark as an annotation and a label, then the Binding.
# The agent reads them back in PreStartContainer (pkg/plugins/server.go; pkg/common/const.go of the agent).
ANNOTATION_CONTAINER = "nano-gpu/container-%s"
ASSUME_KEY = "nano-gpu/assume"  # annotation and label, value "true"

# --- Where the pods run by default: the agent on the NVIDIA GPU nodes (its NVML counts the GPUs), the extender
# anywhere (SuperEdge: set scheduler_node_selector to cloud nodes, see docs/nano-gpu.md)
DEFAULT_AGENT_NODE_SELECTOR = dict(nv.DEFAULT_NODE_SELECTOR)  # nvidia.com/gpu.present=true (gpu_node_labels)
DEFAULT_AGENT_TOLERATIONS = list(nv.DEFAULT_TOLERATIONS)
SCHEDULER_PRIORITY_CLASS = "system-cluster-critical"  # upstream's critical-pod annotation, as a priority class
AGENT_PRIORITY_CLASS = "system-node-critical"
DEFAULT_WAIT_TIMEOUT = 300

# ============================================================================ the host side (nano_gpu_host, scheduler_extender; H4)
# --- What nano-gpu-agent's installer does to a GPU node. Its DaemonSet (elastic-ai/elastic-gpu-agent
# deploy/nano-gpu-agent.yaml) runs the init container nano-gpu-installer, privileged, with the host's / at /host, and
# its tools/install.sh MOVES the host's nvidia-container-runtime-hook into the container (so it is gone from the host),
# renames the host's nvidia-container-toolkit to nvidia-container-toolkit-bak, and copies nano-gpu's own hook, its
# nvidia-container-toolkit and mount_nano_gpu into /usr/bin. It does so at every start of the pod, so a second start
# puts nano-gpu's toolkit into the -bak name: the host's originals survive only in a backup taken before the first.
HOOK_PATH = "/usr/bin/nvidia-container-runtime-hook"
TOOLKIT_PATH = "/usr/bin/nvidia-container-toolkit"
REPLACED_BINARIES = (HOOK_PATH, TOOLKIT_PATH)
# What the installer leaves besides (a host that has them and no backup of ours lost its own hook already)
AGENT_LEFTOVERS = ("/usr/bin/mount_nano_gpu", "/usr/bin/nvidia-container-toolkit-bak")
# nano-gpu's hook (cmd/nano-gpu-hook/main.go) runs "/usr/bin/nvidia-container-toolkit prestart [GPU index]", the
# legacy prestart hook: it is only called where nvidia-container-runtime injects the hook into the OCI spec, i.e. in
# the toolkit's legacy mode (/etc/nvidia-container-runtime/config.toml [nvidia-container-runtime] mode), and only for
# containers the NVIDIA runtime starts: the agent's and the workloads' pods set no RuntimeClass, so docker must run
# them with "default-runtime": "nvidia" (elastic-gpu-agent README.md, Prerequisites; nano-gpu-scheduler README.md:
# nvidia-docker). NVIDIA's deb makes nvidia-container-toolkit a symlink to the hook (NVIDIA/nvidia-container-toolkit
# packaging/debian/nvidia-container-toolkit.postinst).
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
MODE_KEY = ("nvidia-container-runtime", "mode")
LEGACY_MODE = "legacy"
# "auto" (the default) is legacy on NVML platforms up to toolkit 1.17 and jit-cdi from 1.18.0 (internal/info/auto.go)
AUTO_MODE = "auto"
AUTO_IS_CDI_FROM = (1, 18, 0)
DOCKER_DEFAULT_RUNTIME = "nvidia"
DOCKER_CONFIG = "/etc/docker/daemon.json"
NVIDIA_PCI_VENDOR = 0x10DE
# The toolkit's packages the role holds while nano-gpu's binaries are in place (an upgrade puts NVIDIA's back)
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
# Where the kubelet says which CRI it talks to: the KubeletConfiguration (containerRuntimeEndpoint, 1.27 and later),
# kubeadm's flags file (cmd/kubeadm/app/phases/kubelet/flags.go), Kubespray's kubelet.env, the distributions' files.
KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
KUBELET_FLAG_FILES = ("/var/lib/kubelet/kubeadm-flags.env", "/etc/kubernetes/kubelet.env", "/etc/default/kubelet",
                      "/etc/sysconfig/kubelet")
# The backup of the two binaries and the record of what the role did on the host; container_toolkit reads the
# record (roles/container_toolkit/vars/main.yml _container_toolkit_nano_gpu_marker) and leaves the packages alone.
HOST_STATE_DIR = "/var/lib/kubegpu/nano-gpu"
HOST_STATE_FILE = "host.json"

# --- The kube-scheduler's side on a kubeadm control plane (scheduler_extender)
SCHEDULER_MANIFEST = "/etc/kubernetes/manifests/kube-scheduler.yaml"
SCHEDULER_CONFIG = "/etc/kubernetes/kube-scheduler-config.yaml"
SCHEDULER_CONTAINER = "kube-scheduler"
SCHEDULER_CONFIG_VOLUME = "kubegpu-scheduler-config"
SCHEDULER_STATE_DIR = "/var/lib/kubegpu/nano-gpu/scheduler"
# kube-scheduler's secure port serves /healthz without credentials (--authorization-always-allow-paths default)
SCHEDULER_SECURE_PORT = 10259
# The fields of an extender (k8s.io/kube-scheduler config/v1 types.go Extender); Kubespray's
# roles/kubernetes/control-plane/templates/kubescheduler-config.yaml.j2 writes kube_scheduler_extenders verbatim
# under `extenders:`, so its items take exactly these keys.
EXTENDER_FIELDS = ("urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb", "enableHTTPS",
                   "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable")
KUBESPRAY_EXTENDERS_VARIABLE = "kube_scheduler_extenders"
KUBESPRAY_MARKER = "/etc/kubernetes/kubelet.env"
