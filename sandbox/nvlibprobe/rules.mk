# SPDX-License-Identifier: GPL-3.0-or-later
# nvlibprobe: the go-nvlib judge of the fake NVML. A small Go program built with cgo against NVIDIA's go-nvml and
# go-nvlib at the versions pinned once, in sandbox/nvlibprobe/go.mod; it walks the GPUs the way the device plugin and
# GPU feature discovery do and prints what those libraries make of them (tests/sandbox/test_nvlib_probe.py). Cached
# by those versions like the other Go binaries of the sandbox. Included by the top-level Makefile (ROOT, CACHE_DIR).
#   make nvlibprobe    $(NVLIBPROBE_BIN)

NVLIBPROBE_SRC := $(ROOT)/sandbox/nvlibprobe
# "go-nvlib-v0.13.0_go-nvml-v0.13.4-1", read from the require lines of go.mod
NVLIBPROBE_VERSIONS := $(shell sed -n 's#^[[:space:]]*github.com/NVIDIA/\(go-nvlib\|go-nvml\) \(v[^[:space:]]*\).*#\1-\2#p' \
	$(NVLIBPROBE_SRC)/go.mod | paste -sd_ -)
# ... and the sources' own hash: worktrees with different probes share the cache, so each source has a binary of its own
# (tests/sandbox/test_nvlib_probe.py computes the same key)
NVLIBPROBE_HASH := $(shell cat $(NVLIBPROBE_SRC)/main.go $(NVLIBPROBE_SRC)/go.mod $(NVLIBPROBE_SRC)/go.sum | sha256sum | cut -c1-12)
NVLIBPROBE_DIR := $(CACHE_DIR)/nvlibprobe/$(NVLIBPROBE_VERSIONS)_$(NVLIBPROBE_HASH)
NVLIBPROBE_BIN := $(NVLIBPROBE_DIR)/nvlibprobe

.PHONY: nvlibprobe
nvlibprobe: $(NVLIBPROBE_BIN)

# Rebuilt when the program or its pins change. go-nvml's cgo preamble warns about NVML's deprecated declarations:
# those warnings are silenced, nothing else is. The smoke run needs no NVML: without a library the probe reports
# LIBRARY_NOT_FOUND and exits 0.
$(NVLIBPROBE_BIN): $(NVLIBPROBE_SRC)/main.go $(NVLIBPROBE_SRC)/go.mod $(NVLIBPROBE_SRC)/go.sum
	@test -n "$(NVLIBPROBE_VERSIONS)" || { echo "nvlibprobe: no go-nvlib/go-nvml pins in $(NVLIBPROBE_SRC)/go.mod" >&2; exit 1; }
	mkdir -p $(NVLIBPROBE_DIR)
	mkdir -p $(GO_TMP)
	cd $(NVLIBPROBE_SRC) && CGO_ENABLED=1 CGO_CFLAGS='-O2 -Wno-deprecated-declarations' \
	  $(GO_ENV) GOFLAGS=-mod=readonly \
	  nice -n 10 go build -trimpath -o $@.tmp .
	LD_LIBRARY_PATH=/nonexistent FAKE_NVML_PROFILE=/nonexistent $@.tmp | grep -q '"init":'
	mv -f $@.tmp $@
