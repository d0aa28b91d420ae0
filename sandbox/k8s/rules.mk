# SPDX-License-Identifier: GPL-3.0-or-later
# Sandbox control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok nodes and
# the device-manager simulator (sandbox/k8s/README.md). Versions are pinned in sandbox/k8s/versions.env.
#
#   make k8s-binaries     build (cold: ~6 min on 2 cores) or reuse $(CACHE_DIR)/k8s/<version>/bin
#   make sandbox-up       start everything on 127.0.0.1; admin kubeconfig at .sandbox/kubeconfig
#   make sandbox-down     stop every process sandbox-up started
#   make sandbox-status   show what runs
#   make test-k8s         unit tests of the simulator rules + integration tests against the sandbox
#
# Knobs: K8S_EXTRA_NODES=N K8S_EXTRA_PROFILE=<profile name or .json path> add N scale nodes;
#        K8S_GPU_TAINT=1 taints GPU nodes nvidia.com/gpu=present:NoSchedule; K8S_UP_TIMEOUT (seconds).

K8S_DIR := $(ROOT)/sandbox/k8s
K8S_EXTRA_NODES ?= 0
K8S_EXTRA_PROFILE ?=
K8S_GPU_TAINT ?= 0
K8S_UP_TIMEOUT ?= 120
K8S_PYTEST_ARGS ?=
K8S_CLI = cd $(ROOT) && CACHE_DIR=$(CACHE_DIR) KUBELET_IMAGE_DIR=$(KUBELET_IMAGE_DIR) $(PY) -m sandbox.k8s

.PHONY: k8s-binaries sandbox-up sandbox-down sandbox-status test-k8s

k8s-binaries:
	CACHE_DIR=$(CACHE_DIR) $(K8S_DIR)/build/build.sh

sandbox-up: k8s-binaries venv kubelet-if-wanted
	$(K8S_CLI) up --timeout $(K8S_UP_TIMEOUT) --extra-nodes $(K8S_EXTRA_NODES) --mig-state-dir $(MIG_STATE) \
		$(if $(K8S_KUBELET_NODES),--kubelet-nodes $(K8S_KUBELET_NODES)) \
		$(if $(K8S_EXTRA_PROFILE),--extra-profile $(K8S_EXTRA_PROFILE)) $(if $(filter 1 true yes,$(K8S_GPU_TAINT)),--gpu-taint)

sandbox-down:
	$(K8S_CLI) down

sandbox-status:
	$(K8S_CLI) status

test-k8s: k8s-binaries venv
	cd $(ROOT) && CACHE_DIR=$(CACHE_DIR) $(PY) -m pytest -p no:cacheprovider tests/sandbox/unit tests/sandbox/k8s tests/integration/k8s $(K8S_PYTEST_ARGS)
