#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Build kubeletcheck (main.go: the kubelet's own device plugin Registration server and plugin client, from
# k8s.io/kubernetes at the sandbox's KUBE_VERSION) into $CACHE_DIR/standins-kubeletcheck/<key>/kubeletcheck, or reuse
# it. Its Go module is generated here from sandbox/k8s/versions.env the way sandbox/k8s/build/build.sh generates the
# control plane's (k8s.io/kubernetes, every staging module it replaces pinned to v0.<minor>.<patch>), so the version is
# written once; key: main.go, this script, versions.env and the Go version. Prints the binary's path. --if-cached:
# exit 3 instead of building (the tests ask so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091 # versions.env holds plain KEY=value lines
. "$here/../../k8s/versions.env"
: "${CACHE_DIR:=$HOME/.cache/kubegpu}"
GO=${GO:-go}
export TMPDIR=$CACHE_DIR/go/tmp GOMODCACHE=$CACHE_DIR/go/mod GOCACHE=$CACHE_DIR/go/build GOFLAGS="-mod=mod -buildvcs=false"
mkdir -p "$TMPDIR"
key=$({ cat "$here/main.go" "$0" "$here/../../k8s/versions.env"; "$GO" env GOVERSION; } | sha256sum | cut -c1-16)
out=$CACHE_DIR/standins-kubeletcheck/$key
if [[ -x $out/kubeletcheck ]]; then echo "$out/kubeletcheck"; exit 0; fi
if [[ ${1:-} == --if-cached ]]; then echo "kubeletcheck $key is not built: make standins-kubeletcheck" >&2; exit 3; fi
src=$out/src
rm -rf "$src" && mkdir -p "$src"
cp "$here/main.go" "$src/"
# shellcheck source=../../k8s/build/gomod.sh
. "$here/../../k8s/build/gomod.sh"
k8s_gomod sandbox/standins/kubeletcheck/build.sh kubegpu.local/standins-kubeletcheck \
    "$("$GO" env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0" >"$src/go.mod"
(cd "$src" && "$GO" mod tidy >&2 && nice -n 10 "$GO" build -trimpath -ldflags="-s -w" -o "$out/kubeletcheck.tmp" .)
mv -f "$out/kubeletcheck.tmp" "$out/kubeletcheck"
# one key kept: the binaries of earlier keys go (this cache is this script's alone)
find "$CACHE_DIR/standins-kubeletcheck" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "$out/kubeletcheck"
