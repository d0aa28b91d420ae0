# SPDX-License-Identifier: GPL-3.0-or-later
"""What the sandbox's GPU nodes run over the fake NVML, on a real NVIDIA GPU: NVIDIA's container runtime and CDI
generator (built from the toolkit's Go module, sandbox/nvidia-runtime), the proof stand-in (sandbox/proof) and the
stand-in device plugin (sandbox/standins) registered with the kubelet's own device manager code (kubeletcheck).

Not collected by ``make test``: run on a machine with an NVIDIA driver by tests/realgpu/record.sh, with the programs in
.realgpu/ (record.sh says which). Nothing here changes the GPU or starts a container: the runtime's low-level runtime
is a stand-in that saves the OCI spec NVIDIA's runtime hands it, which is what a container would be started with.

The sandbox's counterparts: tests/integration/test_nvidia_runtime.py (the runtime and the proof on node containers),
tests/sandbox/test_standin_deviceplugin.py (the plugin with kubeletcheck). tests/integration/test_nvidia_runtime.py holds
the fake's CDI spec to the one recorded here (tests/fixtures/realgpu/h200-580.159.04-runtime.json).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = Path(os.environ.get("KUBEGPU_REALGPU_BIN", str(ROOT / ".realgpu")))
OUT = os.environ.get("KUBEGPU_REALGPU_OUT")
INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
TIMEOUT_S = 120


def _save(name, text):
    if OUT:
        Path(OUT, name).write_text(text)


def _run(argv, **kwargs):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                          **kwargs)


@pytest.fixture(scope="module")
def smi():
    proc = _run(["nvidia-smi", "--query-gpu=index,uuid,driver_version,pci.bus_id,name", "--format=csv,noheader"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [[v.strip() for v in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]
    for row in rows:  # the device node's minor number, as the driver reports it (no nvidia-smi query field has it)
        bus = row[3].lower().split(":", 1)[1]  # 00000000:3B:00.0 -> 3b:00.0; the driver's folder is 0000:3b:00.0
        info = next(p for p in Path("/proc/driver/nvidia/gpus").glob("*/information") if p.parent.name.endswith(bus))
        row[3] = re.search(r"Device Minor:\s*(\d+)", info.read_text()).group(1)
    cuda = re.search(r"CUDA Version: (\d+)\.(\d+)", _run(["nvidia-smi"]).stdout)
    assert cuda, "nvidia-smi printed no CUDA version"
    seen = {"gpus": [dict(zip(["index", "uuid", "driver", "minor", "name"], r)) for r in rows],
            "cuda": (int(cuda.group(1)), int(cuda.group(2)))}
    _save("runtime-smi.json", json.dumps(dict(seen, nvidia_ctk=_run([BIN / "nvidia-ctk", "--version"]).stdout,
                                              python=sys.version, runc=shutil.which("runc"),
                                              when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())), indent=1))
    return seen


def _spec_edits(spec):
    """The device nodes, mount destinations and hook arguments of a CDI spec's top level and devices."""
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    return {"deviceNodes": sorted({n["path"] for e in edits for n in e.get("deviceNodes") or []}),
            "mounts": sorted({m["containerPath"] for e in edits for m in e.get("mounts") or []}),
            "hooks": sorted({" ".join(h.get("args", [])[:2]) for e in edits for h in e.get("hooks") or []})}


def test_nvidia_ctk_generates_a_cdi_spec_from_the_real_nvml(smi, tmp_path):
    """nvidia-ctk cdi generate (mode nvml, as the stand-in plugin and the runtime's jit-cdi mode run it): one device per
    GPU by index and by UUID, and "all"; the GPU's node, nvidiactl and the driver's libnvidia-ml.so.<version>."""
    path = tmp_path / "nvidia.yaml"
    proc = _run([BIN / "nvidia-ctk", "cdi", "generate", "--mode", "nvml", "--output", path,
                 "--nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook"])
    _save("cdi-generate.log", proc.stderr)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = path.read_text()
    _save("cdi-real.yaml", text)
    spec = yaml.safe_load(text)
    names = {d["name"] for d in spec["devices"]}
    for gpu in smi["gpus"]:
        assert {gpu["index"], gpu["uuid"]} <= names, names
    assert "all" in names
    edits = _spec_edits(spec)
    assert {"/dev/nvidiactl", "/dev/nvidia%s" % smi["gpus"][0]["minor"]} <= set(edits["deviceNodes"]), edits
    driver = smi["gpus"][0]["driver"]
    assert any(m.endswith("/libnvidia-ml.so." + driver) for m in edits["mounts"]), edits["mounts"]


STUB = """#!/bin/sh
# The low-level runtime for this test: saves the OCI spec NVIDIA's runtime passes on, starts nothing
bundle=.; prev=
for a in "$@"; do
  if [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ]; then bundle=$a; fi
  prev=$a
done
cp "$bundle/config.json" "$STUB_SPEC_OUT"
"""


@pytest.fixture(scope="module")
def runtime_env(tmp_path_factory):
    """A config for NVIDIA's runtime (its defaults, debug log on, the stub as low-level runtime) and PATH to the
    programs, as the toolkit package installs them."""
    work = tmp_path_factory.mktemp("runtime")
    stub = work / "stub-runc"
    stub.write_text(STUB)
    stub.chmod(0o755)
    config = work / "config.toml"
    env = dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=str(config), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    made = _run([BIN / "nvidia-ctk", "config", "default", "--output", config], env=env)
    assert made.returncode == 0, made.stderr
    log = work / "runtime.log"
    setting = _run([BIN / "nvidia-ctk", "config", "--in-place", "--config", config,
                    "--set", "nvidia-container-runtime.debug=%s" % log,
                    "--set", "nvidia-container-runtime.log-level=debug",
                    "--set", "nvidia-container-runtime.runtimes=%s" % stub,
                    "--set", "nvidia-ctk.path=%s" % (BIN / "nvidia-ctk")], env=env)
    assert setting.returncode == 0, setting.stderr
    return {"env": env, "work": work, "log": log, "config": config}


def _create(runtime_env, name, visible):
    """nvidia-container-runtime create on a bundle whose process asks for NVIDIA_VISIBLE_DEVICES=<visible>; the spec
    the low-level runtime got."""
    bundle = runtime_env["work"] / name
    (bundle / "rootfs").mkdir(parents=True)
    spec = {"ociVersion": "1.2.0", "root": {"path": "rootfs"}, "mounts": [], "linux": {},
            "process": {"args": ["/cuda-samples/vectorAdd"], "cwd": "/",
                        "env": ["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=%s" % visible]}}
    (bundle / "config.json").write_text(json.dumps(spec))
    out = runtime_env["work"] / ("%s.json" % name)
    proc = _run([BIN / "nvidia-container-runtime", "create", "--bundle", bundle, "kubegpu-" + name],
                env=dict(runtime_env["env"], STUB_SPEC_OUT=str(out)))
    assert proc.returncode == 0, "%s\n%s" % (proc.stderr[-2000:], runtime_env["log"].read_text()[-3000:])
    got = json.loads(out.read_text())
    _save("runtime-spec-%s.json" % name, json.dumps(got, indent=1))
    return got


def _devices(spec):
    return sorted(d["path"] for d in (spec.get("linux") or {}).get("devices") or [])


def test_nvidia_container_runtime_auto_mode_is_jit_cdi_and_injects_the_gpu(smi, runtime_env):
    """mode auto resolves to jit-cdi on the real driver, as on the fake NVML; NVIDIA_VISIBLE_DEVICES=all gives every GPU's
    node, nvidiactl, the driver's libraries and the CDI hooks; void gives nothing."""
    spec = _create(runtime_env, "all", "all")
    log = runtime_env["log"].read_text()
    _save("runtime.log", log)
    assert "Auto-detected mode as 'jit-cdi'" in log, log[-3000:]
    minors = {"/dev/nvidia%s" % g["minor"] for g in smi["gpus"]}
    assert minors | {"/dev/nvidiactl"} <= set(_devices(spec)), _devices(spec)
    mounts = [m["destination"] for m in spec.get("mounts", [])]
    assert any(m.endswith("/libnvidia-ml.so." + smi["gpus"][0]["driver"]) for m in mounts), mounts
    # the CDI hooks: nvidia-cdi-hook <hook>, or nvidia-ctk hook <hook> when nvidia-ctk.path is set, as here
    hooks = [[a for a in h.get("args", []) if a != "hook"][:2] for h in (spec.get("hooks") or {}).get("createContainer", [])]
    assert any(h[0] in ("nvidia-cdi-hook", "nvidia-ctk") and h[1] == "create-symlinks" for h in hooks), hooks
    void = _create(runtime_env, "void", "void")
    assert not [d for d in _devices(void) if d.startswith("/dev/nvidia")], _devices(void)


def test_nvidia_container_runtime_gives_one_gpu_by_uuid(smi, runtime_env):
    gpu = smi["gpus"][0]
    spec = _create(runtime_env, "uuid", gpu["uuid"])
    assert "/dev/nvidia%s" % gpu["minor"] in _devices(spec), _devices(spec)


def _proof(cuda):
    return BIN / ("vectorAdd-cuda%s" % cuda)


@pytest.mark.parametrize("cuda", ["12.5.0", "next-minor", "next-major"])
def test_proof_stand_in_judges_the_real_drivers_cuda_version(smi, cuda):
    """The proof stand-in (sandbox/proof/vectoradd.c, built for the collection's proof image's CUDA and for two more),
    on the real driver: the image's CUDA 12.5 runs on a newer driver; a newer minor of the driver's own CUDA major runs
    (minor version compatibility); the next major fails with CUDA's own message."""
    major, minor = smi["cuda"]
    version = {"next-minor": "%d.%d.0" % (major, minor + 1), "next-major": "%d.0.0" % (major + 1)}.get(cuda, cuda)
    proc = _run([_proof(version)])
    _save("proof-cuda%s.txt" % version, "rc=%d\n--- stdout\n%s--- stderr\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    assert "driver CUDA %d.%d" % (major, minor) in proc.stderr, proc.stderr
    if cuda == "next-major":
        assert proc.returncode != 0 and INSUFFICIENT in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 0 and "Test PASSED" in proc.stdout, proc.stdout + proc.stderr
        for gpu in smi["gpus"]:
            assert gpu["uuid"] in proc.stderr, proc.stderr


def test_standin_device_plugin_over_the_real_nvml_with_the_kubelets_own_code(smi, tmp_path):
    """The stand-in plugin's process, reading the real GPU through pynvml, registered with kubeletcheck (the kubelet's
    devicemanager plugin code): it lists one device per GPU (two replicas each under time-slicing 2), the preferred
    allocation, and Allocate answers NVIDIA_VISIBLE_DEVICES with the GPU's UUID."""
    check = subprocess.Popen([str(BIN / "kubeletcheck"), "-dir", str(tmp_path), "-count", "1"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                      "      replicas: 2\n")
    env = dict(os.environ, KUBELET_SOCKET=str(tmp_path / "kubelet.sock"), CONFIG_FILE=str(config),
               PYTHONPATH="%s:%s:%s" % (ROOT / "sandbox" / "standins", ROOT, os.environ.get("PYTHONPATH", "")))
    log = tmp_path / "plugin.log"
    with open(log, "w", encoding="utf-8") as handle:
        plugin = subprocess.Popen([sys.executable, "-m", "kubegpu_standins", "nvidia-device-plugin"], env=env,
                                  stdout=handle, stderr=subprocess.STDOUT)
    try:
        out, err = check.communicate(timeout=90)
    finally:
        plugin.terminate()
        plugin.wait(timeout=30)
        _save("standin-plugin.log", log.read_text())
    _save("kubeletcheck.json", out)
    assert check.returncode == 0, "%s\n%s" % (err[-2000:], log.read_text()[-3000:])
    got = json.loads(out)
    assert got["resource"] == "nvidia.com/gpu"
    assert sorted(d["id"] for d in got["devices"]) == sorted("%s::%d" % (g["uuid"], n) for g in smi["gpus"]
                                                             for n in range(2))
    assert got["allocate"]["envs"]["NVIDIA_VISIBLE_DEVICES"] == got["preferred"][0].split("::")[0]
