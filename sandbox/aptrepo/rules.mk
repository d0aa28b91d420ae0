# SPDX-License-Identifier: GPL-3.0-or-later
# Stand-in NVIDIA container toolkit packages in a local signed apt repository (sandbox/aptrepo/README.md).
# Included by the top-level Makefile, which defines ROOT and BUILD.
#
#   make apt-repo   $(BUILD)/aptrepo, laid out like nvidia.github.io/libnvidia-container: the directory the molecule
#                   scenarios bind-mount read-only at /srv/kubegpu-apt and serve on each node's loopback (serve.yml).
#                   Rebuilt only when a source below changes (stamp: a hash of them); the signing key is kept in
#                   $(BUILD)/aptrepo-gnupg across rebuilds and the served gpgkey is exported from it on every build.

APTREPO_SRC := $(ROOT)/sandbox/aptrepo
APTREPO_OUT := $(BUILD)/aptrepo
APTREPO_GNUPG := $(BUILD)/aptrepo-gnupg
APTREPO_STAMP := $(BUILD)/aptrepo.stamp
APTREPO_LOCK := $(BUILD)/aptrepo.lock
# Where the nodes serve it (serve.yml); written into stable/deb/nvidia-container-toolkit.list.
APTREPO_URL := http://127.0.0.1:8088
APTREPO_INPUTS := $(APTREPO_SRC)/build_repo.sh $(APTREPO_SRC)/libnvidia-container.c $(APTREPO_SRC)/rules.mk \
	$(APTREPO_SRC)/versions.env
# dpkg-deb (dpkg), apt-ftparchive (apt-utils), gpg/gpgconf (gnupg), gpgv, gcc for the stand-in library, flock.
APTREPO_HOST_PACKAGES := dpkg apt-utils gnupg gpgv gcc util-linux

.PHONY: apt-repo

# One build at a time (flock, waiting at most 10 minutes): a molecule run and a pytest run may ask for it together.
# NVIDIA's runtime programs that nvidia-container-toolkit-base ships come from `make nvidia-runtime` (sandbox/nvidia-runtime);
# their bytes are part of the key.
apt-repo: nvidia-runtime
	@mkdir -p $(BUILD); \
	exec 9>$(APTREPO_LOCK); flock -w 600 9; \
	key=$$( { echo "$(APTREPO_URL)"; cat $(APTREPO_INPUTS) $(foreach v,$(NVIDIA_RUNTIME_UPSTREAM),$(addprefix $(NVIDIA_RUNTIME_DIR)/$(v)/,$(NVIDIA_RUNTIME_CMDS) LICENSE)); } \
	  | sha256sum | cut -c1-16); \
	if [ -f $(APTREPO_OUT)/stable/deb/amd64/InRelease ] && [ "$$(cat $(APTREPO_STAMP) 2>/dev/null)" = "$$key" ]; then \
	  echo "apt-repo: $(APTREPO_OUT) is up to date ($$key)"; exit 0; \
	fi; \
	$(APT_ENSURE) apt-repo $(APTREPO_HOST_PACKAGES); \
	rm -f $(APTREPO_STAMP); \
	$(APTREPO_SRC)/build_repo.sh --runtime $(NVIDIA_RUNTIME_DIR) --out $(APTREPO_OUT) --gnupg $(APTREPO_GNUPG) \
	  --url $(APTREPO_URL); \
	echo "$$key" > $(APTREPO_STAMP)
