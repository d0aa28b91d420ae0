# SPDX-License-Identifier: GPL-3.0-or-later
# A containerd 2.x binary, so the tests check config version 3 with containerd itself (Debian bookworm ships 1.6,
# which reads version 2 only). Built from the Go module proxy, cached by version like the control plane binaries.
# Included by the top-level Makefile (ROOT, CACHE_DIR).
#   make containerd2    $(CONTAINERD2_BIN), built once per version

CONTAINERD2_VERSION := 2.4.2
CONTAINERD2_DIR := $(CACHE_DIR)/containerd/$(CONTAINERD2_VERSION)
CONTAINERD2_BIN := $(CONTAINERD2_DIR)/bin/containerd

.PHONY: containerd2
containerd2: $(CONTAINERD2_BIN)

$(CONTAINERD2_BIN):
	mkdir -p $(CONTAINERD2_DIR)/bin
	mkdir -p $(GO_TMP)
	GOBIN=$(CONTAINERD2_DIR)/bin $(GO_ENV) GOFLAGS=-mod=mod \
	  nice -n 10 go install -trimpath -ldflags='-s -w' github.com/containerd/containerd/v2/cmd/containerd@v$(CONTAINERD2_VERSION)
	$@ --version | grep -q ' $(CONTAINERD2_VERSION)'

# The same version's runc shim and ctr, for kubelet nodes that run containerd 2.x (sandbox/kubelet, fleet.yml
# `containerd: "2"`): a directory of their own beside containerd's, keyed by the same version (a stamp says it is whole)
#   make containerd2-shim    $(CONTAINERD2_SHIM_DIR)/{containerd-shim-runc-v2,ctr}
CONTAINERD2_SHIM_DIR := $(CACHE_DIR)/containerd-shim/$(CONTAINERD2_VERSION)/bin

.PHONY: containerd2-shim
containerd2-shim: $(CONTAINERD2_SHIM_DIR)/.stamp

$(CONTAINERD2_SHIM_DIR)/.stamp:
	mkdir -p $(CONTAINERD2_SHIM_DIR) $(GO_TMP)
	GOBIN=$(CONTAINERD2_SHIM_DIR) $(GO_ENV) GOFLAGS=-mod=mod nice -n 10 go install -trimpath -ldflags='-s -w' \
	  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v$(CONTAINERD2_VERSION) \
	  github.com/containerd/containerd/v2/cmd/ctr@v$(CONTAINERD2_VERSION)
	$(CONTAINERD2_SHIM_DIR)/ctr --version | grep -q ' v\?$(CONTAINERD2_VERSION)'
	touch $@
