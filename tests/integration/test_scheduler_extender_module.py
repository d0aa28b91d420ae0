# SPDX-License-Identifier: GPL-3.0-or-later
"""kubegpu.cluster.scheduler_extender through the real `ansible` command line, on a kubeadm-like control plane laid out
in a temporary directory (no kube-scheduler runs here, so wait is off): check mode with its diff writes nothing, the
run writes both files, the second run is unchanged, absent gives the originals back, and the argument spec refuses
state=present without url_prefix."""

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
import yaml

from ansible_cli import run_module, run_playbook
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry
from sandbox.k8s import paths
from setup_steps import missing_setup

MODULE = "kubegpu.cluster.scheduler_extender"
KUBE_SCHEDULER = str(paths.bin_dir() / "kube-scheduler")

URL = "http://10.96.0.50:39999/scheduler"
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.30.2
    name: kube-scheduler
  hostNetwork: true
status: {}
"""


def test_check_run_rerun_and_absent(tmp_path):
    manifest = tmp_path / "manifests" / "kube-scheduler.yaml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    args = {"url_prefix": URL, "manifest": str(manifest), "config_path": str(tmp_path / "kube-scheduler-config.yaml"),
            "state_dir": str(tmp_path / "state"), "wait": False}
    code, result = run_module("kubegpu.cluster.scheduler_extender", args, check=True, diff=True)
    assert code == 0 and result["changed"], result
    assert manifest.read_text() == MANIFEST and not (tmp_path / "kube-scheduler-config.yaml").exists()
    assert "--config=%s" % args["config_path"] in result["diff"][1]["after"]
    code, result = run_module("kubegpu.cluster.scheduler_extender", args)
    assert code == 0 and result["changed"] and result["extender"]["urlPrefix"] == URL, result
    code, result = run_module("kubegpu.cluster.scheduler_extender", args)
    assert code == 0 and not result["changed"], result
    absent = dict(args, state="absent")
    del absent["url_prefix"]
    code, result = run_module("kubegpu.cluster.scheduler_extender", absent)
    assert code == 0 and result["changed"] and sorted(result["restored"]) == ["config", "manifest"], result
    assert manifest.read_text() == MANIFEST and os.listdir(tmp_path) == ["manifests"]


def test_present_needs_the_url(tmp_path):
    code, result = run_module(MODULE, {"manifest": str(tmp_path / "m.yaml"), "wait": False})
    assert code == 2 and "state is present but all of the following are missing: url_prefix" in result["msg"], result


# --- Issue 26: every field checked before writing, with kube-scheduler itself as the judge ---------------------------

@pytest.fixture
def kube_scheduler():
    """The kube-scheduler binary the sandbox builds (its --write-config-to loads, defaults and validates a config the
    way the scheduler does at start, then exits)."""
    if not os.access(KUBE_SCHEDULER, os.X_OK):
        missing_setup("no kube-scheduler binary at %s: make sandbox-binaries (sandbox/k8s/build/build.sh) builds it"
                      % KUBE_SCHEDULER)
    return KUBE_SCHEDULER


def scheduler_says(binary, config, tmp_path):
    """(exit code, last line) of kube-scheduler loading ``config`` (a dict) as it would at start."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "x"}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    path = tmp_path / ("judge-%s.yaml" % uuid.uuid4().hex[:6])
    path.write_text(yaml.safe_dump(dict(config, clientConnection={"kubeconfig": str(kubeconfig)})))
    proc = subprocess.run([binary, "--config=%s" % path, "--write-config-to=%s" % (tmp_path / "out.yaml")],
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]


def user_config(*extenders):
    return {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": "/etc/kubernetes/scheduler.conf"}, "extenders": list(extenders)}


def control_plane(tmp_path, config=None):
    manifest = tmp_path / "manifests" / "kube-scheduler.yaml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    config_path = tmp_path / "kube-scheduler-config.yaml"
    if config is not None:
        config_path.write_text(yaml.safe_dump(config))
    return {"url_prefix": URL, "manifest": str(manifest), "config_path": str(config_path),
            "state_dir": str(tmp_path / "state"), "wait": False}


def files_of(args):
    return dict((p, open(p, "rb").read() if os.path.exists(p) else None) for p in (args["manifest"], args["config_path"]))


TAS = {"urlPrefix": "http://127.0.0.1:9001/tas", "filterVerb": "filter", "prioritizeVerb": "prioritize", "weight": 2,
       "managedResources": [{"name": "telemetry.intel.com/scheduling", "ignoredByScheduler": True}]}


def test_what_the_module_writes_kube_scheduler_accepts(tmp_path, kube_scheduler):
    args = dict(control_plane(tmp_path, user_config(TAS)), weight=5, http_timeout="1m30s", ignorable=True)
    code, result = run_module(MODULE, args)
    assert code == 0 and result["changed"], result
    written = yaml.safe_load(open(args["config_path"]))
    assert written["extenders"] == [TAS, extender_entry(URL, weight=5, http_timeout="1m30s", ignorable=True)]
    rc, said = scheduler_says(kube_scheduler, written, tmp_path)
    assert rc == 0, said


# Files kube-scheduler refuses once nano-gpu's entry is merged in: the module refuses them first, writing nothing.
REFUSED_BY_BOTH = [
    pytest.param(dict(TAS, weight=0), "extenders[0].weight", id="a prioritizing extender of weight 0"),
    pytest.param(dict(TAS, managedResources=[{"name": "cpu"}]), "extenders[0].managedResources[0].name", id="cpu managed"),
    pytest.param(dict(TAS, managedResources=[{"name": "nano.example.com/x"}, {"name": "nano.example.com/x"}]),
                 "extenders[0].managedResources[1].name", id="a resource managed twice"),
    pytest.param(dict(TAS, httpTimeout=30), "extenders[0].httpTimeout", id="a timeout that is a number"),
]


@pytest.mark.parametrize("theirs, field", REFUSED_BY_BOTH)
def test_what_kube_scheduler_refuses_the_module_refuses_before_writing(tmp_path, kube_scheduler, theirs, field):
    merged = user_config(theirs, extender_entry(URL))
    rc, said = scheduler_says(kube_scheduler, merged, tmp_path)
    assert rc != 0, "kube-scheduler took it, so this case proves nothing: %s" % said  # the judge refuses it
    args = control_plane(tmp_path, user_config(theirs))
    before = files_of(args)
    for check in (True, False):
        code, result = run_module(MODULE, args, check=check)
        assert code != 0 and field in result["msg"] and args["config_path"] in result["msg"], result
    assert files_of(args) == before and not os.path.exists(args["state_dir"])


@pytest.mark.parametrize("option, value, words", [
    ("url_prefix", "10.96.0.50:39999/scheduler", "the scheme must be http or https"),
    ("url_prefix", "http://nano-gpu-scheduler.kube-system.svc.cluster.local:39999/scheduler", "cluster's DNS"),
    ("url_prefix", "http://10.96.0.50:70000/scheduler", "port is not a number"),
    ("weight", 0, "weight: must be 1 or more"),
    ("weight", -1, "weight: must be 1 or more"),
    ("http_timeout", "-5s", "must be more than 0"),
    ("http_timeout", "5 seconds", "not a duration"),
    ("wait_timeout", -1, "wait_timeout: must be 0 or more"),
    ("state_dir", "state", "state_dir: must be an absolute path"),
])
def test_a_bad_option_is_refused_and_nothing_written(tmp_path, option, value, words):
    args = dict(control_plane(tmp_path), **{option: value})
    before = files_of(args)
    code, result = run_module(MODULE, args)
    assert code != 0 and words in result["msg"], result
    assert files_of(args) == before and not os.path.exists(str(tmp_path / "state"))


# --- Issue 26: a scheduler that does not come back gets its previous files, end to end ---------------------------------
# A kubelet stand-in runs the real kube-scheduler from the manifest (its argv[0] swapped for the binary), against the
# test session's control plane, and restarts it whenever the manifest changes, as the kubelet does with a static pod
# (one start each: a scheduler that exits stays down, where the kubelet would back off and retry). The scheduler never
# leads: its lease is held by another holder, so it schedules nothing of the session's.

class KubeletStandIn(object):
    def __init__(self, manifest, logs):
        self.manifest = manifest
        self.logs = logs
        self.proc = None
        self.starts = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        self._kill()

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)

    def _loop(self):
        seen = None
        while not self._stop.wait(0.2):
            try:
                text = open(self.manifest, "rb").read()
            except OSError:
                continue
            digest = hashlib.sha256(text).hexdigest()
            if digest == seen:
                continue
            seen = digest
            self._kill()
            command = yaml.safe_load(text)["spec"]["containers"][0]["command"]
            argv = [KUBE_SCHEDULER] + [str(a) for a in command[1:]]
            log = open(str(self.logs / ("kube-scheduler-%d.log" % len(self.starts))), "w")
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            self.starts.append(argv)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def kubeadm_node(tmp_path, sandbox, namespace, kube_scheduler):
    """A control plane laid out in tmp_path whose manifest runs kube-scheduler without --config, on flags only."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel
    lease = "kubegpu-test-" + uuid.uuid4().hex[:6]
    now = datetime.datetime.now(datetime.timezone.utc)
    client.CoordinationV1Api(sandbox.api_client).create_namespaced_lease(namespace, {
        "metadata": {"name": lease}, "spec": {"holderIdentity": "somebody-else", "leaseDurationSeconds": 3600,
                                              "acquireTime": now, "renewTime": now}})
    kubeconfig = str(sandbox.layout.kubeconfigs / "kube-scheduler.kubeconfig")
    pki = sandbox.layout.pki
    port = free_port()
    command = ["kube-scheduler", "--bind-address=127.0.0.1", "--secure-port=%d" % port, "--kubeconfig=%s" % kubeconfig,
               "--authentication-kubeconfig=%s" % kubeconfig, "--authorization-kubeconfig=%s" % kubeconfig,
               "--tls-cert-file=%s" % (pki / "loopback-serving.crt"), "--tls-private-key-file=%s" % (pki / "loopback-serving.key"),
               "--leader-elect=true", "--leader-elect-resource-name=%s" % lease,
               "--leader-elect-resource-namespace=%s" % namespace]
    manifest = yaml.safe_load(MANIFEST)
    manifest["spec"]["containers"][0]["command"] = command
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "kube-scheduler.yaml").write_text(yaml.safe_dump(manifest))
    config = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
              "clientConnection": {"kubeconfig": kubeconfig},
              "leaderElection": {"leaderElect": True, "resourceName": lease, "resourceNamespace": namespace}}
    return {"url_prefix": "http://127.0.0.1:9/scheduler", "manifest": str(tmp_path / "manifests" / "kube-scheduler.yaml"),
            "config_path": str(tmp_path / "kube-scheduler-config.yaml"), "state_dir": str(tmp_path / "state"),
            "wait": True, "wait_timeout": 40}, config


def wait_healthy(kubelet, port, timeout=60):
    import ssl  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d/healthz" % port, context=context, timeout=2) as answer:
                if answer.read() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("the stand-in's kube-scheduler never answered: %s" % kubelet.starts)


def test_a_stale_config_the_scheduler_refuses_is_rolled_back_and_the_scheduler_is_healthy(tmp_path, kubeadm_node):
    """kubeadm's scheduler runs on flags; a config file left at config_path (never read so far) is one kube-scheduler
    refuses at start (parallelism 0) though its extenders are fine: the module adds --config, the new scheduler exits,
    the previous manifest and file come back byte for byte, and the scheduler runs healthy on them again."""
    args, config = kubeadm_node
    with open(args["config_path"], "w") as handle:
        handle.write(yaml.safe_dump(dict(config, parallelism=0)))
    port = int([a for a in yaml.safe_load(open(args["manifest"]))["spec"]["containers"][0]["command"]
                if a.startswith("--secure-port=")][0].split("=")[1])
    before = files_of(args)
    with KubeletStandIn(args["manifest"], tmp_path) as kubelet:
        wait_healthy(kubelet, port)
        code, result = run_module(MODULE, dict(args, wait_timeout=20))
        assert code != 0, result
        assert "did not bring kube-scheduler back healthy as changed within 20 s" in result["msg"], result
        assert "were put back and kube-scheduler is healthy on them again" in result["msg"], result
        assert files_of(args) == before and not os.path.exists(args["state_dir"])
        assert len(kubelet.starts) == 3 and "--config=%s" % args["config_path"] in kubelet.starts[1]
        assert all(not a.startswith("--config") for a in kubelet.starts[2])
        assert kubelet.proc.poll() is None  # the scheduler on the previous files runs
        wait_healthy(kubelet, port, timeout=5)


def test_a_good_change_keeps_a_healthy_scheduler_and_absent_gives_the_files_back(tmp_path, kubeadm_node):
    args, config = kubeadm_node
    with open(args["config_path"], "w") as handle:
        handle.write(yaml.safe_dump(config))
    port = int([a for a in yaml.safe_load(open(args["manifest"]))["spec"]["containers"][0]["command"]
                if a.startswith("--secure-port=")][0].split("=")[1])
    before = files_of(args)
    with KubeletStandIn(args["manifest"], tmp_path) as kubelet:
        wait_healthy(kubelet, port)
        code, result = run_module(MODULE, args)
        assert code == 0 and result["changed"] and result["waited_s"] > 0, result
        assert result["healthz"] == "https://127.0.0.1:%d/healthz" % port
        assert "--config=%s" % args["config_path"] in kubelet.starts[-1] and kubelet.proc.poll() is None
        code, again = run_module(MODULE, args)
        assert code == 0 and not again["changed"] and len(kubelet.starts) == 2, again
        absent = dict(args, state="absent")
        del absent["url_prefix"]
        code, gone = run_module(MODULE, absent)
        assert code == 0 and gone["changed"] and gone["waited_s"] > 0, gone
        assert files_of(args) == before and kubelet.proc.poll() is None


# --- The role's scheduler part on a Kubespray control plane: it changes nothing on the node, it checks the inventory
PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: kubegpu.cluster.nano_gpu
        tasks_from: scheduler
"""


def run_scheduler_part(tmp_path, **extra):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    extra = dict({"nano_gpu_scheduler_method": "kubespray", "nano_gpu_extender_url": URL,
                  "ansible_python_interpreter": sys.executable}, **extra)
    code, tasks = run_playbook(playbook, extra)
    (result,) = [r for name, r in tasks if name.startswith("On a Kubespray control plane")]
    return code, result


def test_kubespray_without_the_entry_fails_with_the_value_to_set(tmp_path):
    other = {"urlPrefix": "http://127.0.0.1:9001/tas", "filterVerb": "filter", "weight": 2}
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=[other])
    assert code == 2 and result.get("failed"), result
    wanted = json.dumps([other, extender_entry(URL)])
    assert "Set in the Kubespray inventory (group_vars/k8s_cluster) kube_scheduler_extenders: %s" % wanted in result["msg"]


def test_kubespray_with_the_entry_passes_and_absent_wants_it_gone(tmp_path):
    value = [extender_entry(URL)]
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=value)
    assert code == 0 and "carries nano-gpu's entry as asked" in result["msg"], result
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=value, nano_gpu_state="absent")
    assert code == 2 and "Take the item that manages nano-gpu/gpu-percent out" in result["msg"], result
    code, result = run_scheduler_part(tmp_path, kube_scheduler_extenders=[], nano_gpu_state="absent")
    assert code == 0 and "has no nano-gpu entry" in result["msg"], result
