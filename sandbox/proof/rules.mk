# SPDX-License-Identifier: GPL-3.0-or-later
# The proof image: the sandbox's stand-in for NVIDIA's CUDA vectorAdd sample (README.md beside this file), tagged exactly
# as the collection's proof image (PROOF_IMAGE in plugins/module_utils/_nvidia/constants.py, the one place), its CUDA
# version read from that tag. Saved as a docker archive under STANDIN_IMAGES_DIR, where the node images' loader finds
# the stand-in images (each stand-in adds its archive to STANDIN_IMAGE_TARS). Cached by key: the sources, the tag, the
# compiler and the C library it copies. Included by the top-level Makefile (ROOT, CACHE_DIR).
#   make proof-image    $(PROOF_IMAGE_TAR)

PROOF_SRC := $(ROOT)/sandbox/proof
PROOF_IMAGE := $(shell sed -n 's/^PROOF_IMAGE = "\(.*\)"$$/\1/p' $(ROOT)/plugins/module_utils/_nvidia/constants.py)
# vectoradd-cuda12.5.0 -> 12.5.0
PROOF_CUDA_VERSION := $(shell echo '$(PROOF_IMAGE)' | sed -n 's/.*[-:]vectoradd-cuda\([0-9][0-9.]*\)$$/\1/p')
STANDIN_IMAGES_DIR ?= $(CACHE_DIR)/standin-images
PROOF_KEY := $(shell { echo '$(PROOF_IMAGE)'; cat $(PROOF_SRC)/vectoradd.c $(PROOF_SRC)/build_image.sh $(PROOF_SRC)/rules.mk; \
	gcc --version 2>/dev/null | head -n 1; dpkg-query -W -f '$${Version}' libc6 2>/dev/null; } | sha256sum | cut -c1-12)
PROOF_IMAGE_TAR := $(STANDIN_IMAGES_DIR)/proof-$(PROOF_KEY).tar
STANDIN_IMAGE_TARS += $(PROOF_IMAGE_TAR)

.PHONY: proof-image proof-image-tar
proof-image: $(PROOF_IMAGE_TAR)

# Where it is and what it is called (tests ask: tests/integration/test_nvidia_runtime.py)
proof-image-tar:
	@echo $(PROOF_IMAGE_TAR) $(PROOF_IMAGE)

$(PROOF_IMAGE_TAR):
	@test -n "$(PROOF_CUDA_VERSION)" || { echo "proof-image: no CUDA version in PROOF_IMAGE '$(PROOF_IMAGE)'" >&2; exit 1; }
	nice -n 10 $(PROOF_SRC)/build_image.sh --image $(PROOF_IMAGE) --cuda $(PROOF_CUDA_VERSION) --out $@
	@# the archives of other keys are stale: the loader would import an old proof beside this one
	find $(STANDIN_IMAGES_DIR) -maxdepth 1 -name 'proof-*.tar' ! -name '$(notdir $@)' -delete

# The kubelet nodes' loader directory (sandbox/kubelet/README.md, "Plugging a stand-in image in"; its rules.mk is
# included before this one): the proof image goes there as proof.tar, so every kubelet node's containerd and docker
# have it and the proof Job runs it with IfNotPresent
ifneq ($(KUBELET_IMAGE_DIR),)
.PHONY: proof-image-loader
kubelet-images: proof-image-loader
proof-image-loader: $(PROOF_IMAGE_TAR)
	@mkdir -p $(KUBELET_IMAGE_DIR)
	@cmp -s $< $(KUBELET_IMAGE_DIR)/proof.tar || cp -f $< $(KUBELET_IMAGE_DIR)/proof.tar
endif
