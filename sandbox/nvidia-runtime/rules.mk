# SPDX-License-Identifier: GPL-3.0-or-later
# NVIDIA's own container runtime, built from the toolkit's Go module (github.com/NVIDIA/nvidia-container-toolkit) at
# each version the stand-in toolkit packages carry (sandbox/aptrepo/versions.env, the one place): nvidia-container-
# runtime, nvidia-ctk and nvidia-cdi-hook, which sandbox/aptrepo/build_repo.sh ships in nvidia-container-toolkit-base.
# Cached by version, Go version and these flags like the other Go builds of the sandbox (sandbox/nvidia-runtime/README.md).
# Included by the top-level Makefile (ROOT, CACHE_DIR, GO_ENV, GO_TMP).
#   make nvidia-runtime    $(NVIDIA_RUNTIME_DIR)/<upstream version>/{nvidia-container-runtime,nvidia-ctk,nvidia-cdi-hook,LICENSE}

include $(ROOT)/sandbox/aptrepo/versions.env
NVIDIA_RUNTIME_MODULE := github.com/NVIDIA/nvidia-container-toolkit
NVIDIA_RUNTIME_CMDS := nvidia-container-runtime nvidia-ctk nvidia-cdi-hook
NVIDIA_RUNTIME_UPSTREAM := $(foreach v,$(TOOLKIT_VERSIONS),$(firstword $(subst -, ,$(v))))
# As NVIDIA's Makefile builds them (its `cmd-%` rule): the version stamped into internal/info, go-nvml's symbols resolved
# when NVML is loaded (dlopen) rather than at link time.
NVIDIA_RUNTIME_LDFLAGS = -s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' \
	-X $(NVIDIA_RUNTIME_MODULE)/internal/info.version=$(1)
# The key: the Go toolchain and this recipe (what is built, and how)
NVIDIA_RUNTIME_KEY := $(shell { go version 2>/dev/null; cat $(ROOT)/sandbox/nvidia-runtime/rules.mk; } | sha256sum | cut -c1-12)
NVIDIA_RUNTIME_DIR := $(CACHE_DIR)/nvidia-runtime/$(NVIDIA_RUNTIME_KEY)
NVIDIA_RUNTIME_STAMPS := $(foreach v,$(NVIDIA_RUNTIME_UPSTREAM),$(NVIDIA_RUNTIME_DIR)/$(v)/.stamp)

.PHONY: nvidia-runtime nvidia-runtime-dir
nvidia-runtime: $(NVIDIA_RUNTIME_STAMPS)

# Where they are (tests/sandbox/test_apt_repo.py asks, to rebuild the packages the same way)
nvidia-runtime-dir:
	@echo $(NVIDIA_RUNTIME_DIR)

# One version's three programs, into a temporary directory first: the cache directory only ever holds a finished set.
$(NVIDIA_RUNTIME_DIR)/%/.stamp:
	mkdir -p $(GO_TMP) $(NVIDIA_RUNTIME_DIR)
	rm -rf $(NVIDIA_RUNTIME_DIR)/$*.tmp && mkdir -p $(NVIDIA_RUNTIME_DIR)/$*.tmp
	GOBIN=$(NVIDIA_RUNTIME_DIR)/$*.tmp $(GO_ENV) GOFLAGS=-mod=mod CGO_ENABLED=1 \
	  nice -n 10 go install -trimpath -ldflags="$(call NVIDIA_RUNTIME_LDFLAGS,$*)" \
	  $(foreach c,$(NVIDIA_RUNTIME_CMDS),$(NVIDIA_RUNTIME_MODULE)/cmd/$(c)@v$*)
	$(NVIDIA_RUNTIME_DIR)/$*.tmp/nvidia-container-runtime --version > $(NVIDIA_RUNTIME_DIR)/$*.tmp/.version
	grep -qx 'NVIDIA Container Runtime version $*' $(NVIDIA_RUNTIME_DIR)/$*.tmp/.version
	$(NVIDIA_RUNTIME_DIR)/$*.tmp/nvidia-ctk --version > $(NVIDIA_RUNTIME_DIR)/$*.tmp/.version
	grep -qx 'NVIDIA Container Toolkit CLI version $*' $(NVIDIA_RUNTIME_DIR)/$*.tmp/.version
	rm $(NVIDIA_RUNTIME_DIR)/$*.tmp/.version
	cp '$(CACHE_DIR)/go/mod/github.com/!n!v!i!d!i!a/nvidia-container-toolkit@v$*/LICENSE' $(NVIDIA_RUNTIME_DIR)/$*.tmp/LICENSE
	chmod 0644 $(NVIDIA_RUNTIME_DIR)/$*.tmp/LICENSE
	$(NVIDIA_RUNTIME_DIR)/$*.tmp/nvidia-cdi-hook --help >/dev/null
	rm -rf $(NVIDIA_RUNTIME_DIR)/$* && mv $(NVIDIA_RUNTIME_DIR)/$*.tmp $(NVIDIA_RUNTIME_DIR)/$*
	touch $@
