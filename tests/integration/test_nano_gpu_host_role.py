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
import shutil
import subprocess
import sys
import time

import pytest

from ansible_cli import _environment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMAGE = "kubegpu/node:gpu"
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


def docker(*args, **kwargs):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=False,
                          timeout=kwargs.pop("timeout", 120), **kwargs)


def in_node(script):
    proc = docker("exec", "-i", NODE, "bash", "-s", input=script)
    assert proc.returncode == 0, "in %s:\n%s%s" % (NODE, proc.stdout, proc.stderr)
    return proc.stdout


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A systemd node container like the fleet's, with one NVIDIA GPU on its PCI bus."""
    if shutil.which("docker") is None or docker("image", "inspect", IMAGE, timeout=60).returncode != 0:
        proc = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "node-images"], capture_output=True,
                              text=True, check=False, timeout=3600)
        assert proc.returncode == 0, "make node-images failed:\n%s%s" % (proc.stdout[-4000:], proc.stderr[-4000:])
    pci = tmp_path_factory.mktemp("pci")
    gpu = pci / "0000:3b:00.0"
    gpu.mkdir()
    for name, value in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200"),
                        ("subsystem_vendor", "0x10de"), ("subsystem_device", "0x134f")):
        (gpu / name).write_text(value + "\n")
    caps = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "MKNOD", "SYS_CHROOT", "SETFCAP", "NET_RAW", "DAC_READ_SEARCH"]
    proc = docker("run", "-d", "--name", NODE, "--hostname", NODE, "--network", "none", "--cgroupns", "host",
                  "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                  *[a for c in caps for a in ("--cap-add", c)],
                  "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/var/lib/docker", "--tmpfs", "/var/lib/containerd",
                  "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "%s:/sys/bus/pci/devices:ro" % pci,
                  "--label", "kubegpu.test=nano_gpu_host", IMAGE, "/lib/systemd/systemd")
    assert proc.returncode == 0, proc.stderr
    try:
        # systemd itself says when the boot is over (--wait, bounded by timeout); right after the start its bus may
        # not answer yet ("Failed to connect to bus"), which ends the call at once: only that is tried again
        deadline = time.time() + 120
        while True:
            state = docker("exec", NODE, "timeout", "120", "systemctl", "is-system-running", "--wait").stdout.strip()
            if state in ("running", "degraded"):
                break
            assert time.time() < deadline, "systemd did not boot in %s: %s" % (NODE, state)
            time.sleep(0.2)
        in_node(SETUP)
        yield NODE
    finally:
        docker("rm", "-f", NODE)


def run_role(tmp_path, check=False, **extra_vars):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {NODE: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(playbook)]
    command += ["-e", json.dumps(extra_vars)] if extra_vars else []
    command += ["--check", "--diff"] if check else []
    proc = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False, cwd=ROOT, timeout=300)
    try:
        tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError) as exc:
        raise AssertionError("no JSON from ansible-playbook (rc %s):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)) from exc
    (result,) = [t["hosts"][NODE] for t in tasks if t["task"]["name"].endswith("or give it back")]
    return proc.returncode, result


def test_backup_idempotence_agent_and_the_way_back(node, tmp_path):
    original = in_node(SNAPSHOT)
    assert "/usr/bin/nvidia-container-toolkit link /usr/bin/nvidia-container-runtime-hook" in original
    assert "no state" in original

    code, result = run_role(tmp_path, check=True)
    assert code == 0 and result["changed"], result
    assert result["checks"]["docker_source"] == "docker info" and result["checks"]["nvidia_gpus"] == 1
    assert in_node(SNAPSHOT) == original  # check mode wrote nothing

    code, result = run_role(tmp_path)
    assert code == 0 and result["changed"], result
    record = json.loads(in_node("cat /var/lib/kubegpu/nano-gpu/host.json"))
    assert record["binaries"]["/usr/bin/nvidia-container-toolkit"]["kind"] == "symlink"
    assert in_node("cmp /var/lib/kubegpu/nano-gpu/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-runtime-hook"
                   " && stat -c %a /var/lib/kubegpu/nano-gpu/bin/nvidia-container-runtime-hook").strip() == "755"

    code, result = run_role(tmp_path)
    assert code == 0 and not result["changed"], result

    in_node(AGENT)
    replaced = in_node(SNAPSHOT)
    assert "/usr/bin/mount_nano_gpu 700" in replaced
    code, result = run_role(tmp_path)
    assert code == 0 and not result["changed"], result  # never backed up again over nano-gpu's binaries
    assert json.loads(in_node("cat /var/lib/kubegpu/nano-gpu/host.json")) == record

    code, result = run_role(tmp_path, check=True, nano_gpu_state="absent")
    assert code == 0 and result["changed"] and in_node(SNAPSHOT) == replaced
    code, result = run_role(tmp_path, nano_gpu_state="absent")
    assert code == 0 and result["changed"], result
    assert in_node(SNAPSHOT) == original  # the host's own hook, the symlink, no leftovers, no state
    code, result = run_role(tmp_path, nano_gpu_state="absent")
    assert code == 0 and not result["changed"], result


def test_a_node_that_cannot_work_is_refused_and_nothing_written(node, tmp_path):
    in_node("set -e; mv /var/lib/kubelet/kubeadm-flags.env /tmp/flags.env; "
            "printf 'containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\\n' > /var/lib/kubelet/config.yaml; "
            "mv /usr/bin/nvidia-container-runtime-hook /tmp/hook")
    try:
        before = in_node(SNAPSHOT)
        code, result = run_role(tmp_path)
        assert code == 2 and result.get("failed"), result
        message = result["msg"]
        assert message.startswith("nano-gpu cannot work on %s: (1) /usr/bin/nvidia-container-runtime-hook and "
                                  "/usr/bin/nvidia-container-toolkit are missing: install the NVIDIA container toolkit "
                                  "first" % NODE), message
        assert ("(2) the kubelet runs its pods on containerd (unix:///run/containerd/containerd.sock in "
                "/var/lib/kubelet/config.yaml), not docker") in message, message
        assert in_node(SNAPSHOT) == before and "no state" in before
    finally:
        in_node("set -e; mv /tmp/flags.env /var/lib/kubelet/kubeadm-flags.env; rm -f /var/lib/kubelet/config.yaml; "
                "mv /tmp/hook /usr/bin/nvidia-container-runtime-hook")
