#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Build the kubelet of the sandbox's kubelet nodes from the same k8s.io/kubernetes module and version as the control
# plane (sandbox/k8s/versions.env), into $CACHE_DIR/kubelet/<KUBE_VERSION>/bin with a stamp of its own, or reuse it
# when that stamp matches. It shares the Go module and build caches with sandbox/k8s/build/build.sh (GOCACHE and
# GOMODCACHE under $CACHE_DIR/go), so most of k8s.io/kubernetes is compiled once for both, but it never writes under
# $CACHE_DIR/k8s/: the control plane's stamp and binaries stay as they are.
#
# The throw-away Go module (generated under the cache, never committed) is made as build.sh makes its own: require
# k8s.io/kubernetes and pin every staging module its go.mod replaces with ./staging/src to v0.<minor>.<patch>.
# CGO_ENABLED=0: Kubernetes' own release builds the kubelet static too (hack/lib/golang.sh, KUBE_STATIC_BINARIES).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091 # versions.env holds plain KEY=value lines
. "$here/../k8s/versions.env"

CACHE_DIR=${CACHE_DIR:-$HOME/.cache/kubegpu}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
top=$CACHE_DIR/kubelet/$KUBE_VERSION
bin=$top/bin
src=$top/src
stamp_want="kubelet=$KUBE_VERSION go=$("$GO" env GOVERSION)"

if [[ -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$stamp_want" && -x $bin/kubelet ]]; then
    echo "kubelet: cached in $bin ($stamp_want)"
    exit 0
fi

export GOCACHE=${GOCACHE_OVERRIDE:-$CACHE_DIR/go/build}
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$CACHE_DIR/go/mod}
export TMPDIR=$CACHE_DIR/go/tmp
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$bin" "$src" "$GOCACHE" "$GOMODCACHE" "$TMPDIR"
# one build of this key at a time (two checkouts may ask at once)
exec 9>"$top/.lock"
flock -w 1800 9
if [[ -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$stamp_want" && -x $bin/kubelet ]]; then
    echo "kubelet: cached in $bin ($stamp_want)"
    exit 0
fi
rm -f "$bin/.stamp"

start=$(date +%s)
minor=${KUBE_VERSION#*.}
minor=${minor%%.*}
# shellcheck source=../k8s/build/gomod.sh
. "$here/../k8s/build/gomod.sh"
k8s_gomod sandbox/kubelet/build.sh kubegpu.local/sandbox-kubelet-build "" >"$src/go.mod"
cd "$src"
ldv=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldv+=" -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldv+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
echo "building kubelet (Kubernetes v$KUBE_VERSION) into $bin"
nice -n 10 "$GO" build -trimpath -ldflags="-s -w$ldv" -o "$bin/kubelet.new" k8s.io/kubernetes/cmd/kubelet
mv "$bin/kubelet.new" "$bin/kubelet"
"$bin/kubelet" --version | grep -qx "Kubernetes v$KUBE_VERSION"
printf '%s\n' "$stamp_want" >"$bin/.stamp"
echo "kubelet built in $(($(date +%s) - start)) s into $bin"
