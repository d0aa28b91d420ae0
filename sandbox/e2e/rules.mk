# SPDX-License-Identifier: GPL-3.0-or-later
# The end-to-end proof on kubelet nodes (issue 24; README.md beside this file, tests/sandbox/test_kubelet_gpu_e2e.py).
# Included by the top-level Makefile.
#
#   make proof-image-loader   the proof image's archive (sandbox/proof) in the kubelet nodes' loader directory
#                             (sandbox/kubelet: KUBELET_IMAGE_DIR; every *.tar there goes into every kubelet node) as
#                             proof.tar, a hard link (else a copy), so gpu_proof's Job finds the image on a kubelet
#                             node with IfNotPresent. kubelet-images (so sandbox-up and test-setup) makes it first.
#   make e2e-test             the test alone (after test-setup)
#
# The recipe reads KUBELET_IMAGE_DIR and PROOF_IMAGE_TAR when it runs: this file is read before sandbox/kubelet's and
# sandbox/proof's (the Makefile includes rules.mk files in name order).

.PHONY: proof-image-loader e2e-test
kubelet-images: proof-image-loader

proof-image-loader: proof-image
	@mkdir -p $(KUBELET_IMAGE_DIR); \
	if ! cmp -s $(PROOF_IMAGE_TAR) $(KUBELET_IMAGE_DIR)/proof.tar; then \
	  ln -f $(PROOF_IMAGE_TAR) $(KUBELET_IMAGE_DIR)/proof.tar.tmp 2>/dev/null \
	    || cp $(PROOF_IMAGE_TAR) $(KUBELET_IMAGE_DIR)/proof.tar.tmp; \
	  mv -f $(KUBELET_IMAGE_DIR)/proof.tar.tmp $(KUBELET_IMAGE_DIR)/proof.tar; \
	  echo "proof-image-loader: $(PROOF_IMAGE_TAR) -> $(KUBELET_IMAGE_DIR)/proof.tar"; \
	fi

e2e-test: venv
	$(PYTEST_ENV) $(PY) -m pytest -p no:cacheprovider --durations=10 $(PYTEST_ARGS) tests/sandbox/test_kubelet_gpu_e2e.py
