# SPDX-License-Identifier: GPL-3.0-or-later
# The stand-in of NVIDIA's DRA GPU kubelet plugin and its image (README.md beside this file). Included by the
# top-level Makefile (ROOT, CACHE_DIR; KUBELET_IMAGE_DIR from sandbox/kubelet/rules.mk, included before this one).
#   make draplugin-image   the image tagged as NVIDIA's, cached by key under $(CACHE_DIR)/draplugin/<key>, and its
#                          tar in the kubelet nodes' loader directory as draplugin.tar

.PHONY: draplugin-image
draplugin-image: docker-engine
	@CACHE_DIR=$(CACHE_DIR) $(ROOT)/sandbox/draplugin/build.sh $(if $(KUBELET_IMAGE_DIR),--copy-to $(KUBELET_IMAGE_DIR)) >/dev/null

ifneq ($(KUBELET_IMAGE_DIR),)
kubelet-images: draplugin-image
endif
