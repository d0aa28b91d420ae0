#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Build the stand-in of NVIDIA's DRA GPU kubelet plugin (main.go, from the Go module proxy: go.mod/go.sum) and its
# image, tagged as NVIDIA's image (plugins/module_utils/_nvidia/constants.py DRA_DRIVER_IMAGE_REPOSITORY and
# DRA_DRIVER_VERSION), into $CACHE_DIR/draplugin/<key>/{gpu-kubelet-plugin,draplugin.tar}, or reuse them. Key: this
# directory's files, the image tag, the Go version and the base image's id. With --copy-to DIR the tar also goes to
# DIR/draplugin.tar (the kubelet nodes' loader directory). Prints the tar's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${CACHE_DIR:=$HOME/.cache/kubegpu}"
GO=${GO:-go}
BASE_IMAGE=${BASE_IMAGE:-kubegpu/debian:bookworm}
copy_to=
[[ ${1:-} == --copy-to ]] && copy_to=$2
constants=$root/plugins/module_utils/_nvidia/constants.py
repo=$(sed -n 's/^DRA_DRIVER_IMAGE_REPOSITORY = "\(.*\)"$/\1/p' "$constants")
tag=$(sed -n 's/^DRA_DRIVER_VERSION = "\(.*\)"$/\1/p' "$constants")
[[ -n $repo && -n $tag ]] || { echo "draplugin: no DRA_DRIVER_IMAGE_REPOSITORY/DRA_DRIVER_VERSION in $constants" >&2; exit 1; }
image=$repo:$tag
# the k8s.io modules must be the sandbox's Kubernetes (sandbox/k8s/versions.env, the one place of that version)
# shellcheck disable=SC1091
. "$root/sandbox/k8s/versions.env"
want="v0.${KUBE_VERSION#*.}"
grep -q "k8s.io/dynamic-resource-allocation $want\$" "$here/go.mod" || {
    echo "draplugin: go.mod must require k8s.io/dynamic-resource-allocation $want (Kubernetes $KUBE_VERSION)" >&2; exit 1; }
base_id=$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null) || {
    echo "draplugin: no base image $BASE_IMAGE (make node-images builds it)" >&2; exit 1; }
key=$({ cat "$here"/main.go "$here"/go.mod "$here"/go.sum "$here"/Dockerfile "$here"/kubelet-plugin-prestart.sh "$0";
        echo "$image $base_id"; "$GO" env GOVERSION; } | sha256sum | cut -c1-16)
out=$CACHE_DIR/draplugin/$key
tar=$out/draplugin.tar
if [[ ! -f $tar ]]; then
    export TMPDIR=$CACHE_DIR/go/tmp GOMODCACHE=$CACHE_DIR/go/mod GOCACHE=$CACHE_DIR/go/build GOFLAGS="-mod=mod -buildvcs=false"
    export CGO_CFLAGS="-O2 -Wno-deprecated-declarations"
    mkdir -p "$TMPDIR" "$out"
    ctx=$out/context
    rm -rf "$ctx" && mkdir -p "$ctx"
    (cd "$here" && nice -n 10 "$GO" build -trimpath -ldflags="-s -w -X main.version=$tag" -o "$ctx/gpu-kubelet-plugin" .)
    cp "$here/kubelet-plugin-prestart.sh" "$here/Dockerfile" "$ctx/"
    docker build -q --network none --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "kubegpu.standin-key=$key" -t "$image" "$ctx" >/dev/null
    docker save -o "$tar.tmp" "$image"
    mv -f "$tar.tmp" "$tar"
    mv -f "$ctx/gpu-kubelet-plugin" "$out/gpu-kubelet-plugin"
    rm -rf "$ctx"
    # one key kept (this cache is this script's alone)
    find "$CACHE_DIR/draplugin" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
elif [[ $(docker image inspect -f '{{index .Config.Labels "kubegpu.standin-key"}}' "$image" 2>/dev/null) != "$key" ]]; then
    docker load -q -i "$tar" >/dev/null
fi
if [[ -n $copy_to ]]; then
    mkdir -p "$copy_to"
    cmp -s "$tar" "$copy_to/draplugin.tar" || cp -f "$tar" "$copy_to/draplugin.tar"
fi
echo "$tar"
