# SPDX-License-Identifier: GPL-3.0-or-later
# The sandbox's stand-in images (sandbox/standins/README.md). Included by the top-level Makefile.
#
#   make standin-images   every stand-in image, tagged as the collection's manifests name the vendors' images, from the
#                         cache when its inputs did not change; one image tar of them all in STANDIN_IMAGES_DIR
#   make standins-kubeletcheck   the kubelet's own device plugin code as a Go program, for the tests
#   make standins-test    the stand-in device plugin's tests (no kubelet, no container) and the image in a container

# The directory of stand-in image tars that the node image loader imports into each kubelet node (one tar per producer
# and key; sandbox/proof's rules.mk names the same), and the tars of this key (a recursive variable: the key is asked
# of standin_images.py, which reads the venv's versions, only where a rule uses it)
STANDIN_IMAGES_DIR ?= $(CACHE_DIR)/standin-images
STANDINS_KEY = $(shell $(PY) sandbox/standins/standin_images.py key 2>/dev/null)
STANDIN_IMAGE_TARS += $(STANDIN_IMAGES_DIR)/standins-$(STANDINS_KEY).tar

.PHONY: standin-images standins-kubeletcheck standins-test
standin-images: docker-engine venv
	nice -n 10 $(PY) sandbox/standins/standin_images.py --cache-dir $(CACHE_DIR) --build-dir $(BUILD)/standin-images \
	  --out-dir $(STANDIN_IMAGES_DIR) $(if $(KUBELET_IMAGE_DIR),--copy-to $(KUBELET_IMAGE_DIR)) ensure

# Where the kubelet nodes' image loader reads its own directory (sandbox/kubelet/rules.mk's KUBELET_IMAGE_DIR, when
# that slice is there: its rules.mk is included before this one), the tar goes there too, as standins.tar, and the
# loader's target builds it first (sandbox/kubelet/README.md "Plugging a stand-in image in")
ifneq ($(KUBELET_IMAGE_DIR),)
kubelet-images: standin-images
endif

# The kubelet's own device plugin code (k8s.io/kubernetes, the sandbox's version) as a small Go program the stand-in
# plugin's tests run; cached by key under $(CACHE_DIR)/standins-kubeletcheck (about 1.5 min cold, with the control
# plane's module and build caches warm)
standins-kubeletcheck:
	@CACHE_DIR=$(CACHE_DIR) sandbox/standins/kubeletcheck/build.sh >/dev/null

standins-test: venv fakenvml standins-kubeletcheck
	FAKENVML_BUILD_DIR=$(BUILD)/fakenvml STANDIN_IMAGES_DIR=$(STANDIN_IMAGES_DIR) $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) \
	  tests/sandbox/test_standin_deviceplugin.py tests/sandbox/test_standin_images.py
