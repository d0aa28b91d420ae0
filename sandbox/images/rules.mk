# SPDX-License-Identifier: GPL-3.0-or-later
# Simulated GPU node images and the Docker engine they run on. Included by the top-level Makefile,
# which defines ROOT, VENV, PY, BUILD, SANDBOX, CACHE_DIR and the venv target.
#
#   make docker-engine   a working Docker engine (installs docker.io/containerd/runc and starts dockerd if needed)
#   make node-images     kubegpu/node:{base,gpu,nodriver}, from the cache when the inputs did not change
#   make nodes-up        the fleet of sandbox/fleet.yml as systemd containers + $(SANDBOX)/inventory/nodes.yml
#   make nodes-fresh     nodes-down, then nodes-up: the fleet as the images make it
#   make nodes-down      removes every container labelled kubegpu.sandbox=1
#   make nodes-test      tests/sandbox/test_node_images.py against the running fleet

IMAGES_DIR := $(ROOT)/sandbox/images
IMAGES_CACHE := $(CACHE_DIR)/images
IMAGES_DOCKERD_LOG := $(SANDBOX)/dockerd.log
IMAGES_ENGINE_TIMEOUT ?= 60
IMAGES_INVENTORY := $(SANDBOX)/inventory/nodes.yml
IMAGES_PLAYBOOK = ANSIBLE_LOCALHOST_WARNING=false ANSIBLE_INVENTORY_UNPARSED_WARNING=false \
	$(VENV)/bin/ansible-playbook $(IMAGES_DIR)/nodes.yml \
	-e nodes_root=$(ROOT) -e nodes_sandbox_dir=$(SANDBOX) -e nodes_mig_state_dir=$(MIG_STATE) $(NODES_ARGS)

.PHONY: docker-engine node-images nodes-up nodes-fresh nodes-down nodes-test

# Poll `docker info` (bounded) rather than sleeping a fixed time; a dockerd that dies early ends the wait.
docker-engine:
	@if docker info >/dev/null 2>&1; then exit 0; fi; \
	$(APT_ENSURE) docker-engine docker.io containerd runc; \
	if docker info >/dev/null 2>&1; then exit 0; fi; \
	mkdir -p $(SANDBOX); \
	pid=""; \
	if ! pgrep -x dockerd >/dev/null; then \
	  echo "docker-engine: starting dockerd (log: $(IMAGES_DOCKERD_LOG))"; \
	  setsid dockerd >>$(IMAGES_DOCKERD_LOG) 2>&1 </dev/null & pid=$$!; \
	fi; \
	why="did not answer within $(IMAGES_ENGINE_TIMEOUT) s"; \
	for i in $$(seq 1 $(IMAGES_ENGINE_TIMEOUT)); do \
	  docker info >/dev/null 2>&1 && exit 0; \
	  if [ -n "$$pid" ] && ! kill -0 $$pid 2>/dev/null; then why="exited"; break; fi; \
	  sleep 1; \
	done; \
	echo "docker-engine: dockerd $$why; last lines of $(IMAGES_DOCKERD_LOG):" >&2; \
	tail -n 20 $(IMAGES_DOCKERD_LOG) >&2 || true; \
	exit 1

# Cheap when the images of the current input key are loaded (seconds); `docker load` from
# $(IMAGES_CACHE) when only the engine is fresh; debootstrap + docker build otherwise.
node-images: docker-engine venv
	$(PY) $(IMAGES_DIR)/node_images.py --root $(ROOT) --cache-dir $(IMAGES_CACHE) --build-dir $(BUILD)/images ensure

nodes-up: node-images apt-repo venv
	$(IMAGES_PLAYBOOK) -e nodes_state=started

# The fleet as the images make it: containers left by an earlier run (the demo's, changed by its bring-up) go first.
nodes-fresh: node-images apt-repo venv
	$(IMAGES_PLAYBOOK) -e nodes_state=absent
	$(IMAGES_PLAYBOOK) -e nodes_state=started

nodes-down: venv
	@if ! docker info >/dev/null 2>&1; then echo "nodes-down: no Docker engine, no nodes"; exit 0; fi; \
	$(IMAGES_PLAYBOOK) -e nodes_state=absent

nodes-test: venv
	$(VENV)/bin/pytest -v tests/sandbox/test_node_images.py
