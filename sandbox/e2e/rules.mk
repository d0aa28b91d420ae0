# SPDX-License-Identifier: GPL-3.0-or-later
# The end-to-end proof on kubelet nodes (issue 24; README.md beside this file, tests/sandbox/test_kubelet_gpu_e2e.py).
# Included by the top-level Makefile.
#
#   make e2e-test             the test alone (after test-setup)

.PHONY: e2e-test
e2e-test: venv
	$(PYTEST_ENV) $(PY) -m pytest -p no:cacheprovider --durations=10 $(PYTEST_ARGS) tests/sandbox/test_kubelet_gpu_e2e.py
