# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in NVIDIA device plugin (sandbox/standins) without a kubelet: its real process, over the fake NVML, against
a test double of the kubelet's Registration service only (``KubeletRegistration`` below: it records Register calls,
nothing else of the kubelet). The test then speaks the DevicePlugin API to the plugin's socket as the kubelet would.

What it checks: the messages match the kubelet's api.proto; what the plugin registers and lists is what the simulator's
rules compute from the same profile (one set of rules, read through NVML by the plugin and from the JSON by the
simulator); Allocate per device-list strategy and device-id strategy; the shared-resource refusal; preferred
allocations; re-registration after a kubelet restart; refusals that end the plugin; its socket gone after SIGTERM.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc", reason="grpcio is pinned in requirements-test.txt: run in the project's venv")

ROOT = Path(__file__).resolve().parents[2]
STANDINS = ROOT / "sandbox" / "standins"
PROFILES = ROOT / "sandbox" / "profiles"
sys.path[:0] = [str(STANDINS)]

from kubegpu_standins import allocate, api  # noqa: E402  pylint: disable=wrong-import-position
from kubelet_double import WAIT_S, KubeletRegistration  # noqa: E402  pylint: disable=wrong-import-position
from setup_steps import missing_setup  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_standins.api import pb  # noqa: E402  pylint: disable=wrong-import-position
from sandbox.k8s.devsim import rules  # noqa: E402  pylint: disable=wrong-import-position


class Plugin:
    """The stand-in plugin's process, with the fake NVML and a profile."""

    def __init__(self, tmp_path, lib_dir, profile, config=None, env=None):
        self.dir = tmp_path
        self.kubelet = KubeletRegistration(str(tmp_path))
        self.log = tmp_path / "plugin.log"
        self.env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir), FAKE_NVML_PROFILE=str(PROFILES / (profile + ".json")),
                        KUBELET_SOCKET=self.kubelet.socket, PYTHONPATH="%s:%s" % (STANDINS, ROOT), **(env or {}))
        self.env.pop("CONFIG_FILE", None)
        if config is not None:
            (tmp_path / "config.yaml").write_text(config)
            self.env["CONFIG_FILE"] = str(tmp_path / "config.yaml")
        self.proc = None

    def start(self):
        self.kubelet.start()
        with open(self.log, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "kubegpu_standins", "nvidia-device-plugin"],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def run_to_exit(self):
        self.kubelet.start()
        proc = subprocess.run([sys.executable, "-m", "kubegpu_standins", "nvidia-device-plugin"], env=self.env,
                              capture_output=True, text=True, timeout=WAIT_S, check=False)
        self.kubelet.stop()
        return proc

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT_S)
        self.kubelet.stop()

    def logs(self, wanted=None):
        """The plugin's log; with ``wanted``, once it holds that text (bounded wait: a line can follow the RPC)."""
        deadline = time.monotonic() + WAIT_S
        while wanted is not None and wanted not in self.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.log.read_text()

    def stub(self, endpoint):
        channel = grpc.insecure_channel(api.unix_target(str(self.dir / endpoint)))
        return channel, api.Stub(channel, "DevicePlugin")


@pytest.fixture
def plugin(tmp_path, fake_nvml_dir):
    started = []

    def make(profile, config=None, env=None):
        item = Plugin(tmp_path, fake_nvml_dir, profile, config, env).start()
        started.append(item)
        return item

    yield make
    for item in started:
        item.stop()


def _expected(profile, config_text=None, env=None):
    """What the simulator's rules compute from the profile's JSON: {resource: [device id]}."""
    config = rules.parse_config(config_text, env or {})
    with open(PROFILES / (profile + ".json"), encoding="utf-8") as handle:
        return {name: [d.id for d in devs] for name, devs in rules.plugin_devices(json.load(handle), config).items()}


def _listed(item, endpoint):
    channel, stub = item.stub(endpoint)
    with channel:
        stream = stub.ListAndWatch(pb.Empty(), timeout=WAIT_S)
        first = next(stream)
        stream.cancel()
    return first.devices


def _allocate(item, endpoint, *requests):
    channel, stub = item.stub(endpoint)
    with channel:
        return stub.Allocate(pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=ids) for ids in requests]), timeout=WAIT_S)


# --- the API's messages are the kubelet's

def _go_mod_cache():
    return Path(os.environ.get("GOMODCACHE") or Path.home() / ".cache" / "kubegpu" / "go" / "mod")


def test_descriptors_match_the_kubelets_api_proto():
    protos = sorted(_go_mod_cache().glob("k8s.io/kubelet@v*/pkg/apis/deviceplugin/v1beta1/api.proto"))
    if not protos:
        pytest.skip("k8s.io/kubelet is not in the Go module cache (%s): `make k8s-binaries` downloads it"
                    % _go_mod_cache())
    text = re.sub(r"/\*.*?\*/", "", protos[-1].read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    messages = {}
    for name, body in re.findall(r"message\s+(\w+)\s*\{([^}]*)\}", text):
        messages[name] = [(f, int(n), t, bool(rep)) for rep, t, f, n in
                          re.findall(r"(repeated\s+)?([\w<>, ]+?)\s+(\w+)\s*=\s*(\d+);", body)]
    services = {name: {m: (req, resp, bool(stream)) for m, req, stream, resp in
                       re.findall(r"rpc\s+(\w+)\s*\((\w+)\)\s*returns\s*\((stream\s+)?(\w+)\)", body)}
                for name, body in re.findall(r"service\s+(\w+)\s*\{(.*?)\n\}", text, flags=re.S)}
    assert services == api.SERVICES
    assert set(messages) == set(api.MESSAGES)
    scalar = {"string": api._STRING, "bool": api._BOOL, "int64": api._INT64, "int32": api._INT32}  # pylint: disable=protected-access
    for name, fields in messages.items():
        ours = list(api.MESSAGES[name])
        theirs = [(f, n, api.MAP if t.startswith("map<") else scalar.get(t, t), rep) for f, n, t, rep in fields]
        assert ours == theirs, name
    assert re.search(r"^package v1beta1;", text, flags=re.M)


# --- registration and listing: the simulator's rules, read through NVML

TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 3
"""


def test_registers_each_resource_and_lists_what_the_rules_compute(plugin):
    item = plugin("v100x4", TIME_SLICING)
    request = item.kubelet.wait_for(1)[0]
    assert (request.version, request.endpoint, request.resource_name) == ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu")
    assert request.options.get_preferred_allocation_available and not request.options.pre_start_required
    devices = _listed(item, "nvidia-gpu.sock")
    assert sorted(d.ID for d in devices) == sorted(_expected("v100x4", TIME_SLICING)["nvidia.com/gpu"])
    assert len(devices) == 12 and {d.health for d in devices} == {"Healthy"}
    assert all(re.match(r"^GPU-[0-9a-f-]{36}::[0-2]$", d.ID) for d in devices)
    channel, stub = item.stub("nvidia-gpu.sock")
    with channel:
        assert stub.GetDevicePluginOptions(pb.Empty(), timeout=WAIT_S).get_preferred_allocation_available
        assert stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=[devices[0].ID]),
                                      timeout=WAIT_S) == pb.PreStartContainerResponse()
    line = "Registered device plugin for 'nvidia.com/gpu' with Kubelet"
    assert line in item.logs(line)


def test_mig_mixed_registers_one_socket_per_profile(plugin):
    config = "version: v1\nflags:\n  migStrategy: mixed\n"
    expected = _expected("a100x8-mig-mixed", config)
    item = plugin("a100x8-mig-mixed", config)
    requests = item.kubelet.wait_for(len(expected))
    assert {r.resource_name: r.endpoint for r in requests} == {
        name: "nvidia-%s.sock" % name.split("/", 1)[1] for name in expected}
    for name, ids in expected.items():
        assert sorted(d.ID for d in _listed(item, "nvidia-%s.sock" % name.split("/", 1)[1])) == sorted(ids)
    answer = _allocate(item, "nvidia-mig-1g.10gb.sock", expected["nvidia.com/mig-1g.10gb"][:1])
    assert dict(answer.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": expected["nvidia.com/mig-1g.10gb"][0]}


# --- Allocate per strategy (internal/plugin/server.go getAllocateResponse)

def test_allocate_envvar_strips_replicas_and_refuses_two_shared_devices(plugin):
    config = TIME_SLICING.replace("  timeSlicing:\n", "  timeSlicing:\n    failRequestsGreaterThanOne: true\n")
    item = plugin("v100x4", config)
    item.kubelet.wait_for(1)
    ids = sorted(d.ID for d in _listed(item, "nvidia-gpu.sock"))
    answer = _allocate(item, "nvidia-gpu.sock", ids[:1])
    assert dict(answer.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": ids[0].split("::")[0]}
    assert not answer.container_responses[0].mounts and not answer.container_responses[0].cdi_devices
    with pytest.raises(grpc.RpcError) as err:
        _allocate(item, "nvidia-gpu.sock", ids[:2])
    assert "maximum request size for shared resources is 1; found 2" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        _allocate(item, "nvidia-gpu.sock", ["GPU-00000000-0000-0000-0000-000000000000"])
    assert "unknown device" in err.value.details()


@pytest.fixture
def driver_root(tmp_path, fake_nvml_dir):
    """A node's driver root as the plugin's container sees it at /driver-root, for v100x4: the fake NVML under the
    driver version's name, an empty libcuda of that version (only its name is read), /dev/nvidia<minor> and
    /dev/nvidiactl, and the node's nvidia-ctk at /usr/bin/nvidia-ctk (the toolkit package's path; here the one
    `make nvidia-ctk` builds: test_nvlib_probe.nvidia_ctk_binary). Device nodes need root."""
    from test_nvlib_probe import nvidia_ctk_binary  # pylint: disable=import-outside-toplevel
    binary = nvidia_ctk_binary()
    if not os.access(binary, os.X_OK):
        missing_setup("no nvidia-ctk binary at %s; build it with `make nvidia-ctk` (or set NVIDIA_CTK)" % binary)
    if os.geteuid() != 0:
        pytest.skip("a driver root with device nodes needs root")
    with open(PROFILES / "v100x4.json", encoding="utf-8") as handle:
        profile = json.load(handle)
    root = tmp_path / "driver-root"
    libdir = root / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    version = profile["driver_version"]
    (libdir / ("libcuda.so.%s" % version)).write_bytes(b"")
    (libdir / ("libnvidia-ml.so.%s" % version)).write_bytes((fake_nvml_dir / "libnvidia-ml.so.1").read_bytes())
    (libdir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.%s" % version)
    (root / "dev").mkdir()
    for gpu in profile["devices"]:
        os.mknod(root / "dev" / ("nvidia%d" % gpu["minor_number"]), 0o20666, os.makedev(195, gpu["minor_number"]))
    os.mknod(root / "dev" / "nvidiactl", 0o20666, os.makedev(195, 255))
    (root / "usr" / "bin").mkdir()
    (root / "usr" / "bin" / "nvidia-ctk").symlink_to(binary)
    return root


@pytest.mark.parametrize("strategy", ["volume-mounts", "cdi-annotations", "cdi-cri", "envvar,cdi-cri"])
def test_allocate_per_device_list_strategy(plugin, strategy, driver_root, tmp_path):
    cdi_root = tmp_path / "cdi"
    item = plugin("v100x4", env={"DEVICE_LIST_STRATEGY": strategy, "CONTAINER_DRIVER_ROOT": str(driver_root),
                                 "KUBEGPU_STANDIN_CDI_ROOT": str(cdi_root)})
    item.kubelet.wait_for(1)
    spec_file = cdi_root / "k8s.device-plugin.nvidia.com-gpu.json"
    if "cdi" in strategy:
        # the spec the runtime resolves the names against: NVIDIA's generator on the driver root, moved to the host's
        with open(spec_file, encoding="utf-8") as handle:
            spec = json.load(handle)
        assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
        with open(PROFILES / "v100x4.json", encoding="utf-8") as handle:
            gpus = json.load(handle)["devices"]
        nodes = {d["name"]: [n.get("hostPath", n["path"]) for n in d["containerEdits"]["deviceNodes"]]
                 for d in spec["devices"]}
        assert {g["uuid"]: ["/dev/nvidia%d" % g["minor_number"]] for g in gpus}.items() <= nodes.items(), nodes
        assert str(driver_root) not in json.dumps(spec)
    else:
        assert not spec_file.exists()
    ids = sorted(d.ID for d in _listed(item, "nvidia-gpu.sock"))[:2]
    response = _allocate(item, "nvidia-gpu.sock", ids).container_responses[0]
    envs, names = dict(response.envs), ["k8s.device-plugin.nvidia.com/gpu=%s" % i for i in ids]
    if strategy == "volume-mounts":
        assert envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
        assert [(m.host_path, m.container_path) for m in response.mounts] == [
            ("/dev/null", "/var/run/nvidia-container-devices/" + i) for i in ids]
    elif strategy == "cdi-annotations":
        assert envs == {} and not response.cdi_devices
        [(key, value)] = response.annotations.items()
        assert re.match(r"^cdi\.k8s\.io/nvidia-device-plugin_[0-9a-f-]{36}$", key) and value == ",".join(names)
    elif strategy == "cdi-cri":
        assert envs == {} and not response.annotations
        assert [d.name for d in response.cdi_devices] == names
    else:
        assert envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}
        assert [d.name for d in response.cdi_devices] == names


def test_allocate_index_strategy_and_device_specs(plugin):
    item = plugin("v100x4", env={"DEVICE_ID_STRATEGY": "index", "PASS_DEVICE_SPECS": "true"})
    item.kubelet.wait_for(1)
    with open(PROFILES / "v100x4.json", encoding="utf-8") as handle:
        gpus = json.load(handle)["devices"]
    response = _allocate(item, "nvidia-gpu.sock", [gpus[2]["uuid"], gpus[0]["uuid"]]).container_responses[0]
    assert dict(response.envs) == {"NVIDIA_VISIBLE_DEVICES": "2,0"}
    assert [(d.container_path, d.host_path, d.permissions) for d in response.devices] == [
        ("/dev/nvidia%d" % gpus[i]["minor_number"], "/dev/nvidia%d" % gpus[i]["minor_number"], "rw") for i in (2, 0)]


def test_preferred_allocation_spreads_replicas(plugin):
    item = plugin("v100x4", TIME_SLICING)
    item.kubelet.wait_for(1)
    ids = [d.ID for d in _listed(item, "nvidia-gpu.sock")]
    channel, stub = item.stub("nvidia-gpu.sock")
    with channel:
        answer = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=4)]), timeout=WAIT_S)
    chosen = list(answer.container_responses[0].deviceIDs)
    assert len(chosen) == 4 and len({c.split("::")[0] for c in chosen}) == 4  # distributed: one replica per GPU


def test_preferred_allocation_policies():
    """internal/rm/allocate.go greedyAlloc: distributed spreads over GPUs, packed fills the most used GPU first."""
    config = rules.parse_config(TIME_SLICING)
    packed = rules.parse_config(TIME_SLICING, {"SHARED_DEVICES_ALLOCATION_POLICY": "packed"})
    with open(PROFILES / "v100x4.json", encoding="utf-8") as handle:
        devices = rules.plugin_devices(json.load(handle), config)["nvidia.com/gpu"]
    gpu = [d.uuid for d in devices[::3]]
    available = [d.id for d in devices if d.id != gpu[1] + "::0"]  # one replica of GPU 1 is in use
    spread = allocate.preferred(devices, config, available, [], 3)
    assert len({replica.split("::")[0] for replica in spread}) == 3 and gpu[1] not in {s.split("::")[0] for s in spread}
    assert allocate.preferred(devices, packed, available, [], 2) == [gpu[1] + "::1", gpu[1] + "::2"]
    assert allocate.preferred(devices, config, available, [available[5]], 1) == [available[5]]
    with pytest.raises(allocate.AllocateError):
        allocate.preferred(devices, config, available[:2], [], 3)


# --- life cycle

def test_reregisters_after_a_kubelet_restart_and_removes_its_socket_on_sigterm(plugin):
    item = plugin("t4")
    item.kubelet.wait_for(1)
    item.logs("Registered device plugin")  # its Register call has its answer: the kubelet may go now
    item.kubelet.stop()  # the kubelet goes away and comes back: a new kubelet.sock
    item.kubelet.start()
    try:
        second = item.kubelet.wait_for(2)[1]
    except AssertionError as exc:
        raise AssertionError("%s\nplugin log:\n%s" % (exc, item.logs())) from exc
    assert second.resource_name == "nvidia.com/gpu" and second.endpoint == "nvidia-gpu.sock"
    assert len(_listed(item, "nvidia-gpu.sock")) == 1
    item.proc.send_signal(signal.SIGTERM)
    assert item.proc.wait(timeout=WAIT_S) == 0
    assert not (item.dir / "nvidia-gpu.sock").exists()
    assert "restarting" in item.logs("restarting")


@pytest.mark.parametrize("profile, config, message", [
    ("v100x4", TIME_SLICING.replace("replicas: 3", "replicas: 1"), "number of replicas must be >= 2"),
    ("failure-device-lost", None, "error getting device handle for index '1': GPU_IS_LOST"),
    ("a100-mig-compute-instances", "flags: {migStrategy: mixed}",
     "MIG profile '1c.2g.20gb' does not match any resource patterns"),
    ("failure-driver-not-loaded", None, "failed to initialize NVML"),
])
def test_refusals_end_the_plugin_with_its_reason(tmp_path, fake_nvml_dir, profile, config, message):
    proc = Plugin(tmp_path, fake_nvml_dir, profile, config).run_to_exit()
    assert proc.returncode == 1, proc.stderr
    assert message in proc.stderr
    assert not list(tmp_path.glob("nvidia-*.sock"))


def test_health_check_marks_the_gpu_of_an_xid_event_unhealthy(plugin):
    """failure-xid-79: the profile's XID 79 event reaches the plugin through NVML's event set; ListAndWatch sends a new
    list with that device Unhealthy (rules.unhealthy_device_ids says which)."""
    with open(PROFILES / "failure-xid-79.json", encoding="utf-8") as handle:
        profile = json.load(handle)
    expected = rules.unhealthy_device_ids(profile, rules.parse_config(None))
    item = plugin("failure-xid-79")
    item.kubelet.wait_for(1)
    channel, stub = item.stub("nvidia-gpu.sock")
    deadline = time.monotonic() + WAIT_S
    with channel:
        stream = stub.ListAndWatch(pb.Empty(), timeout=WAIT_S)
        for response in stream:
            bad = {d.ID for d in response.devices if d.health == "Unhealthy"}
            if bad or time.monotonic() > deadline:
                break
        stream.cancel()
    assert {"nvidia.com/gpu": bad} == expected


MPS = """version: v1
flags:
  mpsRoot: /run/nvidia/mps
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""


def test_mps_plugin_serves_once_the_mps_daemon_started(plugin, tmp_path, fake_nvml_dir):
    """The MPS control daemon stand-in leaves /mps/<resource>/{pipe,log,.started} (KUBEGPU_STANDIN_MPS_ROOT moves /mps
    for the test); the plugin registers only after .started, gives workloads the pipe and shm, refuses two replicas."""
    root = tmp_path / "mps"
    env = {"KUBEGPU_STANDIN_MPS_ROOT": str(root)}
    waiting = plugin("t4", MPS, env=env)
    assert "Waiting for the MPS control daemon" in waiting.logs("Waiting for the MPS control daemon")
    waiting.proc.send_signal(signal.SIGTERM)  # a plugin that waits for its daemon still stops when told to
    assert waiting.proc.wait(timeout=WAIT_S) == 0
    waiting.kubelet.stop()
    item = plugin("t4", MPS, env=env)
    assert "Waiting for the MPS control daemon" in item.logs("Waiting for the MPS control daemon")
    assert not item.kubelet.requests
    daemon_env = dict(item.env)
    init = subprocess.run([sys.executable, "-m", "kubegpu_standins", "mps-control-daemon", "mount-shm"], env=daemon_env,
                          capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert init.returncode == 0 and (root / "shm").is_dir(), init.stderr
    daemon = subprocess.Popen([sys.executable, "-m", "kubegpu_standins", "mps-control-daemon"], env=daemon_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        request = item.kubelet.wait_for(1)[0]
        assert request.resource_name == "nvidia.com/gpu"
        assert (root / "nvidia.com/gpu" / ".started").exists() and (root / "nvidia.com/gpu" / "pipe").is_dir()
        ids = sorted(d.ID for d in _listed(item, "nvidia-gpu.sock"))
        assert len(ids) == 2
        response = _allocate(item, "nvidia-gpu.sock", ids[:1]).container_responses[0]
        assert response.envs["CUDA_MPS_PIPE_DIRECTORY"] == str(root / "nvidia.com/gpu" / "pipe")
        assert [(m.host_path, m.container_path) for m in response.mounts] == [
            ("/run/nvidia/mps/nvidia.com/gpu/pipe", str(root / "nvidia.com/gpu" / "pipe")),
            ("/run/nvidia/mps/shm", "/dev/shm")]
        with pytest.raises(grpc.RpcError) as err:
            _allocate(item, "nvidia-gpu.sock", ids)
        assert "maximum request size for shared resources is 1; found 2" in err.value.details()
    finally:
        daemon.send_signal(signal.SIGTERM)
        _out, err_text = daemon.communicate(timeout=WAIT_S)
    assert daemon.returncode == 0, err_text
    assert "Staring MPS daemon" in err_text and not (root / "nvidia.com/gpu" / ".started").exists()


def test_the_kubelets_own_device_plugin_code_registers_lists_and_allocates(tmp_path, fake_nvml_dir, driver_root):
    """kubeletcheck (sandbox/standins/kubeletcheck: k8s.io/kubernetes' pkg/kubelet/cm/devicemanager/plugin/v1beta1, the
    kubelet's Registration server and plugin client, in Go) in place of the Python test double: the kubelet's checks
    and its generated messages accept the stand-in's registration, list and Allocate answers."""
    build = subprocess.run([str(STANDINS / "kubeletcheck" / "build.sh"), "--if-cached"], capture_output=True, text=True,
                           timeout=60, check=False)
    if build.returncode != 0:
        missing_setup(build.stderr.strip() or "kubeletcheck is not built: make standins-kubeletcheck")
    check = subprocess.Popen([build.stdout.strip(), "-dir", str(tmp_path), "-count", "2"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    item = Plugin(tmp_path, fake_nvml_dir, "v100x4", TIME_SLICING, env={
        "DEVICE_LIST_STRATEGY": "envvar,cdi-cri", "CONTAINER_DRIVER_ROOT": str(driver_root),
        "KUBEGPU_STANDIN_CDI_ROOT": str(tmp_path / "cdi")})
    item.kubelet.start = item.kubelet.stop = lambda: None  # kubeletcheck serves kubelet.sock, not the Python double
    item.start()
    try:
        out, err = check.communicate(timeout=WAIT_S + 10)
    finally:
        item.stop()
    assert check.returncode == 0, err
    got = json.loads(out)
    assert got["resource"] == "nvidia.com/gpu" and got["getPreferredAllocationAvailable"]
    assert sorted(d["id"] for d in got["devices"]) == sorted(_expected("v100x4", TIME_SLICING)["nvidia.com/gpu"])
    assert len({p.split("::")[0] for p in got["preferred"]}) == 2
    gpus = ",".join(p.split("::")[0] for p in got["preferred"])
    assert got["allocate"]["envs"] == {"NVIDIA_VISIBLE_DEVICES": gpus}
    assert [d["name"] for d in got["allocate"]["cdi_devices"]] == ["k8s.device-plugin.nvidia.com/gpu=" + g for g in gpus.split(",")]


# --- one set of rules: through NVML (the stand-in) and from the JSON (the simulator), on every shipped profile

def _nvidia_profiles():
    out = []
    for path in sorted(PROFILES.glob("*.json")):
        with open(path, encoding="utf-8") as handle:
            if json.load(handle).get("vendor", "nvidia") == "nvidia":
                out.append(path.stem)
    return out


def _outcome(profile, config):
    try:
        return {name: sorted(d.id for d in devs) for name, devs in rules.plugin_devices(profile, config).items()}
    except rules.PluginError as exc:
        return "exits: %s" % exc


@pytest.mark.parametrize("name", _nvidia_profiles())
def test_nvml_view_gives_the_rules_the_profiles_outcome(name, fake_nvml_dir):
    """For every shipped NVIDIA profile and MIG strategy, the rules reach the same devices (or the same exit) from what
    the stand-in reads through the fake NVML as from the profile's JSON, which the simulator reads."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_PROFILE=str(PROFILES / (name + ".json")))
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("standin_nvml_view_worker.py"))], env=env,
                          capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    with open(PROFILES / (name + ".json"), encoding="utf-8") as handle:
        profile = json.load(handle)
    for strategy in rules.MIG_STRATEGIES:
        config = rules.parse_config("flags: {migStrategy: %s}" % strategy)
        expected = _outcome(profile, config)
        if "init_error" in view:
            assert isinstance(expected, str) and "failed to initialize NVML" in expected, (strategy, view)
            continue
        assert _outcome(view, config) == expected, strategy


def test_nano_gpu_agent_stand_in_registers_its_percent_resource_and_lists_it(tmp_path):
    """nano-gpu's agent stand-in (kubegpu_standins/nanogpu.py) serves and registers through the same helpers as the
    NVIDIA plugin's stand-in: the kubelet gets nano-gpu/gpu-percent on nano-gpu.sock, with pre_start_required."""
    from kubegpu_standins import nanogpu  # pylint: disable=import-outside-toplevel
    kubelet = KubeletRegistration(str(tmp_path))
    kubelet.start()
    agent = nanogpu.NanoServer(["gpu-0-%d" % n for n in range(3)], str(tmp_path))
    try:
        agent.serve()
        agent.register(kubelet.socket)
        request = kubelet.wait_for(1)[0]
        assert (request.version, request.endpoint, request.resource_name) == (
            api.VERSION, "nano-gpu.sock", "nano-gpu/gpu-percent")
        assert request.options.pre_start_required
        with grpc.insecure_channel(api.unix_target(agent.socket)) as channel:
            stream = api.Stub(channel, "DevicePlugin").ListAndWatch(pb.Empty(), timeout=WAIT_S)
            assert sorted(d.ID for d in next(stream).devices) == ["gpu-0-0", "gpu-0-1", "gpu-0-2"]
            stream.cancel()
    finally:
        agent.stop()
        kubelet.stop()
