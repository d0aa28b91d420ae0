# SPDX-License-Identifier: GPL-3.0-or-later
# Fake NVML rules, included by the top-level Makefile (which defines ROOT, VENV, PY, BUILD).
#   make fakenvml                  build $(BUILD)/fakenvml/libnvidia-ml.so.1
#   make fakenvml-check-profiles   validate sandbox/profiles/*.json (alias: check-profiles)
#   make fakenvml-test             run tests/sandbox/test_fake_nvml.py and test_fake_nvml_mig_write.py with the real pynvml
#   make fakenvml-clean            remove the built library

FAKENVML_SRC := $(ROOT)/sandbox/fakenvml
FAKENVML_BUILD := $(BUILD)/fakenvml
FAKENVML_LIB := $(FAKENVML_BUILD)/libnvidia-ml.so.1
FAKENVML_PROFILES := $(ROOT)/sandbox/profiles
# the checker needs only the standard library: fall back to python3 before the venv exists
FAKENVML_PY = $(if $(wildcard $(PY)),$(PY),python3)

.PHONY: fakenvml fakenvml-check-profiles check-profiles fakenvml-test fakenvml-clean

fakenvml:
	$(MAKE) -C $(FAKENVML_SRC) BUILD_DIR=$(FAKENVML_BUILD)

fakenvml-check-profiles:
	$(FAKENVML_PY) $(FAKENVML_SRC)/check_profiles.py $(FAKENVML_PROFILES)

check-profiles: fakenvml-check-profiles

fakenvml-test: fakenvml fakenvml-check-profiles
	FAKENVML_BUILD_DIR=$(FAKENVML_BUILD) $(PY) -m pytest $(ROOT)/tests/sandbox/test_fake_nvml.py \
		$(ROOT)/tests/sandbox/test_fake_nvml_mig_write.py -q

fakenvml-clean:
	$(MAKE) -C $(FAKENVML_SRC) BUILD_DIR=$(FAKENVML_BUILD) clean
