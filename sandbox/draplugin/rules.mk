# SPDX-License-Identifier: GPL-3.0-or-later
# The stand-in of NVIDIA's DRA GPU kubelet plugin and its image (README.md beside this file). Included by the
# top-level Makefile (ROOT, CACHE_DIR; KUBELET_IMAGE_DIR from sandbox/kubelet/rules.mk, which is included after this
# one: the rules.mk files are included in name order, so KUBELET_IMAGE_DIR is read in recipes only, never at parse time).
#   make draplugin-image   the image tagged as NVIDIA's, cached by key under $(CACHE_DIR)/draplugin/<key>, and its
#                          tar in the kubelet nodes' loader directory as draplugin.tar

.PHONY: draplugin-image
# the base image first: the debootstrap root file system the stand-in images share (sandbox/images/node_images.py
# ensure_rootfs, as standin_images.py does; nothing when it is up to date)
draplugin-image: docker-engine venv
	@cd $(ROOT) && $(PY) -c 'import sys; from sandbox.images import node_images as n; n.ensure_rootfs(*sys.argv[1:], None)' \
	  $(CACHE_DIR)/images $(BUILD)/draplugin >/dev/null
	@CACHE_DIR=$(CACHE_DIR) $(ROOT)/sandbox/draplugin/build.sh $(if $(KUBELET_IMAGE_DIR),--copy-to $(KUBELET_IMAGE_DIR)) >/dev/null

kubelet-images: draplugin-image
