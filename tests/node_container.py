# SPDX-License-Identifier: GPL-3.0-or-later
"""A systemd node container like the fleet's (kubegpu/node:gpu, started as sandbox/images/nodes.yml starts them), and
roles run on it through ``ansible-playbook`` over Ansible's docker connection, for the integration tests whose subject
is one role's behaviour on real daemons (dockerd, containerd, systemd).

    with NodeContainer("kubegpu-ct-rollback-%d" % os.getpid(), label="container_toolkit_restart") as node:
        node.run("systemctl restart docker")
        rc, tasks = node.play(PLAYBOOK, tmp_path, container_toolkit_runtimes=["docker"])
"""

import json
import os
import shutil
import subprocess
import sys
import time

import yaml

from ansible_cli import _environment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
IMAGE = "kubegpu/node:gpu"
BOOT_TIMEOUT = 120


def fleet_container():
    """What sandbox/images/nodes.yml gives every fleet container (the one place): the capabilities it gets instead of
    --privileged (TESTBED.md: --privileged fails here), security options, cgroup namespace and tmpfs mounts. Molecule's
    platforms restate them (tests/sandbox/test_molecule_platforms.py), this module starts its containers with them."""
    with open(os.path.join(ROOT, "sandbox", "images", "nodes.yml"), encoding="utf-8") as handle:
        play = yaml.safe_load(handle)[0]
    start = next(t for t in play["tasks"] if t.get("name") == "Start the node containers")["community.docker.docker_container"]
    return {
        "capabilities": play["vars"]["_nodes_capabilities"],
        "security_opts": start["security_opts"],
        "cgroupns_mode": start["cgroupns_mode"],
        "tmpfs": start["tmpfs"],
    }


def docker(*args, **kwargs):
    """``docker ARGS`` (bounded: 120 s unless ``timeout`` says otherwise); returns the CompletedProcess."""
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, check=False,
                          timeout=kwargs.pop("timeout", 120), **kwargs)


def docker_checked(*args, check=True, timeout=120):
    """``docker ARGS``, asserting it succeeded unless ``check`` is false (the output in the message)."""
    done = docker(*args, timeout=timeout)
    if check:
        assert done.returncode == 0, "docker %s: %s%s" % (" ".join(args), done.stdout, done.stderr)
    return done


def nodes_play(state_dir, fleet_file, state, owner_label, image=None):
    """sandbox/images/nodes.yml for a test's own fleet file and owner label (never the fleet's containers);
    ``image``: the node image repository, when not the play's default."""
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            os.path.join(ROOT, "sandbox", "images", "nodes.yml"),
            "-e", "nodes_root=%s" % ROOT, "-e", "nodes_sandbox_dir=%s" % state_dir, "-e", "nodes_fleet_file=%s" % fleet_file,
            "-e", "nodes_owner_label=%s" % owner_label, "-e", "nodes_state=%s" % state]
    if image:
        argv += ["-e", "nodes_image=%s" % image]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env, cwd=ROOT)
    assert done.returncode == 0, "nodes.yml (%s) failed:\n%s%s" % (state, done.stdout[-3000:], done.stderr[-2000:])


def ensure_image(image=IMAGE):
    """Build the node images (``make node-images``, from the cache when it has them) when ``image`` is missing."""
    if shutil.which("docker") is not None and docker("image", "inspect", image, timeout=60).returncode == 0:
        return
    proc = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "node-images"], capture_output=True, text=True,
                          check=False, timeout=3600)
    assert proc.returncode == 0, "make node-images failed:\n%s%s" % (proc.stdout[-4000:], proc.stderr[-4000:])


class NodeContainer:
    """One node container, started on ``__enter__`` (after systemd says its boot is over) and removed on ``__exit__``.

    ``volumes``: extra ``-v`` arguments (``HOST:CONTAINER[:ro]``); ``network``: docker's ``--network`` (``none``: the
    node reaches nothing, not even the machine's bridge).
    """

    def __init__(self, name, label, image=IMAGE, volumes=(), network="none"):
        self.name = name
        self.label = label
        self.image = image
        self.volumes = list(volumes)
        self.network = network

    def __enter__(self):
        ensure_image(self.image)
        docker("rm", "-f", self.name)  # one an interrupted run left
        fleet = fleet_container()
        argv = ["run", "-d", "--name", self.name, "--hostname", self.name, "--network", self.network,
                "--cgroupns", fleet["cgroupns_mode"]]
        argv += [a for opt in fleet["security_opts"] for a in ("--security-opt", opt)]
        argv += [a for cap in fleet["capabilities"] for a in ("--cap-add", cap)]
        argv += [a for path in fleet["tmpfs"] for a in ("--tmpfs", path)]
        argv += ["-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"] + [a for v in self.volumes for a in ("-v", v)]
        argv += ["--label", "kubegpu.test=%s" % self.label, self.image, "/lib/systemd/systemd"]
        proc = docker(*argv)
        assert proc.returncode == 0, "docker run %s failed: %s" % (self.name, proc.stderr)
        try:
            self.wait_booted()
        except BaseException:
            docker("rm", "-f", self.name)
            raise
        return self

    def __exit__(self, *exc_info):
        docker("rm", "-f", self.name)
        return False

    def wait_booted(self, timeout=BOOT_TIMEOUT):
        """Wait (bounded) until systemd says the boot is over. Right after the start its bus may not answer yet
        ("Failed to connect to bus"), which ends ``is-system-running --wait`` at once: only that is tried again."""
        deadline = time.monotonic() + timeout
        while True:
            state = docker("exec", self.name, "timeout", str(timeout), "systemctl", "is-system-running", "--wait",
                           timeout=timeout + 10).stdout.strip()
            if state in ("running", "degraded"):
                return
            assert time.monotonic() < deadline, "systemd did not boot in %s: %s" % (self.name, state)
            time.sleep(0.2)

    def run(self, script, check=True):
        """Run a bash script in the container; returns its stdout (and asserts it exited 0 when ``check``)."""
        proc = docker("exec", "-i", self.name, "bash", "-s", input=script)
        if check:
            assert proc.returncode == 0, "in %s:\n%s%s" % (self.name, proc.stdout, proc.stderr)
        return proc.stdout

    def play(self, playbook, tmp_path, check=False, diff=False, timeout=300, **extra_vars):
        """``ansible-playbook`` of the playbook text on this container (the docker connection, the node's own
        python3), with the JSON callback; returns (exit code, [(task name, this host's result)] in order)."""
        path = tmp_path / ("play-%s.yml" % self.name)
        path.write_text(playbook)
        inventory = tmp_path / ("inventory-%s.json" % self.name)
        inventory.write_text(json.dumps({"all": {"hosts": {self.name: {
            "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
        command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(path)]
        command += ["-e", json.dumps(extra_vars)] if extra_vars else []
        command += ["--check"] if check else []
        command += ["--diff"] if diff else []
        proc = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=False, cwd=ROOT,
                              timeout=timeout)
        try:
            plays = json.loads(proc.stdout)["plays"]
        except (ValueError, KeyError) as exc:
            raise AssertionError("no JSON from ansible-playbook (rc %s):\n%s\n%s"
                                 % (proc.returncode, proc.stdout, proc.stderr)) from exc
        tasks = [(t["task"]["name"].split(" : ")[-1], t["hosts"][self.name])
                 for play in plays for t in play["tasks"] if self.name in t["hosts"]]
        return proc.returncode, tasks
