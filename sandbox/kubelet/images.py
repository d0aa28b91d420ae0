# SPDX-License-Identifier: GPL-3.0-or-later
"""The pause image of our own, as a docker-save tar, built once per key.

``python -m sandbox.kubelet.images pause --cache-dir DIR --out DIR``: compile pause/pause.c static, build the image
FROM scratch on the local engine (nothing is pulled) tagged with kubelet.env's PAUSE_IMAGE, save it as
``<cache>/pause-<key>.tar`` (key: pause.c, the Dockerfile, the tag and the compiler's version) and put it in the
loader directory as ``pause.tar``, which every kubelet node imports (node/load_images.py).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import config

PAUSE_DIR = config.HERE / "pause"


def pause_key(tag: str) -> str:
    """The cache key of the pause image tar."""
    digest = hashlib.sha256()
    for part in ((PAUSE_DIR / "pause.c").read_bytes(), (PAUSE_DIR / "Dockerfile").read_bytes(), tag.encode(),
                 subprocess.run(["gcc", "--version"], capture_output=True, check=True).stdout):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def build_pause(cache_dir: Path, out_dir: Path) -> Path:
    """Build (or reuse) the pause image tar; return its path in ``out_dir``."""
    tag = config.read_env()["PAUSE_IMAGE"]
    key = pause_key(tag)
    cached = cache_dir / ("pause-%s.tar" % key)
    started = time.monotonic()
    if not cached.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="kubegpu-pause-") as tmp:
            ctx = Path(tmp)
            shutil.copy(PAUSE_DIR / "Dockerfile", ctx / "Dockerfile")
            subprocess.run(["gcc", "-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o", str(ctx / "pause"),
                            str(PAUSE_DIR / "pause.c")], check=True)
            subprocess.run(["docker", "build", "-q", "--network", "none", "--label", "kubegpu.image-key=" + key,
                            "-t", tag, str(ctx)], check=True, stdout=subprocess.DEVNULL)
            partial = cached.with_suffix(".tar.tmp")
            subprocess.run(["docker", "save", "-o", str(partial), tag], check=True)
            partial.replace(cached)
        print("pause image: built %s as %s in %.1f s" % (tag, cached, time.monotonic() - started))
    else:
        print("pause image: cached %s (%s)" % (cached, tag))
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "pause.tar"
    if not target.exists() or target.read_bytes() != cached.read_bytes():
        shutil.copyfile(cached, target)
    return target


def main(argv=None) -> int:
    """Command line."""
    parser = argparse.ArgumentParser(prog="python -m sandbox.kubelet.images", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_pause = sub.add_parser("pause", help="build or reuse the pause image tar and put it in --out")
    p_pause.add_argument("--cache-dir", type=Path, required=True)
    p_pause.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    build_pause(args.cache_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
