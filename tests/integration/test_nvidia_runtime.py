# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's own container runtime on a gpu node container, and the proof image through it.

Each node is a systemd container like the fleet's (kubegpu/node:gpu, tests/node_container.py) with a GPU profile. In it:
the stand-in toolkit package nvidia-container-toolkit-base, which ships NVIDIA's nvidia-container-runtime, nvidia-ctk
and nvidia-cdi-hook built from source (sandbox/nvidia-runtime, sandbox/aptrepo), is installed with dpkg; the
collection's nvidia_runtime_config registers the runtime with containerd, which is restarted; the proof image
(sandbox/proof, tagged as PROOF_IMAGE, from the kubelet nodes' loader directory) is imported into containerd; containers are run with ``ctr run`` and the runc
binary containerd's configuration names for the runtime (``containerd config dump``), as NVIDIA's guide runs ctr; on
h100 also with ``docker run``, docker's default runtime made nvidia by the same module.

Proves (sandbox/fakenvml/README.md, "In containers"):
- NVIDIA's CDI generator makes from the fake NVML a spec of the shape it made on a real H200 (the record of
  tests/realgpu/test_real_runtime.py): the same device names, GPU device nodes and hooks;
- the runtime's mode ``auto`` resolves to ``jit-cdi`` (its own log says so) and the container gets /dev/nvidia<minor>,
  /dev/nvidiactl and the fake libnvidia-ml.so.1, whose nvmlInit works there: the proof reads the driver's CUDA version
  and names the GPU and its device node;
- everything the fake reads arrives through what the runtime mounts: the profile (no mount of ours), and the MIG state
  (a MIG mode set on the node after boot is what the container sees);
- NVIDIA_VISIBLE_DEVICES=1 gives the second GPU only, and so does its UUID; a CDI name (runtime.nvidia.com/gpu=0)
  the first only; a MIG device's UUID its GPU's node and its two capability devices;
- without the runtime, or with NVIDIA_VISIBLE_DEVICES=void, there is no driver in the container: CUDA's "insufficient
  driver" message; with NVIDIA_VISIBLE_DEVICES=none the driver but no GPU: "no CUDA-capable device is detected";
- the stand-in device plugin's image, run as its pod would be, finds NVML, the profile's 8 GPUs and 31 MIG devices
  and every device node, with nothing mounted;
- the proof passes on h100 (driver 550, CUDA 12.4: a CUDA 12.5 image runs there by CUDA's minor version
  compatibility) with vectorAdd's lines and "Test PASSED", and fails on gtx1060 (driver 390.30, CUDA 9.1) with CUDA's
  "CUDA driver version is insufficient for CUDA runtime version".
"""

import json
import os
import re
import subprocess
import time

import pytest

from node_container import BOOT_TIMEOUT, IMAGE, NodeContainer, docker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
APTREPO = os.path.join(ROOT, ".build", "aptrepo")
# A worktree whose node images are not rebuilt yet can name another image that has the driver files unit
NODE_IMAGE = os.environ.get("KUBEGPU_RUNTIME_NODE_IMAGE", IMAGE)
INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
VECTORADD = ["[Vector addition of 50000 elements]",
             "Copy input data from the host memory to the CUDA device",
             "CUDA kernel launch with 196 blocks of 256 threads",
             "Copy output data from the CUDA device to the host memory",
             "Test PASSED",
             "Done"]
# What NVIDIA's CDI generator made on a real H200 (tests/realgpu/test_real_runtime.py, recorded by tests/realgpu/record.sh)
REAL_RECORD = os.path.join(ROOT, "tests", "fixtures", "realgpu", "h200-580.159.04-runtime.json")
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Register NVIDIA's runtime with {runtime}
      kubegpu.cluster.nvidia_runtime_config:
        runtime: {runtime}
      vars:
        ansible_python_interpreter: /opt/kubegpu/venv/bin/python  # tomlkit, as the container_toolkit role runs it
    - name: Restart {runtime}
      ansible.builtin.systemd:
        name: {runtime}
        state: restarted
"""
# The node's side: the toolkit package, the runtime's debug log, containerd configured and the proof image imported
SETUP = r"""
set -euo pipefail
dpkg -i /srv/kubegpu-apt/stable/deb/amd64/nvidia-container-toolkit-base_{version}_amd64.deb >/dev/null
mkdir -p /etc/nvidia-container-runtime
nvidia-ctk config default --output /etc/nvidia-container-runtime/config.toml 2>/dev/null
nvidia-ctk config --in-place --set nvidia-container-runtime.debug=/var/log/nvidia-container-runtime.log \
    --set nvidia-container-runtime.log-level=debug 2>/dev/null
ctr -n default images import /srv/kubegpu-images/{tar} >/dev/null
"""
# What the mig role does through NVML on the node: MIG mode on GPU 0, one 1g GPU instance and its compute instance
MIG_ONE_DEVICE = r"""
/opt/kubegpu/venv/bin/python - <<'PY'
import pynvml as n
n.nvmlInit()
gpu = n.nvmlDeviceGetHandleByIndex(0)
n.nvmlDeviceSetMigMode(gpu, 1)
gi = n.nvmlDeviceCreateGpuInstance(gpu, n.nvmlDeviceGetGpuInstanceProfileInfo(gpu, n.NVML_GPU_INSTANCE_PROFILE_1_SLICE).id)
n.nvmlGpuInstanceCreateComputeInstance(gi, n.nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gi, n.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, n.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).id)
PY
"""


def _make(*targets):
    proc = subprocess.run(["make", "--no-print-directory", "-s", "-C", ROOT] + list(targets), capture_output=True,
                          text=True, check=False, timeout=1800)
    assert proc.returncode == 0, "make %s failed:\n%s%s" % (" ".join(targets), proc.stdout[-4000:], proc.stderr[-4000:])
    return proc.stdout


@pytest.fixture(scope="module")
def built():
    """The apt repository, and the kubelet nodes' loader directory with the proof image and the stand-in images (cached
    by key: cheap when built); {tar: the proof's archive there, image: its name, version: the newest toolkit's}."""
    _make("apt-repo", "kubelet-images")
    image = _make("proof-image-tar").split()[1]
    loader = os.environ.get("KUBELET_IMAGE_DIR") or os.path.join(ROOT, ".build", "node-image-tars")
    with open(os.path.join(ROOT, "sandbox", "aptrepo", "versions.env"), encoding="utf-8") as handle:
        versions = next(line.split("=", 1)[1].split() for line in handle if line.startswith("TOOLKIT_VERSIONS="))
    return {"tar": os.path.join(loader, "proof.tar"), "image": image, "version": versions[-1],
            "standins": os.path.join(loader, "standins.tar")}


class ExitedAtStart(AssertionError):
    pass


class RuntimeNode(NodeContainer):
    """A gpu node container with a profile, NVIDIA's runtime installed and registered with containerd."""

    def __init__(self, profile, built):
        self.profile = profile
        self.built = built
        super().__init__("kubegpu-rt-%s-%d" % (profile, os.getpid()), label="nvidia_runtime", image=NODE_IMAGE,
                         volumes=["%s:/etc/fake-nvml/profile.json:ro" % os.path.join(ROOT, "sandbox", "profiles",
                                                                                     profile + ".json"),
                                  "%s:/srv/kubegpu-apt:ro" % APTREPO,
                                  "%s:/srv/kubegpu-images:ro" % os.path.dirname(built["tar"])])

    def wait_booted(self, timeout=BOOT_TIMEOUT):
        """NodeContainer's wait, but a container that is gone is reported at once: on this machine a node container
        now and then exits with status 255 within milliseconds of its start, without a line of output (seen several
        times in a row while molecule scenarios started theirs), where the base class would wait out its timeout."""
        deadline = time.monotonic() + timeout
        while True:
            status = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", self.name).stdout.strip()
            if status.startswith("exited"):
                raise ExitedAtStart("%s exited at its start (%s)" % (self.name, status))
            state = docker("exec", self.name, "timeout", "10", "systemctl", "is-system-running", "--wait",
                           timeout=20).stdout.strip()
            if state in ("running", "degraded"):
                return
            assert time.monotonic() < deadline, "systemd did not boot in %s: %s" % (self.name, state)
            time.sleep(0.2)

    def __enter__(self):
        for attempt in range(3):  # bounded: an exit at the start is tried again twice
            try:
                super().__enter__()
                break
            except ExitedAtStart:
                if attempt == 2:
                    raise
        try:
            assert self.run("systemctl is-enabled fake-nvml-driver-files.service", check=False).strip() == "enabled", \
                "%s lacks fake-nvml-driver-files.service: rebuild the node images (make node-images)" % self.image
            self.run(SETUP.format(version=self.built["version"], tar=os.path.basename(self.built["tar"])))
            return self
        except BaseException:
            super().__exit__(None, None, None)
            raise

    def configure(self, tmp_path, runtime="containerd"):
        rc, tasks = self.play(PLAY.format(runtime=runtime), tmp_path)
        assert rc == 0, [(name, result.get("msg")) for name, result in tasks]
        if runtime == "docker":
            return None
        dump = self.run("containerd config dump")
        match = re.search(r'\.runtimes\.nvidia\.options\]\s*\n(?:.*\n)*?\s*BinaryName = "([^"]+)"', dump)
        assert match and match.group(1) == "/usr/bin/nvidia-container-runtime", dump
        return match.group(1)

    def docker_run(self, *options):
        """``docker run`` of the proof image on the node's docker: (rc, stdout, stderr)."""
        proc = docker("exec", self.name, "timeout", "60", "docker", "run", "--rm", *options, self.built["image"],
                      timeout=90)
        return proc.returncode, proc.stdout, proc.stderr

    def ctr_run(self, env=None, runc=None):
        """``ctr run`` of the proof image (through ``runc``, the runtime's binary, when given): (rc, stdout, stderr)."""
        argv = ["ctr", "-n", "default", "run", "--rm"]
        argv += ["--runc-binary", runc] if runc else []
        argv += ["--env", env] if env else []
        argv += [self.built["image"], "proof-%d" % os.getpid()]
        proc = docker("exec", self.name, "timeout", "60", *argv, timeout=90)
        return proc.returncode, proc.stdout, proc.stderr

    def runtime_log(self):
        return self.run("cat /var/log/nvidia-container-runtime.log; : > /var/log/nvidia-container-runtime.log")


def cdi_shape(spec):
    """What a spec of ``nvidia-ctk cdi generate --mode nvml`` is made of, without the machine's own names: the kinds of
    device names, each GPU's device nodes (path without the minor, major), the common device nodes, the hooks and the
    driver libraries mounted (their names without the driver version)."""
    mounts = [m["containerPath"] for m in spec["containerEdits"].get("mounts", [])]
    driver = next(re.sub(r".*libnvidia-ml[.]so[.]", "", m) for m in mounts if "/libnvidia-ml.so." in m)
    gpus = [d for d in spec["devices"] if d["name"] != "all"]
    return {
        "names": sorted("all" if d["name"] == "all" else "uuid" if d["name"].startswith(("GPU-", "MIG-")) else "index"
                        for d in spec["devices"]),
        "gpu_nodes": sorted({(n["path"].rstrip("0123456789"), n.get("major")) for d in gpus
                             for n in d["containerEdits"].get("deviceNodes", [])}),
        "common_nodes": sorted(n["path"] for n in spec["containerEdits"].get("deviceNodes", [])),
        "hooks": sorted({[a for a in h["args"] if a != "hook"][1] for h in spec["containerEdits"].get("hooks", [])}),
        "libraries": sorted({os.path.basename(m)[:-len("." + driver)] for m in mounts
                             if os.path.basename(m).startswith("lib") and m.endswith(".so." + driver)}),
    }


def test_proof_passes_on_h100_through_nvidia_runtime_in_jit_cdi_mode(built, tmp_path):
    with RuntimeNode("h100", built) as node:
        runc = node.configure(tmp_path)
        # the CDI spec NVIDIA's generator makes from the fake NVML (what the jit-cdi mode and the device plugin use)
        # next to the one it made on a real H200
        with open(REAL_RECORD, encoding="utf-8") as handle:
            real = cdi_shape(json.load(handle)["cdi_generate_nvml"])
        fake = cdi_shape(json.loads(node.run("nvidia-ctk cdi generate --mode nvml --format json 2>/dev/null")))
        # the same device names, GPU device nodes and hooks; the driver's files: the fake ships NVML alone, a real
        # driver also libcuda and the graphics, video and compute libraries (all named in the record); nvidia-modeset is
        # there where the driver's modeset module is loaded (the node images make it; the H200 machine had none)
        assert {k: fake[k] for k in ("names", "gpu_nodes", "hooks")} == {k: real[k] for k in ("names", "gpu_nodes", "hooks")}
        assert sorted(set(fake["common_nodes"]) - {"/dev/nvidia-modeset"}) == real["common_nodes"], (fake, real)
        assert fake["libraries"] == ["libnvidia-ml.so"] and set(fake["libraries"]) <= set(real["libraries"]), fake
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=all", runc)
        assert rc == 0, out + err
        assert out.splitlines() == VECTORADD
        assert "proof stand-in: driver CUDA 12.4, image built for CUDA 12.5.0" in err
        assert re.search(r"GPU 0: NVIDIA H100 80GB HBM3 \(GPU-[0-9a-f-]+\) at /dev/nvidia0, MIG off$", err, re.M), err
        log = node.runtime_log()
        assert "Auto-detected mode as 'jit-cdi'" in log, log[-3000:]
        # what the jit-cdi spec mounted: the library by its versioned name, the profile where the fake reads it
        for path in ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.127.05", "/etc/fake-nvml/profile.json",
                     "/dev/nvidia0", "/dev/nvidiactl"):
            assert "Selecting %s as %s" % (path, path) in log, path

        # the MIG state arrives too: a layout made on the node now (MIG on, one 1g.10gb MIG device; the profile has
        # MIG off) is what the next container's NVML reports
        node.run(MIG_ONE_DEVICE)
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=all", runc)
        assert rc == 0 and re.search(r"at /dev/nvidia0, MIG on, 1 MIG devices$", err, re.M), out + err
        assert "Selecting /var/lib/fake-nvml/mig-state.json as /var/lib/fake-nvml/mig-state.json" in node.runtime_log()

        # no runtime, or NVIDIA_VISIBLE_DEVICES=void: no driver in the container, as vectorAdd would find it (the image
        # asks for all GPUs, as NVIDIA's CUDA images do)
        for env, through in (("NVIDIA_VISIBLE_DEVICES=all", None), ("NVIDIA_VISIBLE_DEVICES=void", runc)):
            rc, out, err = node.ctr_run(env, through)
            assert rc == 1 and out.splitlines() == VECTORADD[:1], (env, through, out, err)
            assert "Failed to allocate device vector A (error code %s)!" % INSUFFICIENT in err
            assert "no driver library" in err
        # docker, its default runtime made nvidia by nvidia_runtime_config: a plain `docker run` gets the GPU (the image
        # asks for all, as NVIDIA's CUDA images do), `--runtime runc` does not
        node.configure(tmp_path, runtime="docker")
        node.run("docker load -q -i /srv/kubegpu-images/%s" % os.path.basename(built["tar"]))
        assert node.run("docker info --format '{{.DefaultRuntime}}'").strip() == "nvidia"
        rc, out, err = node.docker_run()
        assert rc == 0 and out.splitlines() == VECTORADD and "at /dev/nvidia0, MIG on, 1 MIG devices" in err, out + err
        rc, out, err = node.docker_run("--runtime", "runc")
        assert rc == 1 and "(error code %s)!" % INSUFFICIENT in err, out + err

        # NVIDIA_VISIBLE_DEVICES=none: the driver's files but no GPU
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=none", runc)
        assert rc == 1 and "0 of the 1 GPUs NVML reports are in this container" in err, out + err
        assert "Failed to allocate device vector A (error code no CUDA-capable device is detected)!" in err


def test_runtime_injects_only_the_devices_asked_for(built, tmp_path):
    with RuntimeNode("a100x2-mig-capable", built) as node:
        runc = node.configure(tmp_path)
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=1", runc)
        assert rc == 0, out + err
        assert "1 of the 2 GPUs NVML reports are in this container" in err
        assert re.search(r"GPU 1: NVIDIA A100-SXM4-80GB .* at /dev/nvidia1", err) and "/dev/nvidia0" not in err, err
        # by UUID, as NVIDIA's device plugin names the devices it allocates (deviceListStrategy envvar)
        with open(os.path.join(ROOT, "sandbox", "profiles", "a100x2-mig-capable.json"), encoding="utf-8") as handle:
            second = json.load(handle)["devices"][1]["uuid"]
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=" + second, runc)
        assert rc == 0 and "GPU 1: NVIDIA A100-SXM4-80GB (%s) at /dev/nvidia1" % second in err, out + err
        assert "1 of the 2 GPUs NVML reports are in this container" in err
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0", runc)
        assert rc == 0, out + err
        assert re.search(r"GPU 0: .* at /dev/nvidia0", err) and "/dev/nvidia1" not in err, err
        assert out.splitlines() == VECTORADD


def test_proof_fails_on_gtx1060_with_cudas_message(built, tmp_path):
    with RuntimeNode("gtx1060", built) as node:
        runc = node.configure(tmp_path)
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=all", runc)
        assert rc == 1, out + err
        assert out.splitlines() == VECTORADD[:1]
        assert "Failed to allocate device vector A (error code %s)!" % INSUFFICIENT in err
        assert "proof stand-in: driver CUDA 9.1, image built for CUDA 12.5.0 (needs a driver of CUDA 12.0 or later)" \
            in err
        # the GPU was there all the same: the driver is what is too old
        assert re.search(r"GPU 0: GeForce GTX 1060 3GB .* at /dev/nvidia0", err), err


def test_a_mig_device_by_uuid_gets_its_gpu_and_its_capabilities(built, tmp_path):
    """As the device plugin hands out a MIG device (migStrategy mixed or single, envvar): its parent's device node and
    the GPU and compute instance access devices of /proc/driver/nvidia-caps/mig-minors, and nothing of the other GPU
    (MIG on, no MIG device: NVIDIA's `all` gives it nothing either)."""
    with open(os.path.join(ROOT, "sandbox", "profiles", "a100x2-mig-one-empty.json"), encoding="utf-8") as handle:
        gpus = json.load(handle)["devices"]
    with RuntimeNode("a100x2-mig-one-empty", built) as node:
        runc = node.configure(tmp_path)
        minors = dict(line.split() for line in node.run("cat /proc/driver/nvidia-caps/mig-minors").splitlines())
        seen = []
        for mig in gpus[1]["mig"]["devices"]:
            rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=" + mig["uuid"], runc)
            assert rc == 0 and out.splitlines() == VECTORADD, out + err
            assert re.search(r"GPU 1: .* at /dev/nvidia1, MIG on, 2 MIG devices$", err, re.M), err
            assert "1 of the 2 GPUs NVML reports are in this container" in err
            caps = sorted("nvidia-cap" + minors["gpu1/gi%d%s/access" % (mig["gpu_instance_id"], ci)]
                          for ci in ("", "/ci%d" % mig["compute_instance_id"]))
            assert "proof stand-in: /dev/nvidia-caps: %s\n" % " ".join(caps) in err, (caps, err)
            seen.append(caps)
        assert seen[0] != seen[1]
        rc, out, err = node.ctr_run("NVIDIA_VISIBLE_DEVICES=all", runc)
        assert rc == 0 and "1 of the 2 GPUs NVML reports are in this container" in err and "/dev/nvidia0" not in err, err


def test_the_device_plugin_stand_in_gets_nvml_and_every_gpu_through_the_runtime(built, tmp_path):
    """The stand-in device plugin image (sandbox/standins) run as its DaemonSet's pod would be under the nvidia runtime,
    with nothing mounted: its image asks for every GPU (NVIDIA_VISIBLE_DEVICES=all, as NVIDIA's plugin image does), and
    the runtime gives it the fake NVML, the node's profile and MIG layout, and every device node."""
    with RuntimeNode("a100x8-mig-mixed", built) as node:
        runc = node.configure(tmp_path)
        node.run("ctr -n default images import /srv/kubegpu-images/%s >/dev/null" % os.path.basename(built["standins"]))
        plugin = next(line.split()[0] for line in node.run("ctr -n default images ls").splitlines()
                      if "/k8s-device-plugin:" in line and "nvcr.io" in line)
        script = ("import os, pynvml as n; n.nvmlInit(); g = [n.nvmlDeviceGetHandleByIndex(i) for i in "
                  "range(n.nvmlDeviceGetCount())]; print(n.nvmlSystemGetDriverVersion(), len(g), sum(1 for h in g "
                  "for s in range(n.nvmlDeviceGetMaxMigDeviceCount(h)) if _mig(h, s)), "
                  "sorted(d for d in os.listdir('/dev') if d.startswith('nvidia')))")
        prelude = ("import pynvml as n\ndef _mig(h, s):\n    try:\n        n.nvmlDeviceGetMigDeviceHandleByIndex(h, s)\n"
                   "        return True\n    except n.NVMLError:\n        return False\n")
        proc = docker("exec", node.name, "timeout", "60", "ctr", "-n", "default", "run", "--rm", "--runc-binary", runc,
                      plugin, "plugin-%d" % os.getpid(), "python3", "-c", prelude + script, timeout=90)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        driver, count, migs, devices = proc.stdout.split(" ", 3)
        assert (driver, count, migs) == ("535.183.01", "8", "31"), proc.stdout  # the profile's 8 GPUs, 31 MIG devices
        assert devices.strip() == str(sorted(["nvidia%d" % i for i in range(8)] + [
            "nvidia-caps", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"])), devices
