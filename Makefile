# kubegpu.cluster: two commands for a fresh machine are `make demo` and `make test`.
# Every install step lives here or in the sandbox/*/rules.mk files included below.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
CACHE_DIR ?= $(HOME)/.cache/kubegpu
# The venv is built once per set of pins and Python version, under the cache, and .venv links to it: a fresh clone
# reuses it. Its key is every file pip or `ansible-test units --requirements` installs from (the latter adds to it).
VENV_INPUTS := requirements.txt requirements-test.txt tests/unit/requirements.txt
VENV_KEY := $(shell { python3 -c 'import sys; print(sys.version)'; cat $(VENV_INPUTS); } | sha256sum | cut -c1-16)
VENV_CACHE := $(CACHE_DIR)/venv/$(VENV_KEY)
VENV := $(ROOT)/.venv
PY := $(VENV)/bin/python
BUILD := $(ROOT)/.build
SANDBOX := $(ROOT)/.sandbox
# The fleet containers' fake NVML MIG state, one directory per node: nodes-up mounts it, sandbox-up's kwok nodes name it
MIG_STATE := $(SANDBOX)/fake-nvml

help:
	@echo "make demo   - set up everything and run the bring-up on the simulated fleet"
	@echo "make test   - set up everything and run every test"
	@echo "make clean  - remove the sandbox (containers, control plane, .sandbox/ and .build/)"

# --- Debian packages the sandbox needs on this machine (Docker itself: see docker-engine in sandbox/images)
HOST_PACKAGES := debootstrap gcc make pkg-config libjansson-dev rsync git openssl shellcheck python3-venv
# The one apt install loop (what is not installed yet, in one apt-get run): $(APT_ENSURE) WHO PKG...
APT_ENSURE := $(ROOT)/sandbox/apt_ensure.sh
.PHONY: host-packages
host-packages:
	@$(APT_ENSURE) host-packages $(HOST_PACKAGES)

# Go builds of the sandbox's peers (the rules.mk files): module and build caches under the cache, and a TMPDIR of
# their own. cgo compiles its probes of a package's C types there, and a stray header in /tmp (an nvml.h left by any
# other program) is then included instead of go-nvml's own: "could not determine what C.nvml... refers to".
GO_TMP := $(CACHE_DIR)/go/tmp
GO_ENV := TMPDIR=$(GO_TMP) GOMODCACHE=$(CACHE_DIR)/go/mod GOCACHE=$(CACHE_DIR)/go/build

# Area rules (fake NVML, node images, control plane) live beside their sources.
include $(sort $(wildcard sandbox/*/rules.mk))

# A containerd 1.7 binary, the judge of the DRA host checks where CDI is behind enable_cdi (tests/integration/
# test_dra_host_prep.py, test_dra_role_host.py). `go install <pkg>@<version>` refuses its go.mod (exclude directives),
# so the module's source is copied out of the module cache and built there. Cached by version (65 s cold).
CONTAINERD17_VERSION := 1.7.35
CONTAINERD17_BIN := $(CACHE_DIR)/containerd/$(CONTAINERD17_VERSION)/bin/containerd
.PHONY: containerd17
containerd17: $(CONTAINERD17_BIN)

$(CONTAINERD17_BIN):
	mkdir -p $(dir $@) $(GO_TMP)
	$(GO_ENV) GOFLAGS=-mod=mod go mod download github.com/containerd/containerd@v$(CONTAINERD17_VERSION)
	src=$$(mktemp -d $(GO_TMP)/containerd17.XXXXXX) && \
	  cp -r $(CACHE_DIR)/go/mod/github.com/containerd/containerd@v$(CONTAINERD17_VERSION)/. $$src && chmod -R u+w $$src && \
	  (cd $$src && $(GO_ENV) GOFLAGS=-mod=mod nice -n 10 go build -trimpath -ldflags='-s -w' -o $@.tmp ./cmd/containerd); \
	  rc=$$?; rm -rf $$src; test $$rc -eq 0
	$@.tmp --version | grep -q ' $(CONTAINERD17_VERSION)' && mv $@.tmp $@

# --- Python environment (pinned in requirements*.txt) and the collection on Ansible's path
# Built where it stays (a venv's scripts name their own path), one build at a time (flock: two clones may ask at
# once), and only marked done when pip finished: a half-built one is made again.
$(VENV_CACHE)/.stamp: | host-packages
	@mkdir -p $(CACHE_DIR)/venv; exec 9>$(VENV_CACHE).lock; flock -w 900 9; \
	if [ -f $@ ]; then exit 0; fi; \
	echo "venv: building $(VENV_CACHE) (key: Python $$(python3 -c 'import platform; print(platform.python_version())') and $(VENV_INPUTS))"; \
	rm -rf $(VENV_CACHE) && python3 -m venv $(VENV_CACHE) && \
	$(VENV_CACHE)/bin/pip install -q --upgrade pip && \
	$(VENV_CACHE)/bin/pip install -q -r requirements-test.txt && \
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
# .venv is a link to the cached venv of the current key (a directory left by an older checkout is replaced)
venv: $(VENV_CACHE)/.stamp $(COLLECTION_LINK)
	@if [ "$$(readlink $(VENV) 2>/dev/null)" != "$(VENV_CACHE)" ]; then rm -rf $(VENV) && ln -sfn $(VENV_CACHE) $(VENV); fi

# --- Static checks: ansible-test needs the collection at a real ansible_collections/NS/NAME path, so it runs on a copy
SANITY_TREE := $(BUILD)/sanity/ansible_collections/kubegpu/cluster
.PHONY: sanity-tree sanity lint
sanity-tree: venv
	rm -rf $(SANITY_TREE) && mkdir -p $(SANITY_TREE)
	git ls-files -z --cached --others --exclude-standard | rsync -a --from0 --files-from=- ./ $(SANITY_TREE)/

# ansible-test builds a virtualenv per sanity test and seeds pip with a script it downloads from a host that is not
# reachable here; tests/sanity/pip_bootstrap.py stands in for that script (see its docstring).
sanity: sanity-tree
	v=$$(grep -ho "pip='[0-9.]*'" $(VENV)/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py | grep -o '[0-9.]*'); \
	test -n "$$v" || { echo "sanity: cannot tell which pip version ansible-test bootstraps" >&2; exit 1; }; \
	mkdir -p $(HOME)/.ansible/test/cache && cp tests/sanity/pip_bootstrap.py $(HOME)/.ansible/test/cache/get_pip_$${v//./_}.py
	cd $(SANITY_TREE) && git init -q && git add -A && \
	  $(VENV)/bin/ansible-test sanity --local --python 3.11 --color no $(SANITY_ARGS)

lint: venv
	$(VENV)/bin/yamllint -s .
	$(VENV)/bin/ansible-lint --profile production --offline

# ansible-test units on the same copy, for the collection's own tests (tests/unit/plugins; tests/sandbox tests the
# sandbox, which is not part of the collection, and runs in the pytest run). --requirements installs ansible-test's
# units.txt and tests/unit/requirements.txt (pinned like requirements*.txt) into the venv; nothing is bootstrapped.
.PHONY: units
units: sanity-tree
	cd $(SANITY_TREE) && git init -q && git add -A && \
	  $(VENV)/bin/ansible-test units --local --python 3.11 --requirements --color no $(UNITS_ARGS) tests/unit/plugins/

# --- Changelog: until a release, changes are fragments (changelogs/fragments). `make changelog` lints them and renders
# the release notes they make, on a copy, since a release rewrites changelogs/changelog.yaml and deletes the fragments:
# .build/changelog/CHANGELOG.rst. At release time only, `make release-notes` records the release of galaxy.yml's
# version for real (changelogs/changelog.yaml, CHANGELOG.rst, fragments removed): commit that, then tag and build.
CHANGELOG_TREE := $(BUILD)/changelog/ansible_collections/kubegpu/cluster
.PHONY: changelog release-notes
changelog: venv
	$(VENV)/bin/antsibull-changelog lint
	rm -rf $(CHANGELOG_TREE) && mkdir -p $(CHANGELOG_TREE)
	git ls-files -z --cached --others --exclude-standard | rsync -a --from0 --files-from=- ./ $(CHANGELOG_TREE)/
	cd $(CHANGELOG_TREE) && $(VENV)/bin/antsibull-changelog release --reload-plugins
	$(PY) -m docutils --halt=warning $(CHANGELOG_TREE)/CHANGELOG.rst /dev/null
	cp $(CHANGELOG_TREE)/CHANGELOG.rst $(BUILD)/changelog/CHANGELOG.rst
	@echo "changelog: the release notes the fragments make are in $(BUILD)/changelog/CHANGELOG.rst"

release-notes: venv
	$(VENV)/bin/antsibull-changelog lint
	$(VENV)/bin/antsibull-changelog release --reload-plugins

# --- The collection as users get it: `ansible-galaxy collection build`, installed offline into .build/artifact.
# `make demo` runs the bring-up from there, so the demo proves the built artifact, not this working tree.
ARTIFACT_COLLECTIONS := $(BUILD)/artifact
.PHONY: artifact
artifact: venv
	rm -rf $(BUILD)/dist $(ARTIFACT_COLLECTIONS) && mkdir -p $(BUILD)/dist
	$(VENV)/bin/ansible-galaxy collection build --force --output-path $(BUILD)/dist . >/dev/null
	ANSIBLE_COLLECTIONS_PATH=$(ARTIFACT_COLLECTIONS) $(VENV)/bin/ansible-galaxy collection install --offline --no-deps --force \
	  -p $(ARTIFACT_COLLECTIONS) $(BUILD)/dist/kubegpu-cluster-*.tar.gz >/dev/null
	@echo "artifact: $$(ls $(BUILD)/dist/kubegpu-cluster-*.tar.gz) ($$(du -k $(BUILD)/dist/kubegpu-cluster-*.tar.gz | cut -f1) KiB), installed in $(ARTIFACT_COLLECTIONS)"

# --- Fake PCI buses of the fleet's nodes (sandbox/images/fake_pci.py), also mounted by the molecule scenarios
.PHONY: fake-pci
fake-pci: venv
	$(PY) sandbox/images/fake_pci.py --fleet sandbox/fleet.yml --profiles sandbox/profiles --out $(SANDBOX)/pci >/dev/null

# --- Benchmark, not a test (benchmarks/README.md): the bring-up's rerun against its first run on the sandbox fleet
# (RERUN_ARGS, e.g. --sizes 7,14,28; it replaces the fleet's node containers), then labels + rollout wait on 500 kwok
# nodes, ours against a naive loop (BENCHMARK_ARGS); prints both ratios at the end.
.PHONY: benchmark
benchmark: venv k8s-binaries node-images apt-repo
	mkdir -p $(BUILD)/benchmark
	CACHE_DIR=$(CACHE_DIR) $(PY) benchmarks/rerun.py --out $(BUILD)/benchmark/rerun.json $(RERUN_ARGS)
	CACHE_DIR=$(CACHE_DIR) $(PY) benchmarks/labels_rollout.py --out $(BUILD)/benchmark/labels-rollout.json $(BENCHMARK_ARGS)
	$(PY) benchmarks/summary.py $(BUILD)/benchmark/rerun.json $(BUILD)/benchmark/labels-rollout.json

# --- The two commands
.PHONY: demo test test-setup test-static test-molecule test-python clean
demo: venv fakenvml node-images nodes-up sandbox-up artifact
	ANSIBLE_COLLECTIONS_PATH=$(ARTIFACT_COLLECTIONS) \
	  $(VENV)/bin/ansible-playbook -i $(SANDBOX)/inventory -i sandbox/inventory/k8s_api.yml sandbox/demo.yml
	@echo; cat $(SANDBOX)/demo-report.txt
	@echo; echo "The same as JSON: $(SANDBOX)/demo-summary.json"
	ANSIBLE_COLLECTIONS_PATH=$(ARTIFACT_COLLECTIONS) $(VENV)/bin/ansible-playbook -i $(SANDBOX)/inventory \
	  -i sandbox/inventory/k8s_api.yml sandbox/demo_audit.yml -e audit_report_dir=$(SANDBOX)/audit >$(SANDBOX)/audit.log \
	  || { tail -40 $(SANDBOX)/audit.log; exit 1; }
	@echo; echo "The fleet audit ($(SANDBOX)/audit/audit.json; log $(SANDBOX)/audit.log; docs/audit.md):"
	@cat $(SANDBOX)/audit/audit.txt

# --- make test: the set-up, then the stages on both cores, every stage timed (tools/stages.py: each stage's log in
# .build/stages/, the table of wall times at the end and in .build/stage-times.txt). Two workers take groups from one
# queue, longest first by the last run's times; a group's stages run one after the other. tests/README.md has the plan:
# what each stage tests, and why any two groups can run side by side (no shared container names, ports or state
# directories: each pytest stage has a control plane of its own, TEST_STATE_DIR; only pytest-sandbox uses the fleet's
# containers; molecule's containers are named per scenario, its control planes live in molecule's own directories;
# sanity and units share .build/sanity and are one group). A stage runs alone after the set-up: `make test-setup pytest-k8s-a`.
TEST_SETUP := host-packages venv fakenvml check-profiles fake-pci nvidia-runtime apt-repo k8s-binaries containerd2 containerd17 nvidia-ctk \
	nvlibprobe node-images kubelet-ready standin-images standins-kubeletcheck proof-image
MOLECULE_SCENARIOS := $(notdir $(patsubst %/,%,$(dir $(wildcard molecule/*/molecule.yml))))
TEST_PYTEST := pytest-k8s-a pytest-k8s-b pytest-integration pytest-sandbox pytest-unit
# the other ansible-core versions meta/runtime.yml claims: a stage each (pytest-ansible-<minor>, below)
ANSIBLE_CORE_MINORS := $(patsubst tests/ansible-core/%.txt,%,$(wildcard tests/ansible-core/*.txt))
TEST_ANSIBLE_CORE := $(addprefix pytest-ansible-,$(ANSIBLE_CORE_MINORS))
# Each a group of its own, but sanity+units (one after the other: they share .build/sanity). On a clone that has no timing yet, the queue
# keeps this order: longest first, as last measured (docs/benchmarks.md).
TEST_GROUPS := pytest-k8s-a pytest-k8s-b pytest-integration molecule-container_toolkit $(TEST_ANSIBLE_CORE) \
	molecule-default sanity+units molecule-driver_upgrade pytest-sandbox lint molecule-mig molecule-gpu_driver \
	pytest-unit changelog faults-smoke
STAGES := python3 $(ROOT)/tools/stages.py --log-dir $(BUILD)/stages --table $(BUILD)/stage-times.txt \
	--history $(CACHE_DIR)/stage-times.json --after-stop stage-stopped

test:
	@$(STAGES) --serial test-setup $(foreach g,$(TEST_GROUPS),--group $(g))

test-setup: $(TEST_SETUP)

# What a stage stopped part way left (tools/stages.py --after-stop; SIGTERM reaches its process group, not what it
# started in sessions of its own): a molecule scenario's containers and control plane (its destroy), and the control
# planes under the pytest stage's state directories. A run stopped by a failure left a scenario's control plane
# running for the next runs.
.PHONY: stage-stopped
stage-stopped: venv
	@case "$(STAGE)" in molecule-*) \
	  KUBELET_IMAGE_DIR=$(KUBELET_IMAGE_DIR) $(VENV)/bin/molecule destroy -s $(patsubst molecule-%,%,$(STAGE)) || true;; esac
	@for state in $$(find $(SANDBOX) -path '$(SANDBOX)/test-k8s-$(STAGE)*' -name state.json 2>/dev/null); do \
	  dir=$$(dirname $$state); echo "stage-stopped: $$dir"; \
	  $(PY) -m sandbox.k8s --state-dir $$dir --kubeconfig $$dir/kubeconfig down || true; done

# One after the other, for a developer's machine that should run one stage at a time (CI runs `make test`)
test-static: venv sanity lint units changelog
test-molecule: test-setup $(addprefix molecule-,$(MOLECULE_SCENARIOS))
test-python: test-setup $(TEST_PYTEST) $(TEST_ANSIBLE_CORE)

.PHONY: $(addprefix molecule-,$(MOLECULE_SCENARIOS)) $(TEST_PYTEST)
# a static pattern rule: make looks for no implicit rule for a phony target, so `molecule-%:` alone would do nothing
$(addprefix molecule-,$(MOLECULE_SCENARIOS)): molecule-%: venv
	KUBELET_IMAGE_DIR=$(KUBELET_IMAGE_DIR) $(VENV)/bin/molecule test -s $*

# pytest by folder. No test depends on what ran before it (`make demo` first, say): each stage's control plane is its
# own (TEST_STATE_DIR, tests/conftest.py), never the demo's, and the fleet's containers are made afresh for
# pytest-sandbox (nodes-fresh) and taken down afterwards whatever the result. tests/unit/plugins, the collection's own
# unit tests, run once, in `ansible-test units` (make units); pytest-unit runs the rest of tests/unit.
PYTEST_ENV = KUBEGPU_REQUIRE_SETUP=1 FAKENVML_BUILD_DIR=$(BUILD)/fakenvml CONTAINERD2=$(CONTAINERD2_BIN) CONTAINERD17=$(CONTAINERD17_BIN) \
	NVIDIA_CTK=$(NVIDIA_CTK_BIN) NVLIBPROBE=$(NVLIBPROBE_BIN) KUBELET_IMAGE_DIR=$(KUBELET_IMAGE_DIR) \
	TEST_STATE_DIR=$(SANDBOX)/test-k8s-$@
PYTEST = $(PYTEST_ENV) $(PY) -m pytest -p no:cacheprovider --durations=10 $(PYTEST_ARGS)

pytest-unit: venv
	$(PYTEST) tests/unit --ignore=tests/unit/plugins

# The modules against the control plane, the longest stage: two halves, each with its own control plane, so that the
# two workers share it. The first half names its files; the second is everything else (a new file lands there).
PYTEST_K8S_A := $(addprefix tests/integration/k8s/,test_device_plugin_deploy.py test_device_plugin_outage.py \
	test_gpu_node_labels.py test_gpu_node_maintenance.py test_gpu_validation_role.py)
pytest-k8s-a: venv
	$(PYTEST) $(PYTEST_K8S_A)

pytest-k8s-b: venv
	$(PYTEST) tests/integration/k8s tests/sandbox/k8s $(addprefix --ignore=,$(PYTEST_K8S_A))

pytest-integration: venv
	$(PYTEST) tests/integration --ignore=tests/integration/k8s

# The other ansible-core versions meta/runtime.yml claims (the venv has the newest): a venv each, built once under
# the cache like the main one (key: Python, tests/ansible-core/<minor>.txt, requirements.txt and the test runner's pins),
# and the module and role tests that run through the ansible command line on it. tests/unit/test_ansible_versions.py
# keeps requires_ansible and these files in step.
ANSIBLE_CORE_TEST_PINS = $(shell grep -E '^(pytest|pytest-testinfra|hypothesis|PyYAML)==' requirements-test.txt)
ANSIBLE_CORE_VENV = $(CACHE_DIR)/venv/ansible-core-$(1)-$(shell { python3 -c 'import sys; print(sys.version)'; \
	cat tests/ansible-core/$(1).txt requirements.txt; echo $(ANSIBLE_CORE_TEST_PINS); } | sha256sum | cut -c1-16)
# The roles' tests (where templating differs between versions: 2.17 and 2.18 read a quoted \' and a none apart from
# 2.19) and gpu_facts through the command line, as a module's
ANSIBLE_CORE_TESTS := tests/integration/test_gpu_driver_role.py tests/integration/test_role_option_checks.py \
	tests/integration/test_kubespray_guard.py tests/integration/test_python_env_check.py \
	tests/integration/test_container_toolkit_restart.py tests/integration/test_nano_gpu_host_role.py \
	tests/integration/k8s/test_gpu_validation_role.py tests/integration/test_gpu_facts_end_to_end.py
# ...but not the restart test whose subject is systemd's start-rate limit (about 20 s a version): the role's tasks it
# runs are the other restart tests' (the restart, its watch, the rollback), which run here
ANSIBLE_CORE_DESELECT := tests/integration/test_container_toolkit_restart.py::test_restarts_asked_for_on_purpose_are_not_refused_by_the_start_rate_limit
.PHONY: $(TEST_ANSIBLE_CORE)

$(TEST_ANSIBLE_CORE): pytest-ansible-%: venv
	@venv=$(call ANSIBLE_CORE_VENV,$*); exec 9>$$venv.lock; flock -w 900 9; \
	if [ ! -f $$venv/.stamp ]; then \
	  echo "venv: building $$venv (ansible-core $*)"; \
	  rm -rf $$venv && python3 -m venv $$venv && $$venv/bin/pip install -q --upgrade pip && \
	  $$venv/bin/pip install -q -r tests/ansible-core/$*.txt -r requirements.txt $(ANSIBLE_CORE_TEST_PINS) && \
	  touch $$venv/.stamp; \
	fi; \
	exec 9>&-; $$venv/bin/python -c 'import ansible.release as r; print("ansible-core", r.__version__)'; \
	$(PYTEST_ENV) PATH=$$venv/bin:$$PATH $$venv/bin/python -m pytest -p no:cacheprovider --durations=5 $(PYTEST_ARGS) \
	  $(ANSIBLE_CORE_TESTS) $(addprefix --deselect ,$(ANSIBLE_CORE_DESELECT))

# The fault suite (tests/faults/README.md, issue 28): each fault injected into the sandbox, trials seeded, a table of
# what survived written to docs/reliability.md. Not part of `make test` (about an hour: killed-play and api-server-gone
# about 25 minutes, etcd-gone 16, lost-node 12); its smoke subset is, as the
# stage faults-smoke (tests/faults/test_faults_smoke.py: its two tests side by side, -n 2, each mostly waits on daemons
# and a control plane's recovery; tests/faults/README.md has its cost). Replay: make faults SEED=<seed> FAULT=<fault> ONLY=<trial>.
FAULTS_ARGS = $(if $(SEED),--seed $(SEED)) $(if $(FAULT),--fault $(FAULT)) $(if $(ONLY),--only $(ONLY)) \
	$(if $(TRIALS),--trials $(TRIALS)) $(if $(or $(ONLY),$(TRIALS)),,--report docs/reliability.md)
.PHONY: faults
faults: venv apt-repo node-images k8s-binaries
	FAULTS_STATE_DIR=$(SANDBOX)/faults-k8s $(PY) tests/faults/run.py $(FAULTS_ARGS)

.PHONY: faults-smoke
faults-smoke: venv apt-repo node-images k8s-binaries
	$(PYTEST_ENV) $(if $(SEED),FAULTS_SEED=$(SEED)) $(PY) -m pytest -p no:cacheprovider --durations=5 -n 2 $(PYTEST_ARGS) tests/faults

pytest-sandbox: venv
	$(MAKE) --no-print-directory nodes-fresh
	status=0; $(PYTEST) tests/sandbox --ignore=tests/sandbox/k8s || status=$$?; \
	  $(MAKE) --no-print-directory nodes-down >/dev/null; exit $$status

clean:
	-$(MAKE) --no-print-directory nodes-down
	-$(MAKE) --no-print-directory sandbox-down
	rm -rf $(SANDBOX) $(BUILD)
