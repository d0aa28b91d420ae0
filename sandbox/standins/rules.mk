# SPDX-License-Identifier: GPL-3.0-or-later
# The sandbox's stand-in images (sandbox/standins/README.md). Included by the top-level Makefile.
#
#   make standin-images   every stand-in image, tagged as the collection's manifests name the vendors' images, from the
#                         cache when its inputs did not change; the one image tar linked into NODE_IMAGE_TARS_DIR
#   make standins-test    the stand-in device plugin's tests (no kubelet, no container) and the image in a container

# The directory whose image tars the node image loader imports into each kubelet node (one tar per producer, linked
# from the cache): written here once, read by the loader.
NODE_IMAGE_TARS_DIR ?= $(SANDBOX)/node-image-tars

.PHONY: standin-images standins-test
standin-images: docker-engine venv
	nice -n 10 $(PY) sandbox/standins/images.py --cache-dir $(CACHE_DIR) --build-dir $(BUILD)/standin-images \
	  --link-dir $(NODE_IMAGE_TARS_DIR) ensure

standins-test: venv fakenvml
	FAKENVML_BUILD_DIR=$(BUILD)/fakenvml $(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) \
	  tests/sandbox/test_standin_deviceplugin.py tests/sandbox/test_standin_images.py
