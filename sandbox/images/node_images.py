# SPDX-License-Identifier: GPL-3.0-or-later
"""Build, cache and load the simulated GPU node images.

The images are ``kubegpu/node:base``, ``kubegpu/node:gpu`` and ``kubegpu/node:nodriver``,
built from ``sandbox/images/Dockerfile`` on top of ``kubegpu/debian:bookworm``, a
debootstrap root file system imported into the engine (no registry can be reached).

Everything is keyed by a hash of its inputs:

* the root file system tarball by the debootstrap parameters (suite, variant, packages);
* the node images by that key plus every file of the build context
  (Dockerfile, requirements.txt, the fake NVML sources).

``ensure`` does the cheapest thing that gives the engine the images of the current key:
nothing when they are loaded, ``docker load`` when ``CACHE_DIR/nodes-KEY.tar`` exists,
a build (then ``docker save``) otherwise.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SUITE = "bookworm"
VARIANT = "minbase"
INCLUDE = ("python3",)
ROOTFS_IMAGE = "kubegpu/debian"
ROOTFS_TAG = SUITE
NODE_IMAGE = "kubegpu/node"
# Build order: every target reuses the layers of the ones before it.
TARGETS = ("base", "nodriver", "gpu")
KEY_LABEL = "kubegpu.image-key"
# Bump when the way the images are produced changes without any input file changing.
RECIPE_VERSION = "1"
# Files of sandbox/fakenvml that are build output, never build input.
BUILD_OUTPUT = re.compile(r"(\.o|\.a|\.so(\.\d+)*|\.pyc)$|(^|/)(__pycache__|build|out)/")
# Longest wait (s) for a concurrent build of the same cache to finish.
LOCK_TIMEOUT = 1800
# Packages from requirements.txt that go into the node venv.
VENV_PACKAGES = ("nvidia-ml-py", "tomlkit")


class ImageError(Exception):
    """A step of the image build failed; the message says which and why."""


def log(msg):
    """Print a progress line (stderr, so stdout stays machine-readable)."""
    sys.stderr.write("node-images: %s\n" % msg)
    sys.stderr.flush()


def run(cmd, **kwargs):
    """Run a command, raising ImageError with its name when it fails."""
    try:
        return subprocess.run(cmd, check=True, **kwargs)
    except subprocess.CalledProcessError as exc:
        raise ImageError("command failed (exit %d): %s" % (exc.returncode, " ".join(cmd))) from exc
    except FileNotFoundError as exc:
        raise ImageError("command not found: %s" % cmd[0]) from exc


def output(cmd):
    """Return the stripped stdout of a command, or None when it fails."""
    try:
        res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return res.stdout.strip() if res.returncode == 0 else None


# --- apt sources --------------------------------------------------------------------------------


def _deb822_stanzas(text):
    stanza = {}
    key = None
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanza:
                yield stanza
            stanza, key = {}, None
        elif line[0].isspace() and key:
            stanza[key] += " " + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            key = key.strip().lower()
            stanza[key] = value.strip()


def mirrors_from_deb822(text, suite=SUITE):
    """Return the URIs of deb822 stanzas that carry ``suite`` with component main."""
    found = []
    for stanza in _deb822_stanzas(text):
        if stanza.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in stanza.get("types", "").split():
            continue
        if suite not in stanza.get("suites", "").split() or "main" not in stanza.get("components", "").split():
            continue
        found.extend(stanza.get("uris", "").split())
    return found


def mirrors_from_list(text, suite=SUITE):
    """Return the URIs of one-line ``deb`` entries for ``suite`` with component main."""
    found = []
    for line in text.splitlines():
        line = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
        if len(line) >= 4 and line[0] == "deb" and line[2] == suite and "main" in line[3:]:
            found.append(line[1])
    return found


def find_mirror(etc_apt="/etc/apt", suite=SUITE):
    """Return the Debian mirror the machine's own apt sources use for ``suite``."""
    candidates = []
    for path in sorted(glob.glob(os.path.join(etc_apt, "sources.list.d", "*.sources"))):
        with open(path, encoding="utf-8") as handle:
            candidates.extend(mirrors_from_deb822(handle.read(), suite))
    for path in [os.path.join(etc_apt, "sources.list")] + sorted(glob.glob(os.path.join(etc_apt, "sources.list.d", "*.list"))):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                candidates.extend(mirrors_from_list(handle.read(), suite))
    for uri in candidates:
        if uri.startswith(("http://", "https://", "file:")):
            return uri.rstrip("/")
    raise ImageError("no 'deb' source for %s main in %s; set IMAGES_MIRROR=<Debian mirror URL>" % (suite, etc_apt))


# --- keys ---------------------------------------------------------------------------------------


def rootfs_key():
    """Key of the debootstrap root file system."""
    spec = json.dumps({"suite": SUITE, "variant": VARIANT, "include": sorted(INCLUDE), "recipe": RECIPE_VERSION}, sort_keys=True)
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def _source_files(root, subdir):
    """Tracked and untracked-but-not-ignored files under ``subdir`` (a walk when not in git)."""
    listing = output(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "--", subdir])
    if listing is None:
        listing = "\n".join(
            os.path.relpath(os.path.join(dirpath, name), root)
            for dirpath, _dirs, names in os.walk(os.path.join(root, subdir))
            for name in names
        )
    files = []
    for rel in sorted(set(listing.splitlines())):
        if rel and not BUILD_OUTPUT.search(rel) and os.path.isfile(os.path.join(root, rel)):
            files.append(rel)
    return files


def context_files(root):
    """Map of build-context path -> repository path for every input of the node images."""
    files = {
        "Dockerfile": "sandbox/images/Dockerfile",
        "requirements.txt": "requirements.txt",
        "sandbox/images/nvidia-nodriver-devices.service": "sandbox/images/nvidia-nodriver-devices.service",
        "sandbox/images/nvidia-nodriver-devices": "sandbox/images/nvidia-nodriver-devices",
        "sandbox/images/fake-nvml-caps.service": "sandbox/images/fake-nvml-caps.service",
        "sandbox/images/fake-nvml-driver-files.service": "sandbox/images/fake-nvml-driver-files.service",
    }
    fakenvml = _source_files(root, "sandbox/fakenvml")
    if not any(os.path.basename(rel) == "Makefile" for rel in fakenvml):
        raise ImageError("sandbox/fakenvml/Makefile is missing: the gpu image builds the fake NVML from it")
    for rel in fakenvml:
        files[rel] = rel
    for rel in files.values():
        if not os.path.isfile(os.path.join(root, rel)):
            raise ImageError("build input missing: %s" % rel)
    return files


def images_key(root, files):
    """Key of the node images: the root file system key plus every context file."""
    digest = hashlib.sha256()
    digest.update(("rootfs %s recipe %s\n" % (rootfs_key(), RECIPE_VERSION)).encode())
    for dest in sorted(files):
        with open(os.path.join(root, files[dest]), "rb") as handle:
            content = handle.read()
        mode = os.stat(os.path.join(root, files[dest])).st_mode & 0o111
        digest.update(("%s %o %d\n" % (dest, mode, len(content))).encode())
        digest.update(content)
    return digest.hexdigest()[:16]


# --- engine -------------------------------------------------------------------------------------


def image_label(image, label=KEY_LABEL):
    """Return the value of ``label`` on a local image, or None if the image is absent."""
    value = output(["docker", "image", "inspect", "-f", '{{ index .Config.Labels "%s" }}' % label, image])
    return value if value and value != "<no value>" else None


def images_loaded(key):
    """True when every node image in the engine carries ``key``."""
    return all(image_label("%s:%s" % (NODE_IMAGE, target)) == key for target in TARGETS)


def ensure_packages(packages):
    """apt-get install the packages that are not installed yet (the setup's one install loop, sandbox/apt_ensure.sh)."""
    run([os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "apt_ensure.sh"), "node-images"] + list(packages))


def ensure_rootfs(cache, build_dir, mirror):
    """Make kubegpu/debian:bookworm hold the root file system of the current key."""
    key = rootfs_key()
    image = "%s:%s" % (ROOTFS_IMAGE, ROOTFS_TAG)
    if image_label(image, "kubegpu.rootfs-key") == key:
        log("%s is up to date (rootfs key %s)" % (image, key))
        return image
    tarball = os.path.join(cache, "rootfs-%s-%s.tar" % (SUITE, key))
    if not os.path.exists(tarball):
        ensure_packages(["debootstrap"])
        mirror = mirror or find_mirror()
        target = os.path.join(build_dir, "rootfs")
        remove_tree(target)
        log("debootstrap %s (%s) from %s" % (SUITE, VARIANT, mirror))
        start = time.monotonic()
        run(["debootstrap", "--variant=%s" % VARIANT, "--include=%s" % ",".join(INCLUDE), SUITE, target, mirror])
        # Leave no downloaded .debs or apt lists in the tarball.
        shutil.rmtree(os.path.join(target, "var/cache/apt/archives"), ignore_errors=True)
        os.makedirs(os.path.join(target, "var/cache/apt/archives/partial"), exist_ok=True)
        for path in glob.glob(os.path.join(target, "var/lib/apt/lists/*")):
            if os.path.isfile(path):
                os.unlink(path)
        log("debootstrap took %.0f s" % (time.monotonic() - start))
        partial = tarball + ".partial"
        with open(partial, "wb") as handle:
            run(["tar", "--numeric-owner", "-C", target, "-c", "."], stdout=handle)
        os.replace(partial, tarball)
        remove_tree(target)
        for old in glob.glob(os.path.join(cache, "rootfs-%s-*.tar" % SUITE)):
            if old != tarball:
                os.unlink(old)
    log("docker import %s" % image)
    with open(tarball, "rb") as handle:
        run(["docker", "import", "-c", "LABEL kubegpu.rootfs-key=%s" % key, "-", image], stdin=handle, stdout=subprocess.DEVNULL)
    return image


def remove_tree(path):
    """Remove a debootstrap target, unmounting first whatever a failed run left mounted in it."""
    path = os.path.realpath(path)
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        mounts = [line.split()[1].replace("\\040", " ") for line in handle]
    for mount in sorted((m for m in mounts if m.startswith(path + "/")), reverse=True):
        run(["umount", "-l", mount])
    shutil.rmtree(path, ignore_errors=True)


def make_context(root, files, context):
    """Copy the build inputs into a clean context directory (the repository is far too big)."""
    shutil.rmtree(context, ignore_errors=True)
    for dest, rel in files.items():
        path = os.path.join(context, dest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), path)


def venv_requirements(root):
    """The pinned lines of requirements.txt that go into the node venv."""
    with open(os.path.join(root, "requirements.txt"), encoding="utf-8") as handle:
        pins = [line.strip() for line in handle if line.split("==", 1)[0].strip().lower() in VENV_PACKAGES]
    if len(pins) != len(VENV_PACKAGES) or not all("==" in pin for pin in pins):
        raise ImageError("requirements.txt must pin %s with '=='" % " and ".join(VENV_PACKAGES))
    return pins


def download_wheels(root, dest):
    """Fetch the venv's wheels with the host's pip, which has the index, proxy and CA settings that work here."""
    os.makedirs(dest, exist_ok=True)
    log("pip download %s" % " ".join(venv_requirements(root)))
    run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", dest] + venv_requirements(root))


def build_images(root, files, key, cache, build_dir, mirror):
    """Build every target from the Dockerfile, label it with ``key`` and save them to the cache."""
    base = ensure_rootfs(cache, build_dir, mirror)
    context = os.path.join(build_dir, "context")
    make_context(root, files, context)
    download_wheels(root, os.path.join(context, "wheels"))
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    for target in TARGETS:
        start = time.monotonic()
        log("docker build --target %s" % target)
        run(
            [
                "docker", "build", "--force-rm", "--network", "host", "--target", target,
                "--build-arg", "BASE_IMAGE=%s" % base,
                "--label", "%s=%s" % (KEY_LABEL, key),
                "-t", "%s:%s" % (NODE_IMAGE, target),
                context,
            ],
            env=env,
        )
        log("%s built in %.0f s" % (target, time.monotonic() - start))
    save_images(key, cache)
    # The images of earlier keys (and their build stages) are left untagged: drop them, and only them.
    run(["docker", "image", "prune", "-f", "--filter", "label=kubegpu.rootfs-key"], stdout=subprocess.DEVNULL)


def save_images(key, cache):
    """docker save the node images into ``cache`` and drop the tarballs of other keys."""
    tarball = os.path.join(cache, "nodes-%s.tar" % key)
    partial = tarball + ".partial"
    log("docker save -> %s" % tarball)
    run(["docker", "save", "-o", partial] + ["%s:%s" % (NODE_IMAGE, target) for target in TARGETS])
    os.replace(partial, tarball)
    for old in glob.glob(os.path.join(cache, "nodes-*.tar*")):
        if old != tarball:
            os.unlink(old)


def _lock_within(handle, seconds, message):
    """Take an exclusive lock on ``handle``, waiting for it at most ``seconds`` (the kernel wakes us, no polling)."""
    def _expired(_signum, _frame):
        raise TimeoutError(message)

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
    except TimeoutError as exc:
        raise ImageError(message) from exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def ensure(args):
    """Give the engine the node images of the current key, as cheaply as possible."""
    root = os.path.abspath(args.root)
    files = context_files(root)
    key = images_key(root, files)
    if images_loaded(key):
        log("images are up to date (key %s)" % key)
        return
    cache = os.path.abspath(args.cache_dir)
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w", encoding="utf-8") as lock:
        # One build at a time per cache (parallel make); a second run finds the images loaded.
        _lock_within(lock, LOCK_TIMEOUT, "another node image build held %s/.lock for %d s" % (cache, LOCK_TIMEOUT))
        if images_loaded(key):
            log("images are up to date (key %s), loaded by a concurrent run" % key)
        else:
            _load_or_build(args, root, files, key, cache)


def _load_or_build(args, root, files, key, cache):
    tarball = os.path.join(cache, "nodes-%s.tar" % key)
    if os.path.exists(tarball):
        log("docker load < %s" % tarball)
        run(["docker", "load", "-q", "-i", tarball], stdout=subprocess.DEVNULL)
        if images_loaded(key):
            return
        log("cached tarball did not hold the images of key %s; rebuilding" % key)
        os.unlink(tarball)
    build_dir = tempfile.mkdtemp(prefix="node-images-", dir=_mkdirs(args.build_dir))
    try:
        build_images(root, files, key, cache, build_dir, args.mirror)
    finally:
        remove_tree(build_dir)
    if not images_loaded(key):
        raise ImageError("the built images do not carry key %s" % key)


def _mkdirs(path):
    os.makedirs(path, exist_ok=True)
    return path


def main(argv=None):
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", default=".", help="repository root")
    parser.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/kubegpu/images"), help="where tarballs are kept")
    parser.add_argument("--build-dir", default="./.build/images", help="scratch space for debootstrap and the build context")
    parser.add_argument("--mirror", default=os.environ.get("IMAGES_MIRROR") or None, help="Debian mirror (default: from /etc/apt)")
    parser.add_argument("action", choices=("ensure", "key", "mirror"), nargs="?", default="ensure")
    args = parser.parse_args(argv)
    try:
        if args.action == "key":
            print(images_key(os.path.abspath(args.root), context_files(os.path.abspath(args.root))))
        elif args.action == "mirror":
            print(args.mirror or find_mirror())
        else:
            ensure(args)
    except ImageError as exc:
        sys.stderr.write("node-images: ERROR: %s\n" % exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
