# SPDX-License-Identifier: GPL-3.0-or-later
"""Build, cache and save the sandbox's stand-in images, tagged exactly as the collection's manifests name the vendors'.

``ensure`` gives the engine every image of the current input key and leaves one image tar, holding every tag (their
shared layers once), in the directory of stand-in image tars the node image loader imports (``--out-dir``, the
Makefile's STANDIN_IMAGES_DIR, ``~/.cache/kubegpu/standin-images``): ``standins-<key>.tar``; the tars of other keys
there go. Cheapest first: nothing when the engine has the images of the key and the tar exists; ``docker load`` of the
tar; else a build (debootstrap base shared with the node images, node_images.py).

The key hashes every input: the Dockerfile, the stand-ins' sources, the simulator's rules they import, the wheel
versions (the test venv's: requirements-test.txt pins grpcio and protobuf, requirements.txt nvidia-ml-py), the base
root file system's key and the image table below.

The image names and tags are read from the collection's constants (plugins/module_utils/_nvidia, _nfd, _amd, _intel:
the one place they are written), loaded by file path: the sandbox does not import the collection as a package.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "sandbox", "images"))
import node_images  # noqa: E402  pylint: disable=wrong-import-position

KEY_LABEL = "kubegpu.standin-key"
TAR_PREFIX = "standins-"
RECIPE_VERSION = "1"
# The Python distributions the images unpack (their versions: the running venv's)
DISTRIBUTIONS = ("grpcio", "protobuf", "PyYAML", "nvidia-ml-py", "typing_extensions")
# Files of the simulator the stand-ins import (the rules: one implementation in the sandbox)
SHARED_SOURCES = ("sandbox/k8s/__init__.py", "sandbox/k8s/devsim/__init__.py", "sandbox/k8s/devsim/rules.py")


def _constants(vendor):
    path = os.path.join(ROOT, "plugins", "module_utils", vendor, "constants.py")
    spec = importlib.util.spec_from_file_location("kubegpu_standins_constants_%s" % vendor.strip("_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nanogpu_constants():
    """_nanogpu/constants.py imports the collection's _nvidia constants as a package: through the collection link
    ``make venv`` makes (sandbox/nanogpu does the same)."""
    sys.path.insert(0, ROOT)
    from sandbox.nanogpu import C  # pylint: disable=import-outside-toplevel
    return C


# NVIDIA's runtime gives a container NVML only when its image asks (as NVIDIA's own images do): nano-gpu's agent counts
# the GPUs through NVML and its pods set none of these (deploy/nano-gpu-agent.yaml)
_NVML_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}


def image_table():
    """Every stand-in image: ``{name, tag, stands_in_for, entrypoint, cmd, workdir[, env][, user]}``."""
    nvidia, nfd, amd, intel = (_constants(v) for v in ("_nvidia", "_nfd", "_amd", "_intel"))
    nanogpu = _nanogpu_constants()
    return [
        {"name": "nvidia-device-plugin", "tag": nvidia.default_image(),
         "stands_in_for": "NVIDIA k8s-device-plugin (nvidia-device-plugin, gpu-feature-discovery, mps-control-daemon)",
         "entrypoint": ["nvidia-device-plugin"], "cmd": None, "workdir": None,
         # deployments/container/Dockerfile (v0.20.0): what makes NVIDIA's runtime give the plugin's own containers
         # every GPU and the driver's NVML, without the pod asking (the collection's DaemonSets set none of them)
         "env": {"NVIDIA_DISABLE_REQUIRE": "true", "NVIDIA_VISIBLE_DEVICES": "all",
                 "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}},
        {"name": "node-feature-discovery", "tag": "%s:%s" % (nfd.NFD_IMAGE_REPOSITORY, nfd.NFD_VERSION),
         "stands_in_for": "node-feature-discovery (nfd-master, nfd-worker, nfd-gc)",
         "entrypoint": None, "cmd": [nfd.WORKER_PROGRAM], "workdir": None,
         # the chart's (and the collection's, _nfd/manifests.py SECURITY_CONTEXT) runAsNonRoot: true needs an image
         # whose user is a non-root number, as NFD's own image is (its Dockerfile's last stage: USER 65534:65534);
         # a kubelet refuses to start it as root ("container has runAsNonRoot and image will run as root")
         "user": "65534:65534"},
        {"name": "amd-device-plugin", "tag": amd.default_image(),
         "stands_in_for": "ROCm k8s-device-plugin", "entrypoint": None,
         "cmd": [amd.PLUGIN_PROGRAM] + list(amd.PLUGIN_LOG_ARGS), "workdir": amd.LABELLER_WORKDIR},
        {"name": "amd-node-labeller", "tag": amd.default_labeller_image(),
         "stands_in_for": "ROCm k8s-node-labeller", "entrypoint": None,
         "cmd": [amd.LABELLER_PROGRAM], "workdir": amd.LABELLER_WORKDIR},
        {"name": "intel-gpu-plugin", "tag": intel.default_image(),
         "stands_in_for": "Intel GPU device plugin (intel_gpu_device_plugin)",
         "entrypoint": ["/usr/local/bin/intel_gpu_device_plugin"], "cmd": None, "workdir": None},
        {"name": "nano-gpu-agent", "tag": nanogpu.agent_image(),
         "stands_in_for": "nano-gpu's agent (nano-gpu-agent, its installer install.sh)", "entrypoint": None,
         "cmd": [nanogpu.AGENT_COMMAND], "workdir": None, "env": dict(_NVML_ENV)},
        {"name": "nano-gpu-scheduler", "tag": nanogpu.scheduler_image(),
         "stands_in_for": "nano-gpu's scheduler extender (nano-gpu-scheduler)", "entrypoint": None,
         "cmd": [nanogpu.SCHEDULER_COMMAND], "workdir": None},
    ]


def log(msg):
    sys.stderr.write("standin-images: %s\n" % msg)
    sys.stderr.flush()


def distributions():
    """``name==version`` of every distribution the images unpack, as installed in the running (test) venv."""
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    return ["%s==%s" % (name, metadata.version(name)) for name in DISTRIBUTIONS]


def source_files():
    """Build-context path -> repository path of the code the images carry."""
    files = {}
    for dirpath, dirnames, names in os.walk(os.path.join(HERE, "kubegpu_standins")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), HERE)
                files[os.path.join("src", rel)] = os.path.join("sandbox", "standins", rel)
    for rel in SHARED_SOURCES:
        files[os.path.join("src", rel)] = rel
    files["Dockerfile"] = "sandbox/standins/Dockerfile"
    return files


def key(files, pins, table):
    digest = hashlib.sha256()
    digest.update(json.dumps({"recipe": RECIPE_VERSION, "rootfs": node_images.rootfs_key(), "pins": pins,
                              "table": table}, sort_keys=True).encode())
    for dest in sorted(files):
        with open(os.path.join(ROOT, files[dest]), "rb") as handle:
            content = handle.read()
        digest.update(("%s %d\n" % (dest, len(content))).encode())
        digest.update(content)
    return digest.hexdigest()[:16]


def loaded(table, want):
    return all(node_images.image_label(item["tag"], KEY_LABEL) == want for item in table)


def _labels(item, want):
    return {
        KEY_LABEL: want,
        "kubegpu.standin": item["name"],
        "org.opencontainers.image.title": "kubegpu sandbox stand-in for %s" % item["tag"],
        "org.opencontainers.image.description": (
            "A sandbox stand-in for %s, built by kubegpu.cluster's sandbox (sandbox/standins/README.md). Not the "
            "vendor's software." % item["stands_in_for"]),
        "org.opencontainers.image.vendor": "kubegpu sandbox stand-in (not the vendor's software)",
    }


def build(files, pins, table, want, build_dir, cache_dir, mirror):
    base = node_images.ensure_rootfs(os.path.join(cache_dir, "images"), build_dir, mirror)
    context = os.path.join(build_dir, "context")
    shutil.rmtree(context, ignore_errors=True)
    for dest, rel in files.items():
        os.makedirs(os.path.dirname(os.path.join(context, dest)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(context, dest))
    wheels = os.path.join(context, "wheels")
    log("pip download %s" % " ".join(pins))
    node_images.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                     "--implementation", "cp", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
                     "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", wheels] + pins)
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    common = "kubegpu/standins:%s" % want
    start = time.monotonic()
    node_images.run(["docker", "build", "--force-rm", "--network", "none", "--target", "standins",
                     "--build-arg", "BASE_IMAGE=%s" % base, "--label", "%s=%s" % (KEY_LABEL, want), "-t", common,
                     context], env=env, stdout=subprocess.DEVNULL)
    log("common layers built in %.0f s" % (time.monotonic() - start))
    for item in table:
        lines = ["FROM %s" % common]
        lines += ["LABEL %s=%s" % (k, json.dumps(v)) for k, v in sorted(_labels(item, want).items())]
        if item["workdir"]:
            lines.append("WORKDIR %s" % item["workdir"])
        lines += ["ENV %s=%s" % (k, json.dumps(v)) for k, v in sorted((item.get("env") or {}).items())]
        if item.get("user"):
            lines.append("USER %s" % item["user"])
        lines.append("ENTRYPOINT %s" % json.dumps(item["entrypoint"] or []))
        lines.append("CMD %s" % json.dumps(item["cmd"] or []))
        node_images.run(["docker", "build", "--network", "none", "-t", item["tag"], "-"],
                        input="\n".join(lines) + "\n", text=True, env=env, stdout=subprocess.DEVNULL)
        log("tagged %s" % item["tag"])
    node_images.run(["docker", "rmi", common], stdout=subprocess.DEVNULL)


def tar_path(out_dir, want):
    return os.path.join(out_dir, "%s%s.tar" % (TAR_PREFIX, want))


def _drop_other_keys(out_dir, want):
    """The tars of earlier keys: the directory keeps one (the images of other keys are no longer tagged)."""
    for name in os.listdir(out_dir):
        if name.startswith(TAR_PREFIX) and name.endswith((".tar", ".tar.partial")) and name != TAR_PREFIX + want + ".tar":
            os.unlink(os.path.join(out_dir, name))


def _copy_to(tarball, directory, want):
    """Put the tar into a loader directory as ``standins.tar`` (a hard link where the file system allows, else a
    copy), unless the one there is already of this key (``.standins.key`` beside it says which)."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, "standins.tar")
    marker = os.path.join(directory, ".standins.key")
    if os.path.exists(target) and os.path.exists(marker):
        with open(marker, encoding="ascii") as handle:
            if handle.read().strip() == want:
                return
    tmp = target + ".partial"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    try:
        os.link(tarball, tmp)
    except OSError:
        shutil.copyfile(tarball, tmp)
    os.replace(tmp, target)
    with open(marker, "w", encoding="ascii") as handle:
        handle.write(want + "\n")
    log("%s -> %s" % (tarball, target))


def ensure(args):
    table = image_table()
    files = source_files()
    pins = distributions()
    want = key(files, pins, table)
    out_dir = os.path.abspath(args.out_dir)
    tarball = tar_path(out_dir, want)
    if not (loaded(table, want) and os.path.exists(tarball)):
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, ".standins.lock"), "w", encoding="utf-8") as lock:
            node_images._lock_within(lock, node_images.LOCK_TIMEOUT,  # pylint: disable=protected-access
                                     "another stand-in image build held %s/.standins.lock" % out_dir)
            if os.path.exists(tarball) and not loaded(table, want):
                log("docker load < %s" % tarball)
                node_images.run(["docker", "load", "-q", "-i", tarball], stdout=subprocess.DEVNULL)
            if not loaded(table, want):
                build_dir = tempfile.mkdtemp(prefix="standin-images-", dir=node_images._mkdirs(args.build_dir))  # pylint: disable=protected-access
                try:
                    build(files, pins, table, want, build_dir, args.cache_dir, args.mirror)
                finally:
                    node_images.remove_tree(build_dir)
            if not os.path.exists(tarball):
                partial = tarball + ".partial"
                node_images.run(["docker", "save", "-o", partial] + [item["tag"] for item in table])
                os.replace(partial, tarball)
                log("saved %s (%d MiB)" % (tarball, os.path.getsize(tarball) // (1 << 20)))
            _drop_other_keys(out_dir, want)
    else:
        log("images are up to date (key %s)" % want)
    if args.copy_to:
        _copy_to(tarball, os.path.abspath(args.copy_to), want)
    print(json.dumps({"key": want, "tar": tarball, "images": [item["tag"] for item in table]}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/kubegpu"))
    parser.add_argument("--build-dir", default=os.path.join(ROOT, ".build", "standin-images"))
    parser.add_argument("--out-dir", default=os.path.expanduser("~/.cache/kubegpu/standin-images"),
                        help="the directory of stand-in image tars the node image loader imports")
    parser.add_argument("--copy-to", help="also put the tar, as standins.tar, into this loader directory")
    parser.add_argument("--mirror", default=os.environ.get("IMAGES_MIRROR") or None)
    parser.add_argument("action", choices=("ensure", "key", "table"), nargs="?", default="ensure")
    args = parser.parse_args(argv)
    try:
        if args.action == "key":
            print(key(source_files(), distributions(), image_table()))
        elif args.action == "table":
            print(json.dumps(image_table(), indent=1))
        else:
            ensure(args)
    except node_images.ImageError as exc:
        sys.stderr.write("standin-images: ERROR: %s\n" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
