# SPDX-License-Identifier: GPL-3.0-or-later
"""After a MIG layout change, the node's CDI spec names exactly the new MIG devices: NVIDIA's real nvidia-ctk
(v1.20.1, built from Go modules: ``make nvidia-ctk``) generates and lists it on the fake NVML, through the
``nvidia_cdi_spec`` module, after ``mig_layout`` changed the layout.

The node is a mount namespace of its own on this host: the fake NVML serves the profile with its MIG state file; a
driver root holds what nvidia-ctk looks for (``libnvidia-ml.so.<version>`` being the fake, an empty
``libcuda.so.<version>``, ``/dev/nvidia<minor>``, ``/dev/nvidiactl`` and the ``/dev/nvidia-caps`` nodes of the
current MIG devices, which the driver creates when an instance is made); a tmpfs over ``/proc/driver`` holds the
kernel module's ``nvidia-caps/mig-minors`` table; nvidia-cdi-refresh's environment file points nvidia-ctk at the
driver root, as a user's would; the CDI folder is the test's. Root only (device nodes, mount namespace).
"""

import json
import os
import shutil
import subprocess

import pytest

from ansible_cli import run_module
from sandbox.fakenvml import mig_minors, mig_state
from setup_steps import missing_setup

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILES = os.path.join(ROOT, "sandbox", "profiles")
CONFIG = {"version": "v1", "mig-configs": {
    "write-up": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 2}},
                 {"devices": [1], "mig-enabled": False}],
    "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
}}


def nvidia_ctk_binary():
    wanted = os.environ.get("NVIDIA_CTK")
    if wanted:
        return wanted
    cache = os.environ.get("CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kubegpu")
    return os.path.join(cache, "nvidia-ctk", "1.20.1", "bin", "nvidia-ctk")


@pytest.fixture
def node(fake_nvml_dir, tmp_path):
    ctk = nvidia_ctk_binary()
    if not os.access(ctk, os.X_OK):
        missing_setup("no nvidia-ctk binary at %s; build it with `make nvidia-ctk` (or set NVIDIA_CTK)" % ctk)
    if os.geteuid() != 0:
        pytest.skip("nvidia-ctk needs a driver root with device nodes and a private /proc/driver: run as root")

    class Node:
        profile = str(tmp_path / "a100x2-mig-capable.json")
        state = str(tmp_path / "fake-nvml" / "mig-state.json")
        root = tmp_path / "driver-root"
        cdi = tmp_path / "cdi"
        spec = str(tmp_path / "cdi" / "nvidia.yaml")
        env_file = str(tmp_path / "nvidia-cdi-refresh.env")
        minors = str(tmp_path / "mig-minors")

        def __init__(self):
            shutil.copy(os.path.join(PROFILES, "a100x2-mig-capable.json"), self.profile)
            os.makedirs(os.path.dirname(self.state))
            with open(self.profile, encoding="utf-8") as handle:
                self.data = json.load(handle)
            version = self.data["driver_version"]
            lib = self.root / "usr" / "lib" / "x86_64-linux-gnu"
            lib.mkdir(parents=True)
            (lib / ("libcuda.so.%s" % version)).write_bytes(b"")
            shutil.copy(os.path.join(str(fake_nvml_dir), "libnvidia-ml.so.1"), str(lib / ("libnvidia-ml.so.%s" % version)))
            (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.%s" % version)
            dev = self.root / "dev"
            dev.mkdir()
            for index, gpu in enumerate(self.data["devices"]):
                minor = gpu.get("minor_number", index)
                os.mknod(str(dev / ("nvidia%d" % minor)), 0o20666, os.makedev(195, minor))
            os.mknod(str(dev / "nvidiactl"), 0o20666, os.makedev(195, 255))
            self.cdi.mkdir()
            with open(self.env_file, "w", encoding="utf-8") as handle:
                handle.write("# as a user would point nvidia-cdi-refresh at a driver root\n"
                             "NVIDIA_CTK_DRIVER_ROOT=%s\nNVIDIA_CTK_DEV_ROOT=%s\n" % (self.root, self.root))
            self.caps()

        def caps(self):
            """What the driver keeps: the mig-minors table and the capability devices of the current MIG devices."""
            state = mig_state.load(self.state) if os.path.exists(self.state) else None
            mig_minors.write(self.data, self.minors, str(self.root / "dev" / "nvidia-caps"), state=state)

        def env(self):
            return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_PROFILE": self.profile,
                    "FAKE_NVML_MIG_STATE": self.state, "TMPDIR": str(tmp_path)}

        def prefix(self):
            """The node: a mount namespace with the kernel module's /proc/driver/nvidia-caps."""
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs none /proc/driver && mkdir /proc/driver/nvidia-caps && '
                    'cp "$0" /proc/driver/nvidia-caps/mig-minors && exec "$@"', self.minors]

        def layout(self, name):
            rc, result = run_module("kubegpu.cluster.mig_layout", {"config": CONFIG, "name": name}, env=self.env())
            assert rc == 0, result.get("msg", result)
            self.caps()
            return result["ansible_facts"]["gpu"]

        def cdi_spec(self, gpu, check=False, force=False, expect_rc=0):
            args = {"gpu": gpu, "paths": [self.spec], "env_file": self.env_file, "nvidia_ctk": ctk,
                    "spec_dirs": [str(self.cdi)], "force": force}
            rc, result = run_module("kubegpu.cluster.nvidia_cdi_spec", args, check=check, env=self.env(),
                                    prefix=self.prefix())
            assert rc == expect_rc, result.get("msg", result)
            return result

        def listed(self):
            """nvidia-ctk cdi list, run by the test itself: every nvidia.com/gpu device name."""
            proc = subprocess.run(self.prefix() + [ctk, "cdi", "list", "--spec-dir", str(self.cdi)], env=dict(
                os.environ, **self.env()), capture_output=True, text=True, timeout=120, check=False)
            assert proc.returncode == 0, proc.stderr
            return sorted(line[len("nvidia.com/gpu="):] for line in proc.stdout.split() if line.startswith("nvidia.com/gpu="))

    return Node()


def by_uuid(names):
    return sorted(n for n in names if n.startswith(("GPU-", "MIG-")))


def mig_uuids(gpu):
    return sorted(m["uuid"] for d in gpu["devices"] if d["mig"]["current"] for m in d["mig"]["devices"])


def test_after_a_layout_change_cdi_list_names_exactly_the_new_mig_devices(node):
    before = node.layout("all-disabled")
    first = node.cdi_spec(before)  # the spec as the toolkit wrote it before the change: the two whole GPUs
    assert first["changed"] and first["regenerated"] == [node.spec]
    gpus = sorted(d["uuid"] for d in before["devices"])
    assert by_uuid(node.listed()) == gpus

    after = node.layout("write-up")  # GPU 0: 2 x 1g.10gb and 2 x 2g.20gb; GPU 1 stays whole
    wanted = sorted(mig_uuids(after) + [after["devices"][1]["uuid"]])
    assert len(mig_uuids(after)) == 4
    assert by_uuid(node.listed()) == gpus  # stale: the toolkit does not regenerate on a MIG change
    check = node.cdi_spec(after, check=True)
    assert check["changed"] and check["before"] == gpus and check["devices"] == wanted
    assert by_uuid(node.listed()) == gpus  # check mode wrote nothing
    done = node.cdi_spec(after)
    assert done["changed"] and done["devices"] == wanted and done["before"] == gpus
    listed = node.listed()
    assert by_uuid(listed) == wanted  # exactly the new MIG devices, and the GPU left whole
    assert "all" in listed and "0:0" in listed and "0" not in listed  # GPU 0 is named by its MIG devices only
    again = node.cdi_spec(after)
    assert not again["changed"] and again["regenerated"] == []
    forced = node.cdi_spec(after, force=True)  # generated again, the same: not rewritten
    assert not forced["changed"]

    other = node.layout("all-3g")
    done = node.cdi_spec(other)
    assert done["changed"] and by_uuid(node.listed()) == mig_uuids(other) and len(mig_uuids(other)) == 4
    assert not set(mig_uuids(other)) & set(wanted)


def test_a_node_whose_gpus_expose_no_device_loses_its_spec(node):
    """The GPU Operator's all-enabled: MIG on, no MIG device. nvidia-ctk refuses any spec there ("invalid device, empty
    device edits"), and the old one names devices that are gone: the spec goes, and comes back with devices."""
    node.cdi_spec(node.layout("all-disabled"))
    assert by_uuid(node.listed())
    empty = node.layout("all-enabled")
    assert mig_uuids(empty) == []
    check = node.cdi_spec(empty, check=True)
    assert check["changed"] and check["removed"] == [node.spec] and os.path.exists(node.spec)
    done = node.cdi_spec(empty)
    assert done["changed"] and done["removed"] == [node.spec] and not os.path.exists(node.spec)
    assert node.listed() == []
    assert not node.cdi_spec(empty)["changed"]
    back = node.layout("all-3g")
    done = node.cdi_spec(back)
    assert done["changed"] and by_uuid(node.listed()) == mig_uuids(back)


def test_a_failing_generation_names_the_spec_and_nvidia_ctks_words(node):
    """A driver root where nvidia-ctk finds no driver library (it looks for libcuda.so.<version>, then
    libnvidia-ml.so.<version>): the module fails with nvidia-ctk's own last lines, and the spec is left as it was."""
    gpu = node.layout("write-up")
    node.cdi_spec(gpu)
    listed = node.listed()
    lib = node.root / "usr" / "lib" / "x86_64-linux-gnu"
    for name in os.listdir(str(lib)):
        if name.startswith(("libcuda.so.", "libnvidia-ml.so.")) and name != "libnvidia-ml.so.1":
            os.unlink(str(lib / name))
    result = node.cdi_spec(node.layout("all-3g"), expect_rc=2)
    assert "nvidia-ctk cdi generate failed for %s" % node.spec in result["msg"], result["msg"]
    assert "libcuda.so" in result["msg"], result["msg"]
    assert node.listed() == listed
