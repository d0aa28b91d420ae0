#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Build kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok from Go modules
# into $CACHE_DIR/k8s/<KUBE_VERSION>/bin, or reuse them when the stamp there matches versions.env.
#
# One throw-away Go module (generated under the cache, never committed) requires k8s.io/kubernetes,
# go.etcd.io/etcd/server/v3 and sigs.k8s.io/kwok, and pins every k8s.io/* staging module that
# k8s.io/kubernetes' own go.mod replaces to v0.<minor>.<patch>. All five binaries share one build cache.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091 # versions.env holds plain KEY=value lines
. "$here/../versions.env"

CACHE_DIR=${CACHE_DIR:-$HOME/.cache/kubegpu}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
top=$CACHE_DIR/k8s/$KUBE_VERSION
bin=$top/bin
src=$top/src
stamp_want="kube=$KUBE_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION go=$("$GO" env GOVERSION)"
binaries=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)

have_all() {
    local b
    [[ -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$stamp_want" ]] || return 1
    for b in "${binaries[@]}"; do [[ -x $bin/$b ]] || return 1; done
}

if have_all; then
    echo "k8s binaries: cached in $bin ($stamp_want)"
    exit 0
fi

export GOCACHE=${GOCACHE_OVERRIDE:-$CACHE_DIR/go/build}
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$CACHE_DIR/go/mod}
# a TMPDIR of the build's own, as the Makefile's GO_ENV (a stray header in /tmp must not reach a compiler)
export TMPDIR=$CACHE_DIR/go/tmp
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local
export CGO_ENABLED=0
mkdir -p "$bin" "$src" "$GOCACHE" "$GOMODCACHE" "$TMPDIR"

start=$(date +%s)
minor=${KUBE_VERSION#*.}
minor=${minor%%.*}
# shellcheck source=gomod.sh
. "$here/gomod.sh"
k8s_gomod sandbox/k8s/build/build.sh kubegpu.local/sandbox-k8s-build "" \
    "go.etcd.io/etcd/server/v3 v$ETCD_VERSION" "sigs.k8s.io/kwok v$KWOK_VERSION" >"$src/go.mod"
cd "$src"
vpkg=k8s.io/component-base/version
cvpkg=k8s.io/client-go/pkg/version
ldv=""
for p in $vpkg $cvpkg; do
    ldv+=" -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    ldv+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
flags=(-trimpath)
echo "building kube-apiserver kube-controller-manager kube-scheduler (Kubernetes v$KUBE_VERSION) into $bin"
nice -n 10 "$GO" build "${flags[@]}" -ldflags="-s -w$ldv" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
echo "building etcd v$ETCD_VERSION"
nice -n 10 "$GO" build "${flags[@]}" -ldflags="-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
echo "building kwok v$KWOK_VERSION"
nice -n 10 "$GO" build "${flags[@]}" -ldflags="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok

printf '%s\n' "$stamp_want" >"$bin/.stamp"
echo "k8s binaries built in $(($(date +%s) - start)) s into $bin"
