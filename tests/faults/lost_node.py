# SPDX-License-Identifier: GPL-3.0-or-later
"""The lost node: one of ``NODES`` node containers (tests/node_container.py, made as the fleet's are) is paused
(``docker pause``: a host that freezes, a hung kernel, a VM stopped) or killed (``docker kill``: a host that loses its
power) at a seeded point while the container_toolkit role writes and restarts the runtimes' configurations on all of
them, one play. Then:

- the play goes on for the others: they end as a clean run ends them (files and what their daemons run);
- the play's recap names the lost node (unreachable or failed), and its output says why;
- the fleet audit (playbooks/audit.yml, gpu_fleet_audit), run while the node is still gone, names it ``unreachable``
  with the reason, and no other host;
- once the node is back (unpaused; started again, its systemd booted), a rerun of the play converges on every node,
  every runtime configuration valid, nothing stray where the daemons read;
- the way back gives every node's files back byte for byte, the user's own daemon.json included.

A frozen host holds a play without end: Ansible's linear strategy waits for every host at every task, and neither
the docker connection nor OpenSSH (without ServerAliveInterval) notices a peer that stopped answering. The trials
run as an operator of a fleet should (docs/reliability.md): with a task timeout (``ANSIBLE_TASK_TIMEOUT``,
``TASK_TIMEOUT_S``), which turns a task the frozen host never finishes into a failure of that host alone.
"""

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import killed_play
from killed_play import DAEMONS, RECORD, CONFIG_DIRS, USER_DAEMON_JSON, _dict_diff, _strays
from ansible_cli import _environment
from node_container import NodeContainer, ROOT, docker

NODES = 3
PROFILE = "t4"
TASK_TIMEOUT_S = 60  # longer than any task of the role here (its restart watch: 30 s at most)
PLAY_BOUND_S = 300  # the faulted play must end within this
ROLE_VARS = {"container_toolkit_install": False, "container_toolkit_runtimes": ["docker", "containerd"]}
PLAYBOOK = """
- hosts: gpu_nodes
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.container_toolkit
"""
# the user's own files (killed_play's, without its apt repository: the packages are not the subject here)
PREPARE = r"""
set -e
cat > /etc/docker/daemon.json <<'JSON'
%sJSON
chmod 0640 /etc/docker/daemon.json
containerd config default | sed -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
    -e 's#config_path = ""#config_path = "/etc/containerd/certs.d"#' > /etc/containerd/config.toml
systemctl restart containerd docker
""" % USER_DAEMON_JSON
# The tasks a loss lands in (a header on the default callback's output, and which of its starts): the writes of
# both runtimes' files, their restarts, and the first read of the runtimes.
LOSS_TASKS = (("Read the container runtimes, the toolkit's packages and its repository", 1),
              ("Register the NVIDIA runtime with docker", 1), ("Register the NVIDIA runtime with containerd", 1),
              ("Restart the runtime on its new configuration - containerd", 1),
              ("Restart the runtime on its new configuration - docker", 1))
LOSS_SPREAD = 2.0  # seconds after the task's header
MODES = ("pause", "kill")


class Node(killed_play.Node):
    """A node of the play: the fleet's GPU image with the T4 profile for its fake NVML (the audit reads it)."""

    def __init__(self, name):  # pylint: disable=super-init-not-called
        NodeContainer.__init__(self, name, label="faults", volumes=[  # pylint: disable=non-parent-init-called
            "%s:/etc/fake-nvml/profile.json:ro" % (Path(ROOT) / "sandbox" / "profiles" / (PROFILE + ".json"))])

    def prepare(self):
        self.run(PREPARE)

    def record(self):
        return json.loads(self.run("python3 - %s <<'PY'\n%s\nPY\n" % (" ".join(CONFIG_DIRS), RECORD)))

    def daemons(self):
        return self.run(DAEMONS)


def _recap(output):
    """{host: {ok: n, failed: n, unreachable: n, ...}} from the default callback's PLAY RECAP."""
    out, seen = {}, False
    for line in output.splitlines():
        if line.startswith("PLAY RECAP"):
            seen = True
            continue
        if seen and ":" in line and "=" in line:
            host, _colon, counts = line.partition(":")
            out[host.strip()] = dict((k, int(v)) for k, v in (c.split("=") for c in counts.split()))
    return out


def _why(output, host):
    """What the play's output says of the lost host's failures: each ``fatal:``/``failed:`` line for it and the
    lines of its result after it (the default callback prints a long result on the lines below), joined."""
    lines, out = output.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith(("fatal: [%s]" % host, "failed: [%s]" % host)):
            body = [line]
            for more in lines[i + 1:i + 8]:
                if not more.strip() or more.startswith(("TASK [", "RUNNING HANDLER [", "PLAY", "fatal:", "ok:", "changed:")):
                    break
                body.append(more.strip())
            out.append(" ".join(body)[:400])
    return out


# What a report of the lost host must say of why: the connection's own words (docker's for a stopped or paused
# container; Ansible's for a host it cannot reach), or the task timeout that ended a task the frozen host held.
WHY = re.compile(r"paused|is not running|unreachable|timed out|failed to create temporary directory", re.I)


class Trials:
    """Seeded lost-node trials on ``NODES`` node containers and a control plane for the audit."""

    def __init__(self, seed, workdir, log, prefix=None):
        from sandbox.k8s import cluster  # pylint: disable=import-outside-toplevel
        self.cluster = cluster
        self.seed, self.workdir, self.log = seed, workdir, log
        prefix = prefix or os.environ.get("FAULTS_PREFIX") or "kubegpu-faults-%d" % os.getpid()
        self.names = ["%s-lost-%d" % (prefix, i) for i in range(NODES)]
        state = Path(os.environ.get("FAULTS_STATE_DIR") or Path(ROOT) / ".sandbox" / "faults-k8s")
        state = state.with_name(state.name + "-lost")
        self.layout = cluster.Layout(state, state / "kubeconfig")
        self.nodes = []
        self.started = []

    def __enter__(self):
        self.cluster.down(self.layout, quiet=True)
        try:
            self.cluster.up(self.layout, timeout=300, fleet=False, extra_nodes=NODES, extra_profile=PROFILE)
            for name in self.names:
                node = Node(name)
                node.__enter__()
                self.nodes.append(node)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for node in self.nodes:
            docker("unpause", node.name)
            node.__exit__(*exc)
        self.cluster.down(self.layout, quiet=True)
        return False

    # --- the plays
    def _inventory(self):
        path = os.path.join(self.workdir, "lost-inventory.json")
        hosts = dict((node.name, {"ansible_connection": "community.docker.docker",
                                  "ansible_python_interpreter": "/usr/bin/python3",
                                  "kubegpu_node_name": "kg-scale-%s-%04d" % (PROFILE, i)})
                     for i, node in enumerate(self.nodes))
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"gpu_nodes": {"hosts": hosts},
                       "k8s_api": {"hosts": {"localhost": {"ansible_connection": "local",
                                                           "ansible_python_interpreter": sys.executable}},
                                   "vars": {"kubegpu_kubeconfig": str(self.layout.kubeconfig)}}}, handle)
        return path

    def _argv(self, playbook, extra=None):
        argv = [killed_play.ANSIBLE_PLAYBOOK, "-i", self._inventory(), playbook,
                "-e", json.dumps(dict(ROLE_VARS, **(extra or {})))]
        env = _environment({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "PYTHONUNBUFFERED": "1",
                            "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
                            "ANSIBLE_TASK_TIMEOUT": str(TASK_TIMEOUT_S)})
        return argv, env

    def _playbook(self):
        path = os.path.join(self.workdir, "lost-play.yml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(PLAYBOOK)
        return path

    def converge(self, extra=None, timeout=600):
        argv, env = self._argv(self._playbook(), extra)
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        return done.returncode, done.stdout + done.stderr

    def audit(self):
        """playbooks/audit.yml on the fleet, judged with the bring-up's variables; returns (rc, output, report)."""
        report_dir = os.path.join(self.workdir, "lost-audit")
        argv, env = self._argv(os.path.join(ROOT, "playbooks", "audit.yml"), {"audit_report_dir": report_dir})
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
        try:
            with open(os.path.join(report_dir, "audit.json"), encoding="utf-8") as handle:
                report = json.load(handle)
        except (OSError, ValueError):
            report = None
        return done.returncode, done.stdout + done.stderr, report

    def lost_run(self, victim, task, nth, delay, mode):
        """The bring-up on every node; ``delay`` s after the ``nth`` header of ``task``, ``victim`` is paused or
        killed. Returns (injected, output, seconds from the loss to the play's end)."""
        argv, env = self._argv(self._playbook())
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        lines, seen, lost_at = [], 0, None
        deadline = time.monotonic() + PLAY_BOUND_S
        try:
            for line in proc.stdout:
                lines.append(line)
                if lost_at is None and line.startswith(("TASK [", "RUNNING HANDLER [")) and task in line:
                    seen += 1
                    if seen == nth:
                        time.sleep(delay)  # the seeded point inside the task: the injection, not a wait
                        done = docker(mode, victim.name)
                        assert done.returncode == 0, "docker %s %s: %s" % (mode, victim.name, done.stderr)
                        lost_at = time.monotonic()
                if time.monotonic() > deadline:
                    break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            proc.wait(30)
            lines.extend(proc.stdout.read().splitlines(True))
        ended = time.monotonic()
        return lost_at is not None, "".join(lines), (ended - lost_at) if lost_at else None

    def back(self, node, mode):
        """The lost node returns: unpaused, or started again and booted (its daemons start on what is on disk)."""
        if mode == "pause":
            assert docker("unpause", node.name).returncode == 0
        else:
            assert docker("start", node.name).returncode == 0
            node.wait_booted()
        node.wait_quiet()  # a module the pause froze runs to its end once the node is thawed

    # --- baseline and trials
    def baseline(self):
        """The user's files on every node, one clean bring-up (each node's reference: files and daemons; dockerd's
        key.json differs between nodes), the way back, which must give every file back."""
        for node in self.nodes:
            node.prepare()
        self.original = dict((n.name, n.record()) for n in self.nodes)
        started = time.monotonic()
        rc, out = self.converge()
        assert rc == 0, "the clean bring-up failed:\n%s" % out[-4000:]
        self.log("lost-node: clean bring-up of %d nodes %.1f s" % (len(self.nodes), time.monotonic() - started))
        self.reference = dict((n.name, (killed_play.Trials._files(n.record()), n.daemons())) for n in self.nodes)
        rc, out = self.converge({"container_toolkit_state": "absent"})
        assert rc == 0, "the way back after the clean bring-up failed:\n%s" % out[-4000:]
        for node in self.nodes:
            got, want = killed_play.Trials._files(node.record()), killed_play.Trials._files(self.original[node.name])
            assert got == want, "the way back did not give %s's files back: %s" % (node.name, _dict_diff(got, want))

    def _converged(self, node):
        """What differs on ``node`` from a clean run's end (empty: nothing)."""
        problems = []
        files, want = killed_play.Trials._files(node.record()), self.reference[node.name]
        if files != want[0]:
            problems.append("%s: files differ from a clean run's: %s" % (node.name, _dict_diff(files, want[0])))
        daemons = node.daemons()
        if daemons != want[1]:
            problems.append("%s: the daemons run otherwise than after a clean run:\n%s\nclean:\n%s" % (node.name, daemons, want[1]))
        return problems

    def trial(self, number):
        rng = random.Random("%s/%d" % (self.seed, number))
        victim = self.nodes[rng.randrange(len(self.nodes))]
        (task, nth), delay, mode = rng.choice(LOSS_TASKS), round(rng.uniform(0.0, LOSS_SPREAD), 2), rng.choice(MODES)
        others = [n for n in self.nodes if n is not victim]
        where = "%s %s %.2f s into %r" % (victim.name, "paused" if mode == "pause" else "killed", delay, task)
        problems, lost = [], False
        injected, out, to_end = self.lost_run(victim, task, nth, delay, mode)
        recap = _recap(out)
        why = _why(out, victim.name)
        if not injected:
            problems.append("the play ended before the loss point: " + out[-300:].replace("\n", " | "))
        elif to_end is None or to_end > PLAY_BOUND_S - 5:
            problems.append("the play did not end after the loss (bound %d s)" % PLAY_BOUND_S)
        mine = recap.get(victim.name, {})
        if injected and not (mine.get("unreachable") or mine.get("failed")):
            problems.append("the recap does not name %s as unreachable or failed: %s" % (victim.name, mine))
        if injected and not WHY.search(" ".join(why)):
            problems.append("the play's output does not say why %s failed: %s" % (victim.name, why))
        for node in others:
            counts = recap.get(node.name, {})
            if counts.get("unreachable") or counts.get("failed") or not counts:
                problems.append("the play did not go on for %s: %s" % (node.name, counts))
            problems += self._converged(node)
        # the audit while the node is gone: it, and only it, unreachable, with the reason
        _rc, audit_out, report = self.audit()
        entries = dict((e["host"], e) for e in (report or {}).get("nodes", []))
        entry = entries.get(victim.name) or {}
        if report is None:
            problems.append("the audit wrote no report: %s" % audit_out[-800:])
        elif entry.get("state") not in ("unreachable", "error") or not WHY.search(" ".join(entry.get("errors") or [])):
            problems.append("the audit does not name %s unreachable or unread, with why: %s" % (victim.name, entry))
        else:
            self.log("lost-node trial %d: audit: %s %s: %s"
                     % (number, victim.name, entry["state"], " / ".join(entry["errors"])[:300]))
        if entry.get("problems"):  # its node is in the cluster: nothing but the read is to be said of it
            problems.append("the audit says more of %s than that it was not read: %s" % (victim.name, entry["problems"]))
        for node in others:
            state = (entries.get(node.name) or {}).get("state")
            if report is not None and state in (None, "unreachable", "error"):
                problems.append("the audit says %s of %s, which was not lost" % (state, node.name))
        self.back(victim, mode)
        started = time.monotonic()
        rc, out = self.converge()
        converge_s = time.monotonic() - started
        if rc != 0:
            problems.append("the rerun failed (rc %d): %s" % (rc, out[-1500:]))
        for node in self.nodes:
            problems += self._converged(node)
            invalid = node.invalid()
            if invalid:
                problems.append("%s: a runtime configuration is invalid after the rerun: %s" % (node.name, invalid))
            strays = _strays(node.record())
            if strays:
                problems.append("%s: stray files where the daemons read: %s" % (node.name, strays))
        rc, out = self.converge({"container_toolkit_state": "absent"})
        if rc != 0:
            problems.append("the way back failed (rc %d): %s" % (rc, out[-1500:]))
        for node in self.nodes:
            got, want = killed_play.Trials._files(node.record()), killed_play.Trials._files(self.original[node.name])
            if got != want or node.run("cat /etc/docker/daemon.json", check=False) != USER_DAEMON_JSON:
                lost = True
                problems.append("%s: the way back did not give the files back: %s" % (node.name, _dict_diff(got, want)))
                node.prepare()
                self.original[node.name] = node.record()
        outcome = "the play ended %.1f s after the loss; %s said: %s" % (
            to_end or -1, victim.name, (why[0] if why else "nothing")[:240])
        return {"trial": number, "where": where, "outcome": outcome, "survived": not problems, "lost": lost,
                "problems": problems, "converge_s": round(converge_s, 1)}
