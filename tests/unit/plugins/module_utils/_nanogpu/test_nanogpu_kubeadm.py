# SPDX-License-Identifier: GPL-3.0-or-later
"""nano-gpu's extender in a kubeadm kube-scheduler (module_utils/_nanogpu/kubeadm.py), on files in a temporary
directory laid out like a control plane's: the merge keeps the user's settings and other extenders, the manifest gets
--config, the mount and the restart annotation, check mode writes nothing, a second run changes nothing, and absent
gives back every file byte for byte; a malformed file is refused with its path and field. Kubespray's variable: its
items carry exactly kube-scheduler's extender keys and come out of Kubespray's template as the extenders."""

import os
import stat

import pytest
import yaml

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, KubegpuError, OptionError, WaitTimeout
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import kubeadm
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu.scheduler import extender_entry

URL = "http://10.96.0.50:39999/scheduler"

# As kubeadm 1.30 writes it (cmd/kubeadm/app/phases/controlplane/manifests.go), livenessProbe left out
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  creationTimestamp: null
  labels:
    component: kube-scheduler
    tier: control-plane
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --authentication-kubeconfig=/etc/kubernetes/scheduler.conf
    - --authorization-kubeconfig=/etc/kubernetes/scheduler.conf
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
    image: registry.k8s.io/kube-scheduler:v1.30.2
    imagePullPolicy: IfNotPresent
    name: kube-scheduler
    resources:
      requests:
        cpu: 100m
    volumeMounts:
    - mountPath: /etc/kubernetes/scheduler.conf
      name: kubeconfig
      readOnly: true
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext:
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - hostPath:
      path: /etc/kubernetes/scheduler.conf
      type: FileOrCreate
    name: kubeconfig
status: {}
"""

USER_CONFIG = """# the user's own scheduler settings
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  qps: 100
percentageOfNodesToScore: 50
profiles:
  - schedulerName: default-scheduler
extenders:
  - urlPrefix: "http://127.0.0.1:9001/tas"   # Intel's telemetry-aware scheduling
    filterVerb: filter
    prioritizeVerb: prioritize
    weight: 2
    managedResources:
      - name: telemetry/scheduling
        ignoredByScheduler: true
"""


@pytest.fixture
def node(tmp_path):
    etc = tmp_path / "etc" / "kubernetes"
    (etc / "manifests").mkdir(parents=True)
    manifest = etc / "manifests" / "kube-scheduler.yaml"
    manifest.write_text(MANIFEST)
    os.chmod(manifest, 0o600)
    params = {"state": "present", "url_prefix": URL, "weight": 1, "http_timeout": None, "ignorable": False,
              "manifest": str(manifest), "config_path": str(etc / "kube-scheduler-config.yaml"),
              "state_dir": str(tmp_path / "var" / "lib" / "kubegpu" / "nano-gpu" / "scheduler"), "wait": False,
              "wait_timeout": 5}
    return params


def files(params):
    out = {}
    for path in (params["manifest"], params["config_path"]):
        out[path] = open(path, "rb").read() if os.path.exists(path) else None
    return out


def test_present_writes_config_flag_mount_and_annotation(node):
    result = kubeadm.run(node)
    assert result["changed"] and sorted(result["files"]) == sorted([node["manifest"], node["config_path"]])
    config = yaml.safe_load(open(node["config_path"]))
    assert config["apiVersion"] == C.SCHEDULER_CONFIG_API_VERSION and config["kind"] == C.SCHEDULER_CONFIG_KIND
    assert config["clientConnection"] == {"kubeconfig": "/etc/kubernetes/scheduler.conf"}
    assert config["extenders"] == [extender_entry(URL)]
    assert stat.S_IMODE(os.stat(node["config_path"]).st_mode) == 0o600
    manifest = yaml.safe_load(open(node["manifest"]))
    container = manifest["spec"]["containers"][0]
    assert "--config=%s" % node["config_path"] in container["command"]
    assert {"mountPath": node["config_path"], "name": C.SCHEDULER_CONFIG_VOLUME, "readOnly": True} in container["volumeMounts"]
    assert {"hostPath": {"path": node["config_path"], "type": "FileOrCreate"}, "name": C.SCHEDULER_CONFIG_VOLUME} in manifest["spec"]["volumes"]
    assert manifest["metadata"]["annotations"][kubeadm.CONFIG_ANNOTATION] == kubeadm.sha256(open(node["config_path"]).read())
    # everything else of kubeadm's manifest is kept
    assert container["image"] == "registry.k8s.io/kube-scheduler:v1.30.2"
    assert stat.S_IMODE(os.stat(node["manifest"]).st_mode) == 0o600  # mode kept
    # no backup, no temporary file in the manifests directory (the kubelet would run it)
    assert os.listdir(os.path.dirname(node["manifest"])) == ["kube-scheduler.yaml"]
    assert result["extender"] == extender_entry(URL)


def test_a_new_config_takes_the_kubeconfig_the_flag_named(node):
    # kube-scheduler ignores --kubeconfig once --config is given: the file must carry it
    with open(node["manifest"], "w") as handle:
        handle.write(MANIFEST.replace("--kubeconfig=/etc/kubernetes/scheduler.conf", "--kubeconfig=/etc/kubernetes/other.conf"))
    kubeadm.run(node)
    assert yaml.safe_load(open(node["config_path"]))["clientConnection"] == {"kubeconfig": "/etc/kubernetes/other.conf"}


def test_second_run_changes_nothing(node):
    kubeadm.run(node)
    before = files(node)
    mtimes = [os.stat(p).st_mtime_ns for p in before]
    result = kubeadm.run(node)
    assert not result["changed"] and result["files"] == []
    assert files(node) == before and [os.stat(p).st_mtime_ns for p in before] == mtimes


def test_check_mode_writes_nothing_and_diffs(node):
    before = files(node)
    result = kubeadm.run(node, check_mode=True, want_diff=True)
    assert result["changed"]
    assert files(node) == before and not os.path.exists(node["state_dir"])
    config_diff, manifest_diff = result["diff"]
    assert config_diff["before"] == "" and URL in config_diff["after"]
    assert manifest_diff["before"] == MANIFEST and "--config=" in manifest_diff["after"]


def test_absent_gives_back_every_file_byte_for_byte(node):
    before = files(node)
    kubeadm.run(node)
    absent = dict(node, state="absent", url_prefix=None)
    result = kubeadm.run(absent, check_mode=True)
    assert result["changed"] and files(node) != before  # check mode: still ours
    result = kubeadm.run(absent)
    assert result["changed"] and sorted(result["restored"]) == ["config", "manifest"]
    assert files(node) == before  # the config file the module created is gone, the manifest is kubeadm's bytes
    assert stat.S_IMODE(os.stat(node["manifest"]).st_mode) == 0o600
    assert not os.path.exists(node["state_dir"])
    assert not kubeadm.run(absent)["changed"]


def test_the_users_settings_and_other_extenders_are_kept_and_come_back(node):
    with open(node["config_path"], "w") as handle:
        handle.write(USER_CONFIG)
    original = files(node)
    kubeadm.run(node)
    config = yaml.safe_load(open(node["config_path"]))
    user = yaml.safe_load(USER_CONFIG)
    for key in ("clientConnection", "percentageOfNodesToScore", "profiles"):
        assert config[key] == user[key]
    assert config["extenders"] == user["extenders"] + [extender_entry(URL)]
    # a new URL updates nano-gpu's entry where it stands, and the annotation restarts the scheduler
    annotation = yaml.safe_load(open(node["manifest"]))["metadata"]["annotations"][kubeadm.CONFIG_ANNOTATION]
    assert kubeadm.run(dict(node, url_prefix="http://10.96.0.51:39999/scheduler"))["changed"]
    config = yaml.safe_load(open(node["config_path"]))
    assert [e["urlPrefix"] for e in config["extenders"]] == ["http://127.0.0.1:9001/tas", "http://10.96.0.51:39999/scheduler"]
    assert yaml.safe_load(open(node["manifest"]))["metadata"]["annotations"][kubeadm.CONFIG_ANNOTATION] != annotation
    kubeadm.run(dict(node, state="absent"))
    assert files(node) == original  # the user's comments too


def test_the_file_the_pods_config_flag_names_is_used(node, tmp_path):
    own = tmp_path / "etc" / "kubernetes" / "my-scheduler.yaml"
    own.write_text(USER_CONFIG)
    manifest = MANIFEST.replace("    - --leader-elect=true\n", "    - --leader-elect=true\n    - --config=%s\n" % own).replace(
        "      name: kubeconfig\n      readOnly: true\n",
        "      name: kubeconfig\n      readOnly: true\n    - mountPath: %s\n      name: own\n      readOnly: true\n" % own)
    with open(node["manifest"], "w") as handle:
        handle.write(manifest)
    params = dict(node, config_path=None)
    result = kubeadm.run(params)
    assert result["config_path"] == str(own)
    written = yaml.safe_load(open(node["manifest"]))
    container = written["spec"]["containers"][0]
    assert [a for a in container["command"] if a.startswith("--config")] == ["--config=%s" % own]
    assert [m["name"] for m in container["volumeMounts"]] == ["kubeconfig", "own"]  # mounted already: no second mount
    assert not os.path.exists(node["config_path"])
    with pytest.raises(OptionError, match="already runs with --config=%s" % own):
        kubeadm.run(node)


@pytest.mark.parametrize("text, words", [
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders: [\n",
     "line 4, column 1: invalid YAML"),
    ("apiVersion: v1\nkind: Policy\n", "field 'apiVersion': is 'v1'"),
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: ConfigMap\n", "field 'kind': is 'ConfigMap'"),
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders: {urlPrefix: x}\n",
     "field 'extenders': is not a list"),
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n- filterVerb: f\n",
     "field 'extenders[0]': has no urlPrefix"),
    ("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n"
     "- {urlPrefix: 'http://gas:9001', bindVerb: scheduler/bind}\n", "the extender at http://gas:9001 implements bind"),
])
def test_a_malformed_config_is_refused_with_its_path_and_field(node, text, words):
    with open(node["config_path"], "w") as handle:
        handle.write(text)
    before = files(node)
    with pytest.raises(FileError) as caught:
        kubeadm.run(node)
    assert str(caught.value).startswith(node["config_path"] + ":"), str(caught.value)
    assert words in str(caught.value)
    assert files(node) == before


def test_a_missing_manifest_says_this_is_no_kubeadm_control_plane(node):
    os.unlink(node["manifest"])
    with pytest.raises(FileError, match="not a kubeadm control-plane node"):
        kubeadm.run(node)


def test_absent_after_kubeadm_rewrote_the_manifest_takes_out_only_ours(node):
    kubeadm.run(node)
    upgraded = open(node["manifest"]).read().replace("v1.30.2", "v1.31.0")
    with open(node["manifest"], "w") as handle:
        handle.write(upgraded)
    result = kubeadm.run(dict(node, state="absent"))
    assert result["restored"] == ["config"]
    manifest = yaml.safe_load(open(node["manifest"]))
    assert manifest == yaml.safe_load(MANIFEST.replace("v1.30.2", "v1.31.0"))  # the upgrade stays, ours is gone


def test_present_after_kubeadm_rewrote_the_manifest_takes_the_new_one_as_original(node):
    kubeadm.run(node)
    upgraded_clean = MANIFEST.replace("v1.30.2", "v1.31.0")  # kubeadm upgrade writes its own manifest again
    with open(node["manifest"], "w") as handle:
        handle.write(upgraded_clean)
    assert kubeadm.run(node)["changed"]
    kubeadm.run(dict(node, state="absent"))
    assert open(node["manifest"]).read() == upgraded_clean  # not the 1.30 original


def test_wait_needs_a_new_process_with_the_flag_and_healthz_that_stays():
    clock = iter(range(100))
    new = {11: ["kube-scheduler", "--config=/x"]}
    seen = iter([{10: ["kube-scheduler"]}, {10: ["kube-scheduler"]}, new, new, new])
    answers = iter([False, True, True])
    waited = kubeadm.wait_restarted({10: ["kube-scheduler"]}, "https://127.0.0.1:10259/healthz", "--config", True, 30,
                                    sleep=lambda s: None, clock=lambda: next(clock), pids=lambda: next(seen),
                                    check=lambda url: next(answers))
    assert waited > 0
    with pytest.raises(WaitTimeout, match="did not bring kube-scheduler back healthy as changed within 3 s"):
        kubeadm.wait_restarted({10: []}, "u", "--config", True, 3, sleep=lambda s: None, clock=iter(range(100)).__next__,
                               pids=lambda: {10: ["kube-scheduler"]}, check=lambda url: True)


def test_wait_does_not_take_a_scheduler_that_answers_once_and_exits():
    """A configuration kube-scheduler refuses ends the process; one that answered ok and is gone a moment later is
    not healthy."""
    new = {11: ["kube-scheduler", "--config=/x"]}
    seen = iter([new, {}] * 50)
    with pytest.raises(WaitTimeout, match="answered ok at u, then stopped answering or exited"):
        kubeadm.wait_restarted({}, "u", "--config", True, 5, sleep=lambda s: None, clock=iter(range(100)).__next__,
                               pids=lambda: next(seen), check=lambda url: True)


def test_healthz_url_follows_the_flags():
    assert kubeadm.healthz_url({"command": ["kube-scheduler", "--bind-address=127.0.0.1"]}) == "https://127.0.0.1:10259/healthz"
    assert kubeadm.healthz_url({"command": ["kube-scheduler", "--bind-address=0.0.0.0", "--secure-port=10300"]}) == \
        "https://127.0.0.1:10300/healthz"


def test_healthz_answers_only_ok():
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            status, body = (200, b"ok") if self.path == "/healthz" else (500, b"[-]poststarthook failed")
            self.send_response(status)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = "http://127.0.0.1:%d" % server.server_address[1]
        assert kubeadm.healthz(base + "/healthz") is True
        assert kubeadm.healthz(base + "/readyz") is False
    finally:
        server.shutdown()
        server.server_close()
    assert kubeadm.healthz("http://127.0.0.1:%d/healthz" % server.server_address[1], timeout=1) is False


def test_scheduler_pids_reads_the_command_lines(tmp_path):
    for pid, argv in ((10, [b"/usr/local/bin/kube-scheduler", b"--config=/etc/kubernetes/x.yaml"]), (11, [b"kubelet"]),
                      (12, [b"kube-scheduler-extender"])):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    (tmp_path / "self").mkdir()
    assert kubeadm.scheduler_pids(str(tmp_path)) == {10: ["/usr/local/bin/kube-scheduler", "--config=/etc/kubernetes/x.yaml"]}


# --- Issue 26: every field validated before writing; a scheduler that does not come back gets its files back ---------

@pytest.mark.parametrize("over, option, words", [
    ({"url_prefix": "10.96.0.50:39999/scheduler"}, "url_prefix", "the scheme must be http or https"),
    ({"url_prefix": "http://nano-gpu-scheduler.kube-system.svc:39999/scheduler"}, "url_prefix", "cluster's DNS"),
    ({"url_prefix": "http://10.96.0.50:99999/scheduler"}, "url_prefix", "port is not a number from 1 to 65535"),
    ({"url_prefix": "http://user:secret@10.96.0.50/scheduler"}, "url_prefix", "carries credentials"),
    ({"weight": 0}, "weight", "must be 1 or more"),
    ({"weight": -3}, "weight", "must be 1 or more"),
    ({"weight": 2 ** 62}, "weight", "at most 92233720368547758"),
    ({"http_timeout": "-1s"}, "http_timeout", "must be more than 0"),
    ({"http_timeout": "30"}, "http_timeout", "not a duration"),
])
def test_a_bad_field_is_refused_before_anything_is_written(node, over, option, words):
    before = files(node)
    for check_mode in (True, False):
        with pytest.raises(OptionError, match=words) as info:
            kubeadm.run(dict(node, **over), check_mode=check_mode)
        assert str(info.value).startswith(option + ": ")
    assert files(node) == before and not os.path.exists(node["state_dir"])


@pytest.mark.parametrize("extender, words", [
    ({"urlPrefix": "http://127.0.0.1:9001/tas", "prioritizeVerb": "prioritize", "weight": 0},
     r"extenders\[0\].weight: 0; an extender with a prioritizeVerb must have a positive weight"),
    ({"urlPrefix": "http://127.0.0.1:9001/tas", "managedResources": [{"name": "cpu"}]},
     r"extenders\[0\].managedResources\[0\].name: 'cpu' is not an extended resource name"),
    ({"urlPrefix": "http://127.0.0.1:9001/tas", "managedResources": [{"name": "example.com/a"}, {"name": "example.com/a"}]},
     r"managed by extenders\[0\] already"),
])
def test_a_file_kube_scheduler_would_refuse_after_the_merge_is_not_written(node, extender, words):
    config = yaml.safe_load(USER_CONFIG)
    config["extenders"] = [extender]
    with open(node["config_path"], "w") as handle:
        handle.write(yaml.safe_dump(config))
    before = files(node)
    with pytest.raises(FileError, match=words):
        kubeadm.run(node)
    assert files(node) == before


def test_the_kubespray_value_is_validated_as_kube_scheduler_would():
    with pytest.raises(OptionError, match="kube_scheduler_extenders: kube-scheduler would refuse it"):
        kubeadm.kubespray_extenders(URL, existing=[{"urlPrefix": "http://127.0.0.1:9001/tas", "prioritizeVerb": "p",
                                                    "weight": -1}])
    with pytest.raises(OptionError, match="^weight: "):
        kubeadm.kubespray_extenders(URL, weight=0)


class FakeKubelet(object):
    """The waits of one run: the first answers ``first`` (a seconds count, or a WaitTimeout to raise), the rollback's
    wait answers ``second``; records what the files held at each wait."""

    def __init__(self, node, first, second=1.0):
        self.node = node
        self.answers = [first, second]
        self.seen = []

    def __call__(self, before, url, flag, present, timeout):
        self.seen.append((files(self.node), present))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_scheduler_that_does_not_come_back_gets_its_previous_files(node, state):
    if state == "absent":
        kubeadm.run(node)  # the extender is in; taking it out is the change that fails here
    before = files(node)
    state_before = kubeadm._read_dir(node["state_dir"])
    kubelet = FakeKubelet(node, WaitTimeout("kube-scheduler 4242 runs but https://127.0.0.1:10259/healthz does not answer"))
    with pytest.raises(KubegpuError) as info:
        kubeadm.run(dict(node, state=state, wait=True), waiter=kubelet)
    message = str(info.value)
    assert "does not answer" in message and "were put back" in message and "healthy on them again" in message
    assert node["config_path"] in message and node["manifest"] in message
    assert files(node) == before  # byte for byte
    assert kubeadm._read_dir(node["state_dir"]) == state_before  # the record too
    assert kubelet.seen[0][0] != before and kubelet.seen[1][0] == before  # it waited on the new, then on the old
    assert kubelet.seen[1][1] is (state == "absent")  # the old manifest runs without --config on present's rollback


def test_a_rollback_that_does_not_come_back_either_says_so(node):
    kubelet = FakeKubelet(node, WaitTimeout("no kube-scheduler process yet"), WaitTimeout("no kube-scheduler process yet"))
    before = files(node)
    with pytest.raises(KubegpuError, match="did NOT come back on them either"):
        kubeadm.run(dict(node, wait=True), waiter=kubelet)
    assert files(node) == before


def test_a_healthy_scheduler_keeps_the_change(node):
    kubelet = FakeKubelet(node, 7.5)
    result = kubeadm.run(dict(node, wait=True), waiter=kubelet)
    assert result["waited_s"] == 7.5 and len(kubelet.seen) == 1 and kubelet.seen[0][1] is True
    assert yaml.safe_load(open(node["config_path"]))["extenders"] == [extender_entry(URL)]
