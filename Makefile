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
