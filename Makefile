# kubegpu.cluster: two commands for a fresh machine are `make demo` and `make test`.
# Every install step lives here or in the sandbox/*/rules.mk files included below.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
CACHE_DIR ?= $(HOME)/.cache/kubegpu
BUILD := $(ROOT)/.build
SANDBOX := $(ROOT)/.sandbox

help:
	@echo "make demo   - set up everything and run the bring-up on the simulated fleet"
	@echo "make test   - set up everything and run every test"

# Area rules (fake NVML, node images, control plane) live beside their sources.
include $(sort $(wildcard sandbox/*/rules.mk))

# --- Python environment (pinned in requirements*.txt) and the collection on Ansible's path
$(VENV)/.stamp: requirements.txt requirements-test.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-test.txt
	touch $@

COLLECTIONS := $(BUILD)/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/kubegpu/cluster
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export PATH := $(VENV)/bin:$(PATH)

$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(ROOT) $@

.PHONY: venv
venv: $(VENV)/.stamp $(COLLECTION_LINK)
