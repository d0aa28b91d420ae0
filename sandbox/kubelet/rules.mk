# SPDX-License-Identifier: GPL-3.0-or-later
# Kubelet nodes: fleet node containers running a real kubelet beside their containerd (sandbox/kubelet/README.md).
# Included by the top-level Makefile (ROOT, CACHE_DIR, BUILD, PY, APT_ENSURE).
#   make kubelet          the kubelet of versions.env's Kubernetes, built once into $(CACHE_DIR)/kubelet/<version>/bin
#   make kubelet-cni      Debian's CNI plugins on this machine (copied into the kubelet nodes)
#   make kubelet-images   the loader directory $(KUBELET_IMAGE_DIR): the pause image of our own (cached by key), and
#                         whatever image tars other targets put there; sandbox-up imports each into every kubelet node
#   make kubelet-inotify  fs.inotify.max_user_instances raised to 1024 when lower (machine-wide; below)
#   make kubelet-containerd2  containerd 2.x, its shim and ctr (sandbox/containerd2/rules.mk), for nodes with
#                         `containerd: "2"` in fleet.yml (README.md, "containerd 2.x on a kubelet node")
#   make kubelet-ready    all of them
# Which nodes are kubelet nodes: `kubelet: true` in sandbox/fleet.yml, or K8S_KUBELET_NODES=all|none|a,b for sandbox-up.

KUBELET_DIR := $(ROOT)/sandbox/kubelet
# every docker-save tar here is imported into each kubelet node's containerd (k8s.io) and docker
KUBELET_IMAGE_DIR := $(BUILD)/node-image-tars
KUBELET_CACHE := $(CACHE_DIR)/kubelet
K8S_KUBELET_NODES ?=
# sandbox-up prepares the kubelet nodes' pieces only when some node will be one
KUBELET_WANTED := $(if $(filter-out none,$(K8S_KUBELET_NODES)),yes,$(if $(K8S_KUBELET_NODES),,$(shell \
	grep -Eqs '^\s+kubelet:\s*true\b' $(ROOT)/sandbox/fleet.yml && echo yes)))

.PHONY: kubelet kubelet-cni kubelet-images kubelet-ready kubelet-if-wanted kubelet-inotify kubelet-containerd2

kubelet:
	mkdir -p $(GO_TMP)
	CACHE_DIR=$(CACHE_DIR) $(KUBELET_DIR)/build.sh

kubelet-cni:
	@$(APT_ENSURE) kubelet-cni containernetworking-plugins

kubelet-images: venv docker-engine
	cd $(ROOT) && $(PY) -m sandbox.kubelet.images pause --cache-dir $(KUBELET_CACHE)/images --out $(KUBELET_IMAGE_DIR)

kubelet-containerd2: containerd2 containerd2-shim

kubelet-ready: kubelet kubelet-cni kubelet-images kubelet-inotify kubelet-containerd2

# sandbox-up's prerequisite: nothing unless some node will be a kubelet node (a fresh machine's demo builds no kubelet)
kubelet-if-wanted: $(if $(KUBELET_WANTED),kubelet-ready)

# Every root process of every container shares one fs.inotify.max_user_instances (128 by default) and each kubelet
# node takes about 8 (README.md): with kubelet nodes beside make test's control planes and molecule's containers, 128
# runs out and kubelets crash-loop. This raises it to KUBELET_INOTIFY_INSTANCES when lower (kind's known issues advise
# the same); a machine-wide setting, made by kubelet-ready (so by test-setup and a sandbox-up with kubelet nodes).
# cluster.py's INOTIFY_WANTED is this number.
KUBELET_INOTIFY_INSTANCES ?= 1024
kubelet-inotify:
	@now=$$(cat /proc/sys/fs/inotify/max_user_instances); \
	if [ "$$now" -lt $(KUBELET_INOTIFY_INSTANCES) ]; then \
	  echo "kubelet-inotify: fs.inotify.max_user_instances $$now -> $(KUBELET_INOTIFY_INSTANCES)"; \
	  sysctl -q -w fs.inotify.max_user_instances=$(KUBELET_INOTIFY_INSTANCES); \
	else echo "kubelet-inotify: fs.inotify.max_user_instances is $$now already"; fi
