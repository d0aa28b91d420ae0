#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the proof image, the sandbox's stand-in for NVIDIA's CUDA vectorAdd sample image (README.md beside this file),
# and saves it as a docker archive that a node's containerd and docker can load (`ctr images import`, `docker load`).
#
#   build_image.sh --image NAME:TAG --cuda VERSION --out FILE.tar
#
# The image holds only what the program needs: vectorAdd (vectoradd.c, compiled here with the CUDA version of the
# image's tag) and, from this machine's Debian, glibc's dynamic loader and libc. No registry is used (FROM scratch).
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image="" cuda="" out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --image) image=${2:?}; shift 2 ;;
        --cuda) cuda=${2:?}; shift 2 ;;
        --out) out=${2:?}; shift 2 ;;
        *) echo "usage: $0 --image NAME:TAG --cuda VERSION --out FILE.tar" >&2; exit 2 ;;
    esac
done
if [ -z "$image" ] || [ -z "$out" ]; then
    echo "build_image.sh: --image and --out are required" >&2
    exit 2
fi
[[ "$cuda" =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]] || { echo "build_image.sh: --cuda '$cuda' is not a CUDA version" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kubegpu-proof.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/cuda-samples" "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
gcc -std=gnu11 -O2 -Wall -Wextra -Werror -DPROOF_CUDA_VERSION="\"$cuda\"" -o "$root/cuda-samples/vectorAdd" \
    "$here/vectoradd.c"
# What the program needs at run time, as the loader resolves it here: ld-linux and libc, at the paths they have here
ldd "$root/cuda-samples/vectorAdd" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
if [ ! -e "$root/lib64/ld-linux-x86-64.so.2" ] || [ ! -e "$root/lib/x86_64-linux-gnu/libc.so.6" ]; then
    echo "build_image.sh: ldd did not name the loader and libc" >&2
    exit 1
fi
cat > "$work/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
# What NVIDIA's CUDA images set: every GPU unless a device plugin says otherwise, the compute and utility libraries
ENV PATH=/cuda-samples \\
    NVIDIA_VISIBLE_DEVICES=all \\
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
LABEL kubegpu.standin="true" \\
      kubegpu.standin.for="$image" \\
      org.opencontainers.image.title="kubegpu sandbox stand-in for NVIDIA's CUDA vectorAdd sample (CUDA $cuda)" \\
      org.opencontainers.image.description="A TEST STAND-IN built by the kubegpu.cluster sandbox (sandbox/proof): not NVIDIA software, no CUDA program. It reads the driver's CUDA version through the NVML library NVIDIA's container runtime injects and prints what vectorAdd prints, or CUDA's error."
WORKDIR /cuda-samples
CMD ["/cuda-samples/vectorAdd"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build --quiet --network none -t "$image" "$work" >/dev/null
mkdir -p "$(dirname "$out")"
docker save -o "$out.partial" "$image"
mv -f "$out.partial" "$out"
echo "build_image.sh: $image (CUDA $cuda) -> $out"
