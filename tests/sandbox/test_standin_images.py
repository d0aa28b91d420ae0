# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in images (sandbox/standins, `make standin-images`): tagged as the collection's manifests name the
vendors' images, labelled as sandbox stand-ins, sharing one file system; and the device plugin image run as its pod
would be: a container of our own (``sp-<pid>``, label ``kubegpu.sp=1``) with the fake NVML library and a profile mounted
where NVIDIA's runtime and the node put them, the collection's config file at /config/config.yaml, and the kubelet's
socket directory shared with the test, where a test double of the kubelet's Registration service listens
(kubelet_double.py). It must register and list what the simulator's rules compute for that profile."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="grpcio is pinned in requirements-test.txt: run in the project's venv")

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "sandbox" / "standins")]

import standin_images as images  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_standins import api  # noqa: E402  pylint: disable=wrong-import-position
from kubegpu_standins.api import pb  # noqa: E402  pylint: disable=wrong-import-position
from kubelet_double import WAIT_S, KubeletRegistration  # noqa: E402  pylint: disable=wrong-import-position
from sandbox.k8s.devsim import rules  # noqa: E402  pylint: disable=wrong-import-position
from setup_steps import missing_setup  # noqa: E402  pylint: disable=wrong-import-position

LABEL = "kubegpu.sp=1"
# the Makefile's STANDIN_IMAGES_DIR (sandbox/standins/rules.mk), standin_images.py's default
STANDIN_IMAGES_DIR = os.environ.get("STANDIN_IMAGES_DIR") or str(Path.home() / ".cache" / "kubegpu" / "standin-images")
JANSSON = "/usr/lib/x86_64-linux-gnu/libjansson.so.4"


def _docker(*args, check=True):
    proc = subprocess.run(["docker"] + list(args), capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, "docker %s: %s" % (" ".join(args), proc.stderr)
    return proc


@pytest.fixture(scope="module")
def table():
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode != 0:
        missing_setup("no Docker engine answers (make docker-engine)")
    want = images.key(images.source_files(), images.distributions(), images.image_table())
    table = images.image_table()
    if not images.loaded(table, want):
        missing_setup("the stand-in images of key %s are not loaded: make standin-images" % want)
    return table, want


def _inspect(tag):
    return json.loads(_docker("image", "inspect", tag).stdout)[0]


def test_images_are_labelled_stand_ins_sharing_one_file_system(table):
    items, want = table
    nvidia = next(item for item in items if item["name"] == "nvidia-device-plugin")
    assert nvidia["env"]["NVIDIA_VISIBLE_DEVICES"] == "all"  # NVIDIA's runtime gives its pods the GPUs and NVML
    layers = set()
    for item in items:
        config = _inspect(item["tag"])
        labels = config["Config"]["Labels"]
        assert labels["kubegpu.standin-key"] == want and labels["kubegpu.standin"] == item["name"]
        assert "Not the vendor's software" in labels["org.opencontainers.image.description"]
        assert "stand-in" in labels["org.opencontainers.image.vendor"]
        assert (config["Config"]["Entrypoint"] or None) == item["entrypoint"]
        env = dict(line.split("=", 1) for line in config["Config"]["Env"] or [])
        assert {k: env.get(k) for k in item.get("env") or {}} == (item.get("env") or {})
        layers.add(tuple(config["RootFS"]["Layers"]))
    assert len(layers) == 1, "every stand-in image has the same layers, so a node imports them once"


def test_the_tar_holds_every_tag(table):
    items, want = table
    tarball = Path(images.tar_path(STANDIN_IMAGES_DIR, want))
    if not tarball.exists():
        missing_setup("%s is missing: make standin-images" % tarball)
    listing = subprocess.run(["tar", "-xOf", str(tarball), "manifest.json"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
    tags = {tag for entry in json.loads(listing) for tag in entry["RepoTags"]}
    assert {item["tag"].replace("docker.io/", "", 1) for item in items} == tags


def test_every_vendor_program_is_where_the_manifests_look(table):
    items, _want = table
    programs = __import__("kubegpu_standins.__main__", fromlist=["PROGRAMS"]).PROGRAMS
    script = "; ".join("test -x %s && sed -n 2p %s" % (path, path) for path, _module in programs.values())
    proc = _docker("run", "--rm", "--label", LABEL, "--network", "none", "--entrypoint", "/bin/sh", items[0]["tag"],
                   "-c", script)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(programs)
    for line, program in zip(lines, programs):
        assert "stand-in for %s:" % program in line and "not the vendor's software" in line


TIME_SLICING = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"


def test_device_plugin_image_registers_and_serves_in_a_container(table, tmp_path, fake_nvml_dir):
    items, _want = table
    image = next(item["tag"] for item in items if item["name"] == "nvidia-device-plugin")
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    (tmp_path / "config.yaml").write_text(TIME_SLICING)
    kubelet = KubeletRegistration(str(sockets))
    kubelet.start()
    name = "sp-%d" % os.getpid()
    profile = ROOT / "sandbox" / "profiles" / "v100x4.json"
    _docker("rm", "-f", name, check=False)
    try:
        # the collection's hardened security context for the plugin (_nvidia/manifests.py: no capability, no
        # privilege escalation)
        _docker("run", "-d", "--name", name, "--label", LABEL, "--network", "none", "--cap-drop", "ALL",
                "--security-opt", "no-new-privileges",
                "-v", "%s:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro" % (fake_nvml_dir / "libnvidia-ml.so.1"),
                # the fake NVML's one dependency (sandbox/fakenvml/README.md); NVIDIA's own library has none to bring
                "-v", "%s:%s:ro" % (JANSSON, JANSSON),
                "-v", "%s:/etc/fake-nvml/profile.json:ro" % profile,
                "-v", "%s:/config:ro" % tmp_path, "-e", "CONFIG_FILE=/config/config.yaml",
                "-v", "%s:/var/lib/kubelet/device-plugins" % sockets, image)
        request = kubelet.wait_for(1)[0]
        assert (request.resource_name, request.endpoint) == ("nvidia.com/gpu", "nvidia-gpu.sock")
        with open(profile, encoding="utf-8") as handle:
            expected = rules.plugin_devices(json.load(handle), rules.parse_config(TIME_SLICING))["nvidia.com/gpu"]
        import grpc  # pylint: disable=import-outside-toplevel
        with grpc.insecure_channel(api.unix_target(str(sockets / request.endpoint))) as channel:
            stub = api.Stub(channel, "DevicePlugin")
            stream = stub.ListAndWatch(pb.Empty(), timeout=WAIT_S)
            listed = next(stream).devices
            stream.cancel()
            answer = stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=[expected[0].id])]), timeout=WAIT_S)
        assert sorted(d.ID for d in listed) == sorted(d.id for d in expected)
        assert dict(answer.container_responses[0].envs) == {"NVIDIA_VISIBLE_DEVICES": expected[0].uuid}
        deadline = time.monotonic() + WAIT_S
        while "Registered device plugin" not in _docker("logs", name).stderr and time.monotonic() < deadline:
            time.sleep(0.2)  # the line follows the Register call's answer
        logs = _docker("logs", name).stderr
        assert "kubegpu sandbox stand-in, not NVIDIA's software" in logs and "Registered device plugin" in logs
        _docker("stop", "-t", "10", name)
        assert _docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
        assert not (sockets / "nvidia-gpu.sock").exists()
    finally:
        _docker("rm", "-f", name, check=False)
        kubelet.stop()


def test_device_plugin_image_imported_into_a_nodes_containerd_registers(table, tmp_path):
    """The path a kubelet node takes: the tar imported into a gpu node container's containerd (namespace k8s.io, as
    the kubelet's CRI reads it), the plugin started there from the image by its entry point with the node's fake NVML
    library, its dependency and its profile bind-mounted as a pod would get them, and the node's device plugin
    directory (shared with the test) holding the test double's kubelet.sock."""
    sys.path.insert(0, str(ROOT / "tests"))
    from node_container import NodeContainer  # pylint: disable=import-outside-toplevel
    _items, want = table
    tarball = Path(images.tar_path(STANDIN_IMAGES_DIR, want))
    if not tarball.exists():
        missing_setup("%s is missing: make standin-images" % tarball)
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    kubelet = KubeletRegistration(str(sockets))
    kubelet.start()
    profile = ROOT / "sandbox" / "profiles" / "t4.json"
    volumes = ["%s:/tmp/standin-images.tar:ro" % tarball, "%s:/var/lib/kubelet/device-plugins" % sockets,
               "%s:/etc/fake-nvml/profile.json:ro" % profile]
    binds = ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", JANSSON, "/etc/fake-nvml", "/var/lib/kubelet/device-plugins"]
    mounts = " ".join("--mount type=bind,src=%s,dst=%s,options=rbind:%s" % (p, p, "rw" if "kubelet" in p else "ro")
                      for p in binds)
    try:
        with NodeContainer("sp-node-%d" % os.getpid(), "sp", volumes=volumes) as node:
            start = time.monotonic()
            node.run("ctr -n k8s.io images import /tmp/standin-images.tar >/dev/null")
            print("import of %s into the node's containerd: %.1f s" % (tarball.name, time.monotonic() - start))
            listed = node.run("ctr -n k8s.io images ls -q").split()
            assert "nvcr.io/nvidia/k8s-device-plugin:v0.20.0" in listed
            node.run("ctr -n k8s.io run -d %s nvcr.io/nvidia/k8s-device-plugin:v0.20.0 sp-plugin" % mounts)
            request = kubelet.wait_for(1)[0]
            assert (request.resource_name, request.endpoint) == ("nvidia.com/gpu", "nvidia-gpu.sock")
            import grpc  # pylint: disable=import-outside-toplevel
            with grpc.insecure_channel(api.unix_target(str(sockets / request.endpoint))) as channel:
                stream = api.Stub(channel, "DevicePlugin").ListAndWatch(pb.Empty(), timeout=WAIT_S)
                devices = next(stream).devices
                stream.cancel()
            with open(profile, encoding="utf-8") as handle:
                assert [d.ID for d in devices] == [g["uuid"] for g in json.load(handle)["devices"]]
    finally:
        kubelet.stop()
