# SPDX-License-Identifier: GPL-3.0-or-later
"""Run in a kubelet node by /usr/bin/python3. Import every image tar of /var/lib/kubegpu/images into this node's
containerd (namespace k8s.io, where the CRI plugin and so the kubelet look) and its Docker engine, skipping each image
already there with the same image id (the digest of its config, which docker-save tars name in manifest.json and which
both engines keep as they got it).

Run by sandbox-up after it copied the tars in (sandbox/kubelet/images.py) and at every boot of the node
(kubegpu-image-load.service, before the kubelet): /var/lib/containerd and /var/lib/docker are tmpfs in a node
container, the tars in /var/lib/kubegpu/images are not. Prints one JSON object: per image, per engine, "present",
"imported" (with seconds) or why not.
"""
import json
import os
import subprocess
import sys
import tarfile
import time

IMAGES = os.environ.get("KUBEGPU_IMAGE_DIR", "/var/lib/kubegpu/images")
NAMESPACE = "k8s.io"


def normalize(ref):
    """A reference as containerd's CRI plugin and docker name it: docker.io/[library/]name:tag."""
    first, rest = ref.split("/", 1) if "/" in ref else (ref, "")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        ref = "docker.io/" + (ref if rest else "library/" + ref)
    name = ref.rsplit("/", 1)[-1]
    if ":" not in name and "@" not in name:
        ref += ":latest"
    return ref


def tar_images(path):
    """[(normalized refs, config digest)] of a docker-save tar."""
    with tarfile.open(path) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    out = []
    for entry in manifest:
        config = entry["Config"]
        digest = config.rsplit("/", 1)[-1]
        if digest.endswith(".json"):
            digest = digest[:-len(".json")]
        out.append(([normalize(t) for t in entry.get("RepoTags") or []], "sha256:" + digest))
    return out


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)


def containerd_ids():
    """{ref: config digest} of the images in containerd's k8s.io namespace."""
    listing = run(["ctr", "-n", NAMESPACE, "images", "ls"])
    if listing.returncode:
        raise RuntimeError("ctr images ls: " + listing.stderr.strip())
    out = {}
    for line in listing.stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 3:
            continue
        ref, digest = fields[0], fields[2]
        config = _config_of(digest)
        if config:
            out[ref] = config
    return out


def _config_of(digest, depth=0):
    blob = run(["ctr", "-n", NAMESPACE, "content", "get", digest])
    if blob.returncode or depth > 2:
        return None
    try:
        doc = json.loads(blob.stdout)
    except ValueError:
        return None
    if "config" in doc:
        return doc["config"]["digest"]
    for entry in doc.get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os", "linux") == "linux" and platform.get("architecture", "amd64") == "amd64":
            return _config_of(entry["digest"], depth + 1)
    return None


def docker_id(ref):
    got = run(["docker", "image", "inspect", "--format", "{{.Id}}", ref])
    return got.stdout.strip() if got.returncode == 0 else None


def main():
    report = {"images": {}, "engines": {}}
    tars = sorted(f for f in os.listdir(IMAGES) if f.endswith(".tar")) if os.path.isdir(IMAGES) else []
    docker_up = run(["docker", "info", "--format", "{{.ServerVersion}}"]).returncode == 0
    report["engines"]["docker"] = "running" if docker_up else "not running: its images are not loaded"
    have = containerd_ids()
    status = 0
    for name in tars:
        path = os.path.join(IMAGES, name)
        entry = report["images"][name] = {}
        try:
            images = tar_images(path)
        except (OSError, KeyError, ValueError, tarfile.TarError) as exc:
            entry["error"] = "not a docker-save tar: %s" % exc
            status = 1
            continue
        entry["refs"] = [r for refs, _cfg in images for r in refs]
        if all(have.get(r) == cfg for refs, cfg in images for r in refs):
            entry["containerd"] = "present"
        else:
            start = time.monotonic()
            got = run(["ctr", "-n", NAMESPACE, "images", "import", "--snapshotter", "overlayfs", path])
            entry["containerd"] = ("imported in %.1f s" % (time.monotonic() - start) if got.returncode == 0
                                   else "import failed: " + (got.stderr or got.stdout).strip()[-400:])
            status = status or got.returncode
        if not docker_up:
            entry["docker"] = "skipped: docker is not running"
        elif all(docker_id(r) == cfg for refs, cfg in images for r in refs):
            entry["docker"] = "present"
        else:
            start = time.monotonic()
            got = run(["docker", "load", "-q", "-i", path])
            entry["docker"] = ("loaded in %.1f s" % (time.monotonic() - start) if got.returncode == 0
                               else "load failed: " + (got.stderr or got.stdout).strip()[-400:])
            status = status or got.returncode
    print(json.dumps(report, sort_keys=True))
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
