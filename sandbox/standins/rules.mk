# SPDX-License-Identifier: GPL-3.0-or-later
# The sandbox's stand-in images (sandbox/standins/README.md). Included by the top-level Makefile.
#
#   make standin-images   every stand-in image, tagged as the collection's manifests name the vendors' images, from the
#                         cache when its inputs did not change; one image tar of them all in STANDIN_IMAGES_DIR
#   make standins-test    the stand-in device plugin's tests (no kubelet, no container) and the image in a container

# The directory of stand-in image tars that the node image loader imports into each kubelet node (one tar per producer
# and key; sandbox/proof's rules.mk names the same), and the tars of this key (a recursive variable: the key is asked
# of images.py, which reads the venv's versions, only where a rule uses it)
STANDIN_IMAGES_DIR ?= $(CACHE_DIR)/standin-images
STANDINS_KEY = $(shell $(PY) sandbox/standins/images.py key 2>/dev/null)
STANDIN_IMAGE_TARS += $(STANDIN_IMAGES_DIR)/standins-$(STANDINS_KEY).tar

.PHONY: standin-images standins-test
standin-images: docker-engine venv
	nice -n 10 $(PY) sandbox/standins/images.py --cache-dir $(CACHE_DIR) --build-dir $(BUILD)/standin-images \
	  --out-dir $(STANDIN_IMAGES_DIR) ensure

standins-test: venv fakenvml
	FAKENVML_BUILD_DIR=$(BUILD)/fakenvml STANDIN_IMAGES_DIR=$(STANDIN_IMAGES_DIR) $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) \
	  tests/sandbox/test_standin_deviceplugin.py tests/sandbox/test_standin_images.py
