# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Every NVIDIA fact the collection's code uses, written once: versions, images, the resource prefix, label keys,
the plugin's defaults, the proof's defaults, the PCI vendor. Module argument specs and docs read these; role
defaults that must repeat one are checked against it (tests/unit/test_one_place.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# --- The device plugin release this collection deploys (k8s-device-plugin; GFD ships in the same image)
DEVICE_PLUGIN_VERSION = "v0.20.0"
DEVICE_PLUGIN_IMAGE_REPOSITORY = "nvcr.io/nvidia/k8s-device-plugin"

# --- Extended resources: nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>
RESOURCE_PREFIX = "nvidia.com"
RESOURCE_GPU = RESOURCE_PREFIX + "/gpu"
SHARED_SUFFIX = ".shared"  # what renameByDefault appends
MIG_RESOURCE_PREFIX = RESOURCE_PREFIX + "/mig-"
MAX_RESOURCE_NAME_LENGTH = 63  # the plugin's NewResourceName refuses longer fully qualified names

# --- Node labels, under GPU feature discovery's names (k8s-device-plugin internal/lm)
LABEL_GPU_PRESENT = RESOURCE_PREFIX + "/gpu.present"
LABEL_GPU_PRODUCT = RESOURCE_PREFIX + "/gpu.product"
LABEL_GPU_COUNT = RESOURCE_PREFIX + "/gpu.count"
LABEL_GPU_MEMORY = RESOURCE_PREFIX + "/gpu.memory"
LABEL_DRIVER_MAJOR = RESOURCE_PREFIX + "/cuda.driver-version.major"
LABEL_DRIVER_MINOR = RESOURCE_PREFIX + "/cuda.driver-version.minor"
LABEL_DRIVER_REVISION = RESOURCE_PREFIX + "/cuda.driver-version.revision"
LABEL_DRIVER_FULL = RESOURCE_PREFIX + "/cuda.driver-version.full"
LABEL_RUNTIME_MAJOR = RESOURCE_PREFIX + "/cuda.runtime-version.major"
LABEL_RUNTIME_MINOR = RESOURCE_PREFIX + "/cuda.runtime-version.minor"
LABEL_RUNTIME_FULL = RESOURCE_PREFIX + "/cuda.runtime-version.full"
DEFAULT_ACCELERATOR_LABEL = "accelerator"  # the label the Kubernetes docs use in nodeSelector examples

# --- Operand deploy labels, as the GPU Operator sets them (gpu-operator controllers/state_manager.go) and NVIDIA's
# MIG manager pauses them (mig-parted cmd/nvidia-mig-manager reconfigure: "paused-for-mig-change"; a value of "false"
# is an external entity's and is left alone). Our DaemonSets select on "true", so a paused node loses our pods.
LABEL_DEPLOY_PREFIX = RESOURCE_PREFIX + "/gpu.deploy."
LABEL_DEPLOY_DEVICE_PLUGIN = LABEL_DEPLOY_PREFIX + "device-plugin"  # also the MPS control daemon's (GPU Operator)
LABEL_DEPLOY_GFD = LABEL_DEPLOY_PREFIX + "gpu-feature-discovery"
DEPLOY_LABEL_ON = "true"
DEPLOY_LABEL_PAUSED = "paused-for-mig-change"
# --- NVIDIA's MIG manager reports its work in this node label (mig-parted cmd/nvidia-mig-manager
# reconfigure-mig.sh, __set_state_and_exit and the 'pending' / 'rebooting' steps); the mig role writes the same values.
LABEL_MIG_CONFIG_STATE = RESOURCE_PREFIX + "/mig.config.state"
MIG_CONFIG_STATES = ("pending", "rebooting", "success", "failed")
# The Helm chart's per-node config label (deployments/helm/nvidia-device-plugin, config-manager NODE_LABEL).
LABEL_DEVICE_PLUGIN_CONFIG = RESOURCE_PREFIX + "/device-plugin.config"
# GFD's MPS label; the plugin's Helm chart runs the MPS control daemon only where it is "true"
# (templates/daemonset-mps-control-daemon.yml nodeSelector; GFD internal/lm/nvml.go newSharingLabeler).
LABEL_MPS_CAPABLE = RESOURCE_PREFIX + "/mps.capable"

# --- The device plugin's deployment (modelled on its static manifest, deployments/static/nvidia-device-plugin.yml)
DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
APP_NAME = "nvidia-device-plugin"
PLUGIN_NAME = "nvidia-device-plugin-daemonset"
GFD_NAME = "gpu-feature-discovery"
MPS_DAEMON_NAME = APP_NAME + "-mps-control-daemon"  # the Helm chart's "<fullname>-mps-control-daemon"
CONFIGMAP_NAME = "nvidia-device-plugin-config"
CONFIG_KEY = "config.yaml"  # the default config's key, and the file name every pod reads its config from
CONFIG_DIR = "/config"
# Per-node configs: one DaemonSet per config, the nodes picked by LABEL_DEVICE_PLUGIN_CONFIG (the Helm chart's key)
DEFAULT_CONFIG_NAME = "default"
CONFIG_NAME_MAX = 20  # "nvidia-device-plugin-mps-control-daemon-<name>" stays a 63-character name
LABEL_PLUGIN_CONFIG = "kubegpu.cluster/plugin-config"  # on our pods: which config a DaemonSet's pods run
MPS_ROOT = "/run/nvidia/mps"  # the plugin's mpsRoot on the host; /mps inside its pod
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
# CDI (deviceListStrategy cdi-annotations, cdi-cri): the plugin writes its CDI spec to /var/run/cdi, where the container
# runtime reads it when it resolves the devices Allocate names (internal/cdi/cdi.go, cdiRoot), and generates it from
# the driver it finds under containerDriverRoot, the host's nvidiaDriverRoot mounted there (api/config/v1/flags.go and
# cmd/nvidia-device-plugin/main.go, DefaultContainerDriverRoot; the chart mounts it read-only,
# deployments/helm/nvidia-device-plugin/templates/daemonset-device-plugin.yml).
CDI_ROOT = "/var/run/cdi"
CONTAINER_DRIVER_ROOT = "/driver-root"
CDI_LIST_STRATEGIES = ("cdi-annotations", "cdi-cri")
GPU_TOLERATION = {"key": RESOURCE_GPU, "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_NODE_SELECTOR = {LABEL_GPU_PRESENT: "true"}
DEFAULT_TOLERATIONS = [GPU_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}]
DEFAULT_PRIORITY_CLASS = "system-node-critical"
DEFAULT_WAIT_TIMEOUT = 300

# --- The plugin's config file (api/config/v1): the values it accepts
MIG_STRATEGIES = ("none", "single", "mixed")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
DEFAULT_MIG_STRATEGY = "none"
DEFAULT_DEVICE_LIST_STRATEGY = ["envvar"]
DEFAULT_DEVICE_ID_STRATEGY = "uuid"
DEFAULT_DRIVER_ROOT = "/"

# --- The plugin's XID health checks (internal/rm/health.go): the XIDs it ignores whatever the environment says
# (application errors: 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
# cleanup, 68 video processor exception, 109 context switch timeout), and the two variables that change the list:
# DP_DISABLE_HEALTHCHECKS ("all", or more XIDs to ignore) and DP_ENABLE_HEALTHCHECKS (XIDs to check even so).
HEALTH_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
HEALTH_ENV_DISABLE = "DP_DISABLE_HEALTHCHECKS"
HEALTH_ENV_ENABLE = "DP_ENABLE_HEALTHCHECKS"

# --- The proof workload (NVIDIA's entry of the vendor registry, _vendors.py; the Job is _k8s/proof.py's): the CUDA
# vectorAdd sample, which prints "Test PASSED"
PROOF_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
PROOF_PATTERN = "Test PASSED"
PROOF_TOLERATIONS = [GPU_TOLERATION]
# Which advertised resource a proof asks for when none is named: a whole GPU first, then a shared one, then MIG.
PROOF_RESOURCE_PREFERENCE = (RESOURCE_GPU, RESOURCE_GPU + SHARED_SUFFIX)
# What an NVIDIA proof's failure may say, and what to do about it (looked for before the hints of any vendor's proof)
PROOF_HINTS = (
    ("Insufficient nvidia.com", "no node has a free GPU of that resource: check that the device plugin runs on the GPU "
                                "nodes and that they advertise it (kubectl describe node, Allocatable)"),
    # CUDA's own error when the driver is older than the CUDA the image was built for (cudaErrorInsufficientDriver)
    ("CUDA driver version is insufficient", "the node's driver is older than the CUDA version the proof image was "
                                            "built for: upgrade the driver (kubegpu.cluster.gpu_driver) or prove with "
                                            "an image built for the CUDA version that driver supports"),
    ("could not load NVML", "the pod did not run under the NVIDIA runtime: make nvidia the default runtime "
                            "(kubegpu.cluster.container_toolkit) or set a runtime class"),
)

# --- The container toolkit: the runtime it registers with docker, containerd and CRI-O (the RuntimeClass handler)
RUNTIME_NAME = "nvidia"
RUNTIME_PATH = "/usr/bin/nvidia-container-runtime"

# --- The driver
VENDOR = "nvidia"  # the vendor's name in the gpu fact (gpu.vendors, gpu.pci[].vendor)
PCI_VENDOR_ID = 0x10DE
# The NVIDIA Container Toolkit's stated minimum ("NVIDIA Linux drivers >= 418.81.07", container-toolkit platform
# support); the device plugin's README asks for >= 384.81, so the toolkit's wins.
DRIVER_MIN_VERSION = "418.81.07"
KERNEL_MODULES = ("nvidia", "nouveau")
# The Python bindings of NVML that gpu_facts needs on a GPU host (requirements.txt pins the tested version).
NVML_PYTHON_PACKAGE = "nvidia-ml-py"


def resource(name):
    """``name`` as a fully qualified resource name (``gpu`` -> ``nvidia.com/gpu``); a qualified name stays as it is."""
    return name if name.startswith(RESOURCE_PREFIX + "/") else RESOURCE_PREFIX + "/" + name


def default_image(version=DEVICE_PLUGIN_VERSION):
    return "%s:%s" % (DEVICE_PLUGIN_IMAGE_REPOSITORY, version)


# --- GPU feature discovery's other labels (k8s-device-plugin internal/lm: resource.go builds <resource>.<suffix>,
# nvml.go the version, MIG and MPS capability labels, strategy.go mig.strategy). Per-resource keys are
# RESOURCE_GPU + "." + suffix for whole GPUs and MIG single, MIG_RESOURCE_PREFIX + profile + "." + suffix for mixed.
LABEL_GPU_REPLICAS = RESOURCE_GPU + ".replicas"
LABEL_GPU_SHARING_STRATEGY = RESOURCE_GPU + ".sharing-strategy"
LABEL_GPU_FAMILY = RESOURCE_GPU + ".family"
LABEL_GPU_COMPUTE_MAJOR = RESOURCE_GPU + ".compute.major"
LABEL_GPU_COMPUTE_MINOR = RESOURCE_GPU + ".compute.minor"
LABEL_GPU_MODE = RESOURCE_GPU + ".mode"
LABEL_MIG_CAPABLE = RESOURCE_PREFIX + "/mig.capable"
LABEL_MIG_STRATEGY = RESOURCE_PREFIX + "/mig.strategy"
# The deprecated forms GFD still writes beside the new ones (nvml.go newVersionLabeler).
LABEL_DRIVER_MAJOR_OLD = RESOURCE_PREFIX + "/cuda.driver.major"
LABEL_DRIVER_MINOR_OLD = RESOURCE_PREFIX + "/cuda.driver.minor"
LABEL_DRIVER_REV_OLD = RESOURCE_PREFIX + "/cuda.driver.rev"
LABEL_RUNTIME_MAJOR_OLD = RESOURCE_PREFIX + "/cuda.runtime.major"
LABEL_RUNTIME_MINOR_OLD = RESOURCE_PREFIX + "/cuda.runtime.minor"
# The labels under nvidia.com/ that are not GFD's: ours (gpu.present, the deploy labels) and the GPU Operator's.
NOT_GFD_LABELS = (LABEL_GPU_PRESENT, LABEL_DEVICE_PLUGIN_CONFIG, RESOURCE_GPU + ".workload.config")
NOT_GFD_PREFIXES = (LABEL_DEPLOY_PREFIX, RESOURCE_PREFIX + "/mig.config")

# --- Dynamic Resource Allocation: NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu), issue 27.
# The release deployed, its image (chart values.yaml image.repository; the tag is "v" + the chart's appVersion).
DRA_DRIVER_VERSION = "v0.5.0"
DRA_DRIVER_IMAGE_REPOSITORY = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
# The driver's name in ResourceSlices and claims (cmd/gpu-kubelet-plugin/main.go DriverName).
DRA_DRIVER_NAME = "gpu.nvidia.com"
# Its DeviceClasses (chart templates/deviceclass-gpu.yaml, deviceclass-mig.yaml) and the device type attribute they
# select on; a full GPU is published as "gpu-<minor>" (cmd/gpu-kubelet-plugin/deviceinfo.go CanonicalName).
DRA_DEVICE_CLASS_GPU = "gpu.nvidia.com"
DRA_DEVICE_CLASS_MIG = "mig.nvidia.com"
DRA_DEVICE_TYPE_GPU = "gpu"
DRA_DEVICE_TYPE_MIG = "mig"
DRA_GPU_DEVICE_NAME = "gpu-%d"  # % the GPU's minor number
# CDI names the plugin gives a claim's devices (cmd/gpu-kubelet-plugin/cdi.go: vendor "k8s." + DriverName, class
# "claim", device "<claimUID>-<device name>").
DRA_CDI_KIND = "k8s." + DRA_DRIVER_NAME + "/claim"
# The node label that admits the DRA kubelet plugin, as NVIDIA's GPU Operator gates it (gpu-operator
# internal/state/dra_driver_test.go: NodeSelector["nvidia.com/gpu.deploy.dra-driver"] == "true"). A node runs the
# device plugin (LABEL_DEPLOY_DEVICE_PLUGIN true) or the DRA kubelet plugin (this one true), never both (the chart's
# templates/validation.yaml: the driver "cannot be deployed alongside the standard GPU device plugin on the same node").
LABEL_DEPLOY_DRA_DRIVER = LABEL_DEPLOY_PREFIX + "dra-driver"
DRA_NAMESPACE = "nvidia-dra-driver-gpu"
# The DaemonSet, its ServiceAccount and RBAC (chart templates/kubeletplugin.yaml, rbac-kubeletplugin.yaml; our names
# are the chart's with the release name "nvidia"), the plugin's health port (values.yaml
# kubeletPlugin.containers.gpus.healthcheckPort). The kubelet's directories are the kubelet's facts (_kubelet.py).
DRA_APP_NAME = "dra-driver-nvidia-gpu"
DRA_KUBELET_PLUGIN_NAME = DRA_APP_NAME + "-kubelet-plugin"
DRA_HEALTHCHECK_PORT = 51516
DRA_LOG_VERBOSITY = "4"  # values.yaml logVerbosity
# Kubernetes' DRA matrix (kubernetes v1.36.3 pkg/features/kube_features.go; pkg/controlplane/instance.go): the API
# group, its versions in the chart's order of preference (templates/_helpers.tpl resourceApiVersion), the gates.
DRA_API_GROUP = "resource.k8s.io"
DRA_API_VERSIONS = ("v1", "v1beta2", "v1beta1")
DRA_MIN_VERSION = (1, 32)  # DynamicResourceAllocation beta (off by default); the chart's kubeVersion >=1.32.0-0
DRA_GA = (1, 34)  # DynamicResourceAllocation GA, resource.k8s.io/v1 on by default
DRA_EXTENDED_RESOURCE_BETA = (1, 36)  # DRAExtendedResource beta, on by default (alpha, off, in 1.34 and 1.35)
DRA_FEATURE_GATE = "DynamicResourceAllocation"
DRA_EXTENDED_RESOURCE_GATE = "DRAExtendedResource"
DRA_GATE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
DRA_DEFAULT_WAIT_TIMEOUT = 300
