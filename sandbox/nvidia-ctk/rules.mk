# SPDX-License-Identifier: GPL-3.0-or-later
# NVIDIA's own nvidia-ctk, the judge of nvidia_runtime_config: tests/integration/test_nvidia_ctk_oracle.py configures
# the same corpus of runtime configs with both tools and compares what containerd (or the file) makes of each. Built
# from the Go module proxy, cached by version like the control plane binaries. Included by the top-level Makefile
# (ROOT, CACHE_DIR).
#   make nvidia-ctk    $(NVIDIA_CTK_BIN), built once per version

NVIDIA_CTK_VERSION := 1.20.1
NVIDIA_CTK_DIR := $(CACHE_DIR)/nvidia-ctk/$(NVIDIA_CTK_VERSION)
NVIDIA_CTK_BIN := $(NVIDIA_CTK_DIR)/bin/nvidia-ctk

.PHONY: nvidia-ctk
nvidia-ctk: $(NVIDIA_CTK_BIN)

$(NVIDIA_CTK_BIN):
	mkdir -p $(NVIDIA_CTK_DIR)/bin
	mkdir -p $(GO_TMP)
	GOBIN=$(NVIDIA_CTK_DIR)/bin $(GO_ENV) GOFLAGS=-mod=mod \
	  nice -n 10 go install -trimpath -ldflags='-s -w' \
	  github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@v$(NVIDIA_CTK_VERSION)
	$@ runtime configure --help >/dev/null
