# SPDX-License-Identifier: GPL-3.0-or-later
"""The nano_gpu role's host part (kubegpu.cluster.nano_gpu_host) run by ansible-playbook against a systemd node
container (kubegpu/node:gpu, as the sandbox fleet's nodes start, reached through the docker connection): a GPU on a
fake PCI bus, docker running with "default-runtime": "nvidia", the toolkit's hook and its nvidia-container-toolkit
symlink (stand-ins), the toolkit's config.toml in legacy mode, and a kubeadm flags file naming cri-dockerd.

Proves, in one container (about 20 s): check mode writes nothing; the first run backs the two binaries up (the
symlink as a symlink) and writes the record container_toolkit reads; the second run changes nothing; what
nano-gpu-agent's installer does (tools/install.sh: the hook moved away, the toolkit renamed -bak, nano-gpu's copied
in, twice) is not backed up again; absent puts the host's own binaries back byte for byte with their modes and
removes the agent's leftovers, and a second absent changes nothing; a node whose kubelet runs on containerd and
whose toolkit is gone is refused with a message naming the host, each reason and what to do, and nothing written.
"""

import json
import os

import pytest

from node_container import NodeContainer

NODE = "kubegpu-nanogpu-host-%d" % os.getpid()
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.nano_gpu
        tasks_from: host
"""
# The node as a user leaves it after the driver and container toolkit stages (stand-ins for NVIDIA's files)
SETUP = r"""
set -eu
cat > /usr/bin/nvidia-container-runtime-hook <<'SH'
#!/bin/sh
# stand-in for NVIDIA's nvidia-container-runtime-hook (test)
exit 0
SH
chmod 0755 /usr/bin/nvidia-container-runtime-hook
ln -sf /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit
mkdir -p /etc/nvidia-container-runtime /var/lib/kubelet
printf '[nvidia-container-runtime]\nmode = "legacy"\n' > /etc/nvidia-container-runtime/config.toml
printf 'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/cri-dockerd.sock"\n' > /var/lib/kubelet/kubeadm-flags.env
printf '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}, "default-runtime": "nvidia"}\n' \
    > /etc/docker/daemon.json
systemctl restart docker
for _ in $(seq 60); do
    [ "$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null)" = nvidia ] && exit 0
    sleep 0.5
done
echo "docker did not come back with default runtime nvidia" >&2; exit 1
"""
# What nano-gpu-agent's installer does to the host (elastic-ai/elastic-gpu-agent tools/install.sh), run twice
AGENT = r"""
set -eu
for _ in 1 2; do
    rm -f /usr/bin/nvidia-container-runtime-hook
    mv /usr/bin/nvidia-container-toolkit /usr/bin/nvidia-container-toolkit-bak
    for f in nvidia-container-runtime-hook nvidia-container-toolkit mount_nano_gpu; do
        printf 'nano-gpu %s\n' "$f" > /usr/bin/$f; chmod 0700 /usr/bin/$f
    done
done
"""
SNAPSHOT = r"""
for f in /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit /usr/bin/nvidia-container-toolkit-bak \
         /usr/bin/mount_nano_gpu; do
    if [ -L "$f" ]; then echo "$f link $(readlink "$f")";
    elif [ -e "$f" ]; then echo "$f $(stat -c '%a %u:%g' "$f") $(sha256sum < "$f" | cut -c1-16)";
    else echo "$f none"; fi
done
ls /var/lib/kubegpu/nano-gpu 2>/dev/null || echo "no state"
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A systemd node container like the fleet's, with one NVIDIA GPU on its PCI bus."""
    pci = tmp_path_factory.mktemp("pci")
    gpu = pci / "0000:3b:00.0"
    gpu.mkdir()
    for name, value in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200"),
                        ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x134f")):
        (gpu / name).write_text(value + "\n")
    with NodeContainer(NODE, label="nano_gpu_host", volumes=["%s:/sys/bus/pci/devices:ro" % pci]) as container:
        container.run(SETUP)
        yield container


def run_role(node, tmp_path, check=False, **extra_vars):
    code, tasks = node.play(PLAYBOOK, tmp_path, check=check, diff=check, **extra_vars)
    (result,) = [r for name, r in tasks if name.endswith("or give it back")]
    return code, result


def test_backup_idempotence_agent_and_the_way_back(node, tmp_path):
    original = node.run(SNAPSHOT)
    assert "/usr/bin/nvidia-container-toolkit link /usr/bin/nvidia-container-runtime-hook" in original
    assert "no state" in original

    code, result = run_role(node, tmp_path, check=True)
    assert code == 0 and result["changed"], result
    assert result["checks"]["docker_source"] == "docker info" and result["checks"]["nvidia_gpus"] == 1
    assert node.run(SNAPSHOT) == original  # check mode wrote nothing

    code, result = run_role(node, tmp_path)
    assert code == 0 and result["changed"], result
    record = json.loads(node.run("cat /var/lib/kubegpu/nano-gpu/host.json"))
    assert record["binaries"]["/usr/bin/nvidia-container-toolkit"]["kind"] == "symlink"
    assert node.run("cmp /var/lib/kubegpu/nano-gpu/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-runtime-hook"
                    " && stat -c %a /var/lib/kubegpu/nano-gpu/bin/nvidia-container-runtime-hook").strip() == "755"

    code, result = run_role(node, tmp_path)
    assert code == 0 and not result["changed"], result

    node.run(AGENT)
    replaced = node.run(SNAPSHOT)
    assert "/usr/bin/mount_nano_gpu 700" in replaced
    code, result = run_role(node, tmp_path)
    assert code == 0 and not result["changed"], result  # never backed up again over nano-gpu's binaries
    assert json.loads(node.run("cat /var/lib/kubegpu/nano-gpu/host.json")) == record

    code, result = run_role(node, tmp_path, check=True, nano_gpu_state="absent")
    assert code == 0 and result["changed"] and node.run(SNAPSHOT) == replaced
    code, result = run_role(node, tmp_path, nano_gpu_state="absent")
    assert code == 0 and result["changed"], result
    assert node.run(SNAPSHOT) == original  # the host's own hook, the symlink, no leftovers, no state
    code, result = run_role(node, tmp_path, nano_gpu_state="absent")
    assert code == 0 and not result["changed"], result


def test_a_node_that_cannot_work_is_refused_and_nothing_written(node, tmp_path):
    node.run("set -e; mv /var/lib/kubelet/kubeadm-flags.env /tmp/flags.env; "
             "printf 'containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\\n' > /var/lib/kubelet/config.yaml; "
             "mv /usr/bin/nvidia-container-runtime-hook /tmp/hook")
    try:
        before = node.run(SNAPSHOT)
        code, result = run_role(node, tmp_path)
        assert code == 2 and result.get("failed"), result
        message = result["msg"]
        assert message.startswith("nano-gpu cannot work on %s: (1) /usr/bin/nvidia-container-runtime-hook and "
                                  "/usr/bin/nvidia-container-toolkit are missing: install the NVIDIA container toolkit "
                                  "first" % NODE), message
        assert ("(2) the kubelet runs its pods on containerd (unix:///run/containerd/containerd.sock in "
                "/var/lib/kubelet/config.yaml), not docker") in message, message
        assert node.run(SNAPSHOT) == before and "no state" in before
    finally:
        node.run("set -e; mv /tmp/flags.env /var/lib/kubelet/kubeadm-flags.env; rm -f /var/lib/kubelet/config.yaml; "
                 "mv /tmp/hook /usr/bin/nvidia-container-runtime-hook")
