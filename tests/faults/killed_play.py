# SPDX-License-Identifier: GPL-3.0-or-later
"""The killed play: SIGKILL ``ansible-playbook`` while the container_toolkit role writes the runtimes' configurations
and restarts them, on a node container made the way the fleet's are (tests/node_container.py), then rerun without the
kill and check what is left (tests/faults/README.md says what each check means).

One node serves every trial of a run: the way back (``container_toolkit_state: absent``) that ends each trial must
give back the user's files byte for byte, which is what the next trial starts from (and is one of the checks).
"""

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

from ansible_cli import _environment
from node_container import NodeContainer, ROOT, docker

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
APT_REPO = os.path.join(ROOT, ".build", "aptrepo")
PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.container_toolkit
"""
ROLE_VARS = {
    "container_toolkit_apt_repo_url": "http://127.0.0.1:8088/stable/deb/",
    "container_toolkit_apt_key_url": "http://127.0.0.1:8088/gpgkey",
    "container_toolkit_runtimes": ["docker", "containerd"],
}
# The user's own settings, planted before the first run: docker's in daemon.json (their layout, mode 0640), and
# containerd's full default configuration with systemd cgroups and a registry mirror directory of their own.
USER_DAEMON_JSON = ('{\n    "log-driver": "json-file",\n    "log-opts": {"max-size": "10m", "max-file": "3"},\n'
                    '    "registry-mirrors": ["https://mirror.example.internal"]\n}\n')
PREPARE = r"""
set -e
test -e /etc/apt/sources.list.disabled || mv /etc/apt/sources.list /etc/apt/sources.list.disabled
systemd-run --unit kubegpu-apt --property=Restart=on-failure -- /usr/bin/python3 -m http.server 8088 \
    --bind 127.0.0.1 --directory /srv/kubegpu-apt >/dev/null
cat > /etc/docker/daemon.json <<'JSON'
%sJSON
chmod 0640 /etc/docker/daemon.json
containerd config default | sed -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
    -e 's#config_path = ""#config_path = "/etc/containerd/certs.d"#' > /etc/containerd/config.toml
systemctl restart containerd docker
for i in $(seq 50); do curl -fsS -o /dev/null http://127.0.0.1:8088/gpgkey && exit 0; sleep 0.2; done
echo "the apt repository does not answer" >&2; exit 1
""" % USER_DAEMON_JSON
# Where the daemons (and apt, and the toolkit) read their configuration: every file under them is recorded.
CONFIG_DIRS = ["/etc/docker", "/etc/containerd", "/etc/nvidia-container-runtime", "/etc/apt/sources.list.d",
               "/etc/apt/keyrings"]
RECORD = r"""
import hashlib, json, os, stat, sys
out = {}
for top in sys.argv[1:]:
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            digest = None
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            out[path] = "%s %04o %d:%d" % (digest or ("dir" if stat.S_ISDIR(st.st_mode) else "other"),
                                            stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
print(json.dumps(out, sort_keys=True))
"""
# What the daemons run with: a state is equal to a clean run's when these and the files are.
DAEMONS = r"""
systemctl is-active docker containerd || true
docker info --format 'docker default runtime {{.DefaultRuntime}}; runtimes {{range $k, $v := .Runtimes}}{{$k}} {{end}}'
containerd config dump | grep -E '^\s*(default_runtime_name|SystemdCgroup|config_path|BinaryName)\b' | sed 's/^ *//' | sort | uniq -c
dpkg-query -W -f '${Package} ${Version} ${Status}\n' 'nvidia-container-toolkit*' 'libnvidia-container*' 2>/dev/null | sort
"""
# Every runtime configuration valid for its daemon: containerd parses what it imports, dockerd validates daemon.json.
VALIDATE = r"""
set -e
containerd config dump >/dev/null
# dockerd --validate came with Docker 23; an older dockerd's check is its start (the file must be JSON, and it runs)
if [ -e /etc/docker/daemon.json ]; then
  if dockerd --help 2>&1 | grep -q -- --validate; then dockerd --validate --config-file /etc/docker/daemon.json
  else python3 -m json.tool /etc/docker/daemon.json >/dev/null; fi
fi
"""
# A file a daemon may read that is not a configuration: a staged candidate (.NAME.XXXX.tmp), Ansible's temporary
# files, an editor's or a backup's name.
STRAY = re.compile(r"(^\.|\.tmp$|~$|\.bak$|\.orig$|\.dpkg-(new|old|tmp)$|ansible)")
# The tasks whose work the kills must land in (a name on the default callback's output, and which of its starts):
# they write the runtimes' files, restart the daemons (putting the previous file back when one does not come up), and
# read what the restarted daemons run with (the second read of the run).
KILL_TASKS = (("Register the NVIDIA runtime with docker", 1), ("Register the NVIDIA runtime with containerd", 1),
              ("Restart the runtime on its new configuration - containerd", 1),
              ("Restart the runtime on its new configuration - docker", 1),
              ("Ask systemd whether the runtime runs - docker", 1),
              ("Read the container runtimes, the toolkit's packages and its repository", 2))


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Node(NodeContainer):
    """The trial's node: the fleet's GPU image, the stand-in toolkit repository on its loopback, the user's files."""

    def __init__(self, name, role_vars=None):
        super().__init__(name, label="faults", volumes=["%s:/srv/kubegpu-apt:ro" % APT_REPO])
        self.role_vars = dict(ROLE_VARS, **(role_vars or {}))

    def prepare(self):
        self.run(PREPARE)

    def record(self):
        files = json.loads(self.run("python3 - %s <<'PY'\n%s\nPY\n" % (" ".join(CONFIG_DIRS), RECORD)))
        return files

    def daemons(self):
        return self.run(DAEMONS)

    def invalid(self):
        """What containerd or dockerd says of the configuration they would read now (empty: both take it)."""
        proc = docker("exec", "-i", self.name, "bash", "-s", input=VALIDATE)
        return "" if proc.returncode == 0 else (proc.stdout + proc.stderr)[-800:]

    def playbook(self, workdir, extra=None):
        """The argv and environment of one ``ansible-playbook`` run of the role on this node (default callback)."""
        path = os.path.join(workdir, "play.yml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(PLAYBOOK)
        inventory = os.path.join(workdir, "inventory.json")
        with open(inventory, "w", encoding="utf-8") as handle:
            json.dump({"all": {"hosts": {self.name: {"ansible_connection": "community.docker.docker",
                                                     "ansible_python_interpreter": "/usr/bin/python3"}}}}, handle)
        argv = [ANSIBLE_PLAYBOOK, "-i", inventory, path, "-e", json.dumps(dict(self.role_vars, **(extra or {})))]
        env = _environment({"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "PYTHONUNBUFFERED": "1",
                            "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"})
        return argv, env

    def converge(self, workdir, extra=None, timeout=600):
        argv, env = self.playbook(workdir, extra)
        done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        return done.returncode, done.stdout + done.stderr

    def killed_run(self, workdir, task, nth, delay, remote, timeout=600):
        """Run the bring-up and SIGKILL it ``delay`` seconds after the ``nth`` start of the task whose name holds
        ``task`` (its header on the default callback's output), the whole process group (ansible-playbook, its workers, their
        ``docker exec`` clients). ``remote``: also SIGKILL, inside the node, every process those clients started (an
        SSH session's hangup kills them; a docker exec client's death does not). Returns (killed, output)."""
        argv, env = self.playbook(workdir)
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        lines, killed, seen = [], False, 0
        deadline = time.monotonic() + timeout
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(("TASK [", "RUNNING HANDLER [")) and task in line:
                    seen += 1
                if seen == nth:
                    time.sleep(delay)  # the seeded kill point inside the task: the injection, not a wait
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                    if remote:
                        self.remote_killed = int(self.run(KILL_REMOTE).split()[-1])
                    break
                if time.monotonic() > deadline:
                    break
        finally:
            if proc.poll() is None and not killed:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            lines.extend(proc.stdout.read().splitlines(True))
        return killed, "".join(lines)

    def wait_quiet(self, timeout=120):
        """Wait (bounded) until nothing Ansible started on the node runs any more (a module a killed controller left
        runs to its end): the rerun starts from what the kill left, not beside it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.run(REMOTE_PIDS, check=False).split():
                return
            time.sleep(0.5)
        raise AssertionError("modules still run on %s %ss after the kill" % (self.name, timeout))


# The processes Ansible's docker connection started in the node: each is /bin/sh -c '... && sleep 0' (Python: a shell
# loop that greps command lines would find its own grep).
_FIND_REMOTE = r"""
import os
def argv(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []
roots = [p for p in os.listdir("/proc") if p.isdigit() and len(argv(p)) > 2 and argv(p)[1] == b"-c"
         and argv(p)[2].rstrip().endswith(b"sleep 0")]
"""
REMOTE_PIDS = "python3 - <<'PY'\n%s\nprint(' '.join(roots))\nPY\n" % _FIND_REMOTE
KILL_REMOTE = "python3 - <<'PY'\n%s\n" % _FIND_REMOTE + r"""
import signal
children = {}
for pid in os.listdir("/proc"):
    try:
        with open("/proc/%s/stat" % pid) as handle:
            ppid = handle.read().rsplit(")", 1)[1].split()[1]
        children.setdefault(ppid, []).append(pid)
    except (OSError, IndexError):
        pass
todo, tree = list(roots), []
while todo:
    pid = todo.pop()
    tree.append(pid)
    todo.extend(children.get(pid, []))
for pid in tree:
    try:
        os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
print(len(tree))
PY
"""


def _strays(record):
    return sorted(p for p in record if STRAY.search(os.path.basename(p)))


class Trials:
    """Seeded killed-play trials on one node; ``run(n)`` yields one result dict per trial."""

    def __init__(self, seed, name, workdir, log, smoke=False):
        self.seed = seed
        # the smoke subset (make test) watches each restarted runtime 1 s instead of the role's default: every
        # bring-up and way back restarts two, and the watch of a daemon that dies has a test of its own
        # (test_container_toolkit_restart.py); the watch's task stays a kill point
        self.role_vars = {"container_toolkit_restart_settle": 1} if smoke else {}
        self.rng = random.Random(seed)
        self.name = name
        self.workdir = workdir
        self.log = log
        self.node = None
        self.reference = None

    def __enter__(self):
        self.node = Node(self.name, self.role_vars).__enter__()
        return self

    def __exit__(self, *exc):
        return self.node.__exit__(*exc)

    def baseline(self):
        """The user's files, then one clean bring-up (the reference end state, and each kill task's duration), then
        the way back, which must give the user's files back."""
        node = self.node
        node.prepare()
        self.original = node.record()
        started = time.monotonic()
        rc, out = node.converge(self.workdir)
        self.clean_seconds = time.monotonic() - started
        assert rc == 0, "the clean bring-up failed:\n%s" % out[-4000:]
        self.reference = (self._files(node.record()), node.daemons())
        self.log("killed-play: clean bring-up %.1f s; reference %s" % (self.clean_seconds, _sha(json.dumps(self.reference))))
        # the durations of the tasks the kills land in, from a rerun's profile would be as good; the clean run's
        # output has no times, so each kill's delay is drawn from [0, KILL_SPREAD) after its task starts
        rc, out = node.converge(self.workdir, {"container_toolkit_state": "absent"})
        assert rc == 0, "the way back after the clean bring-up failed:\n%s" % out[-4000:]
        back = node.record()
        assert self._files(back) == self._files(self.original), \
            "the way back did not give the files back: " + _dict_diff(self._files(back), self._files(self.original))
        self.after_absent = node.record()

    @staticmethod
    def _files(record):
        """A record without the backups' names (they carry a pid and a time): their contents stay compared. Without
        directories, too: the bring-up makes /etc/containerd/conf.d for its drop-in and the way back leaves it, empty
        (it has no record that the directory was not there; docs/reliability.md lists it)."""
        out = {}
        for path, value in record.items():
            if value.startswith("dir "):
                continue
            key = re.sub(r"\.[0-9]+\.[0-9-]+@[0-9:]+~$", ".<backup>~", path)
            out.setdefault(key, []).append(value)
        return {k: sorted(v) for k, v in out.items()}

    def trial(self, number):
        """One seeded trial: the kill, what it left, the rerun, the checks, the way back. Returns a result dict:
        ``survived`` (every check passed), ``lost`` (a user's setting or file not given back), ``problems`` (what
        failed, one line each), ``converge_s`` (the rerun's seconds)."""
        rng = random.Random("%s/%d" % (self.seed, number))
        (task, nth), delay, remote = rng.choice(KILL_TASKS), round(rng.uniform(0.0, KILL_SPREAD), 2), rng.random() < 0.5
        node, problems, lost = self.node, [], False
        node.remote_killed = 0
        killed, out = node.killed_run(self.workdir, task, nth, delay, remote)
        where = "%.2f s into %r%s, %s" % (delay, task, " (its start %d)" % nth if nth > 1 else "",
                                          "controller and %d node processes" % node.remote_killed if remote else "controller")
        node.wait_quiet()
        if not killed:
            problems.append("the play ended before the kill point: " + out[-300:].replace("\n", " | "))
        # what the kill left is valid for the daemons too (atomic writes), and nothing stray where they read
        invalid = node.invalid() if killed else ""
        if invalid:
            problems.append("after the kill, a runtime configuration is invalid: " + invalid)
        strays = _strays(node.record())
        started = time.monotonic()
        rc, out = node.converge(self.workdir)
        converge_s = time.monotonic() - started
        if rc != 0:
            problems.append("the rerun failed (rc %d): %s" % (rc, out[-1500:]))
        record = node.record()
        if self._files(record) != self.reference[0]:
            problems.append("the files differ from a clean run's: %s" % _dict_diff(self._files(record), self.reference[0]))
        daemons = node.daemons()
        if daemons != self.reference[1]:
            problems.append("the daemons run otherwise than after a clean run:\n%s\nclean:\n%s" % (daemons, self.reference[1]))
        invalid = node.invalid()
        if invalid:
            problems.append("after the rerun, a runtime configuration is invalid: " + invalid)
        strays = sorted(set(strays) | set(_strays(record)))
        if strays:
            problems.append("stray files where the daemons read: %s" % strays)
        rc, out = node.converge(self.workdir, {"container_toolkit_state": "absent"})
        if rc != 0:
            problems.append("the way back failed (rc %d): %s" % (rc, out[-1500:]))
        back = node.record()
        if self._files(back) != self._files(self.after_absent):
            lost = True
            problems.append("the way back did not give the files back: %s" % _dict_diff(self._files(back), self._files(self.after_absent)))
        if node.run("cat /etc/docker/daemon.json", check=False) != USER_DAEMON_JSON:
            lost = True
            problems.append("the user's daemon.json is not byte for byte what they wrote")
        if lost:  # the next trial needs the user's files: plant them again
            node.prepare()
            self.after_absent = node.record()
        return {"trial": number, "where": where, "killed": killed, "survived": not problems, "lost": lost,
                "problems": problems, "converge_s": round(converge_s, 1)}


KILL_SPREAD = 3.0  # seconds: a kill lands this long at most after its task starts (a restart takes 1 to 4 s here)


def _dict_diff(got, want):
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return "; ".join("%s: %s != %s" % (k, got.get(k), want.get(k)) for k in keys)[:1500]
