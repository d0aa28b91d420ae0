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

# Cached under $(CACHE_DIR)/fakenvml/<key>, the key a hash of the sources and the compiler: a fresh clone copies the
# library in (touched, so that the area's Makefile, which the tests also run, finds it newer than the sources).
FAKENVML_KEY = $(shell { cc --version 2>/dev/null | head -1; cd $(FAKENVML_SRC) && cat *.c *.h exports.map Makefile; } \
	| sha256sum | cut -c1-16)
fakenvml:
	@key=$(FAKENVML_KEY); cached=$(CACHE_DIR)/fakenvml/$$key; \
	if [ -f $$cached/libnvidia-ml.so.1 ]; then \
	  mkdir -p $(FAKENVML_BUILD) && cp -f $$cached/libnvidia-ml.so.1 $(FAKENVML_BUILD)/ && touch $(FAKENVML_LIB) && \
	  ln -sf libnvidia-ml.so.1 $(FAKENVML_BUILD)/libnvidia-ml.so; \
	  echo "fakenvml: $(FAKENVML_LIB) from the cache ($$key)"; \
	else \
	  $(MAKE) --no-print-directory -C $(FAKENVML_SRC) BUILD_DIR=$(FAKENVML_BUILD) && \
	  mkdir -p $$cached && cp -f $(FAKENVML_LIB) $$cached/libnvidia-ml.so.1.tmp && \
	  mv -f $$cached/libnvidia-ml.so.1.tmp $$cached/libnvidia-ml.so.1; \
	fi

fakenvml-check-profiles:
	$(FAKENVML_PY) $(FAKENVML_SRC)/check_profiles.py $(FAKENVML_PROFILES)

check-profiles: fakenvml-check-profiles

fakenvml-test: fakenvml fakenvml-check-profiles
	FAKENVML_BUILD_DIR=$(FAKENVML_BUILD) $(PY) -m pytest $(ROOT)/tests/sandbox/test_fake_nvml.py \
		$(ROOT)/tests/sandbox/test_fake_nvml_mig_write.py -q

fakenvml-clean:
	$(MAKE) -C $(FAKENVML_SRC) BUILD_DIR=$(FAKENVML_BUILD) clean
