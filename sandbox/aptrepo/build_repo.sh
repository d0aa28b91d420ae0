#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the stand-in NVIDIA container toolkit packages (test stand-ins, NOT NVIDIA software) and a signed flat apt
# repository laid out like https://nvidia.github.io/libnvidia-container, and stand-in NVIDIA driver packages in a
# second flat repository laid out like NVIDIA's CUDA repository, https://developer.download.nvidia.com/compute/cuda/
# repos/debian12/x86_64/, signed with the same key (see README.md beside this file).
#
#   build_repo.sh --runtime DIR --out DIR --gnupg DIR [--url URL]   the whole repository into DIR (contents replaced)
#   build_repo.sh --runtime DIR --debs-only --out DIR               only the .deb files (the reproducibility test)
#
# --runtime is where `make nvidia-runtime` built NVIDIA's own nvidia-container-runtime, nvidia-ctk and nvidia-cdi-hook,
# one directory per upstream version (sandbox/nvidia-runtime): nvidia-container-toolkit-base ships them. The versions
# are read from versions.env beside this file (the one place).
# --gnupg is a private GNUPGHOME; its signing key is generated on first use and kept, and the repository's gpgkey is
# exported from it on every build, so gpgkey always matches InRelease and Release.gpg (checked with gpgv at the end).
# --url is where the repository is served (default http://127.0.0.1:8088): it goes into nvidia-container-toolkit.list.
# Needs dpkg-deb, apt-ftparchive (apt-utils), gcc, gpg and gpgv; uses no network.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
read -r -a TOOLKIT_VERSIONS <<<"$(sed -n 's/^TOOLKIT_VERSIONS=//p' "$here/versions.env")"
[ "${#TOOLKIT_VERSIONS[@]}" -gt 0 ] || { echo "build_repo.sh: no TOOLKIT_VERSIONS in $here/versions.env" >&2; exit 1; }
# NVIDIA's programs in nvidia-container-toolkit-base, built by sandbox/nvidia-runtime/rules.mk
RUNTIME_PROGRAMS=(nvidia-container-runtime nvidia-ctk nvidia-cdi-hook)
# Stand-in driver packages: two releases of one branch, so that a rolling upgrade has somewhere to go.
DRIVER_BRANCH=570
DRIVER_VERSIONS=(570.124.06-1 570.172.08-1)
CUDA_REPO_DIR=compute/cuda/repos/debian12/x86_64
CUDA_KEY_NAME=3bf863cc.pub
DOCKER2_VERSION=2.14.0-1
DOCKER2_MIN_TOOLKIT=${TOOLKIT_VERSIONS[0]%-*}
ARCH=amd64
MULTIARCH=x86_64-linux-gnu
MAINTAINER='kubegpu sandbox <kubegpu-sandbox@example.invalid>'
KEY_UID='kubegpu sandbox apt repository (test stand-in, not NVIDIA) <kubegpu-sandbox@example.invalid>'
# Every timestamp inside the packages and the Release file's Date: 2025-01-01T00:00:00Z.
export SOURCE_DATE_EPOCH=1735689600
export LC_ALL=C TZ=UTC
umask 022

out="" gnupg="""" url="http://127.0.0.1:8088" debs_only=0

usage() {
    echo "usage: $0 --runtime DIR (--out DIR --gnupg DIR [--url URL] | --debs-only --out DIR)" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?}; shift 2 ;;
        --gnupg) gnupg=${2:?}; shift 2 ;;
        --url) url=${2:?}; shift 2 ;;
        --runtime) runtime=${2:?}; shift 2 ;;
        --debs-only) debs_only=1; shift ;;
        *) usage ;;
    esac
done
[ -n "$out" ] || usage
[ "$debs_only" = 1 ] || [ -n "$gnupg" ] || usage
[ -n "$runtime" ] || usage
for version in "${TOOLKIT_VERSIONS[@]}"; do
    for program in "${RUNTIME_PROGRAMS[@]}" LICENSE; do
        [ -f "$runtime/${version%-*}/$program" ] || {
            echo "build_repo.sh: $runtime/${version%-*}/$program is missing (make nvidia-runtime)" >&2; exit 1; }
    done
done
for tool in dpkg-deb gcc; do
    command -v "$tool" >/dev/null || { echo "build_repo.sh: $tool is missing" >&2; exit 1; }
done
if [ "$debs_only" = 0 ]; then
    for tool in apt-ftparchive gpg gpgv gpgconf; do
        command -v "$tool" >/dev/null || { echo "build_repo.sh: $tool is missing (apt-utils, gnupg, gpgv)" >&2; exit 1; }
    done
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${out}.work.XXXXXX")
cleanup() {
    if [ -n "$gnupg" ] && [ -d "$gnupg" ]; then
        gpgconf --homedir "$gnupg" --kill gpg-agent >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

repo="$work/repo"
toolkit_pool="$repo/stable/deb/$ARCH"
cuda_pool="$repo/$CUDA_REPO_DIR"
mkdir -p "$toolkit_pool" "$cuda_pool"
# build_deb writes into $pool; what the packages are stand-ins for goes into their descriptions
pool=$toolkit_pool
WHAT="the NVIDIA"
WHAT2=" container toolkit with apt where NVIDIA's repositories are unreachable. See"
HOMEPAGE=https://github.com/NVIDIA/nvidia-container-toolkit

# --- Package building blocks ---------------------------------------------------------------------------------------

# put_file ROOT PATH MODE: stdin becomes ROOT/PATH with MODE.
put_file() {
    mkdir -p "$(dirname "$1/$2")"
    cat > "$1/$2"
    chmod "$3" "$1/$2"
}

# readme ROOT PKG VERSION [UPSTREAM]: /usr/share/doc/PKG/README.kubegpu, present in every package. With UPSTREAM, the
# package carries NVIDIA's own programs built from source at that version (nvidia-container-toolkit-base).
readme() {
    if [ -n "${4-}" ]; then
        put_file "$1" "usr/share/doc/$2/README.kubegpu" 0644 <<TXT
$2 $3 (kubegpu test stand-in)

This package is a TEST STAND-IN built by the kubegpu.cluster collection's test sandbox
(sandbox/aptrepo/build_repo.sh). The package is NOT NVIDIA software: NVIDIA did not build or
publish it. The programs in it are NVIDIA's own: nvidia-container-runtime, nvidia-ctk and
nvidia-cdi-hook, built unchanged by the sandbox (sandbox/nvidia-runtime) from the source of
github.com/NVIDIA/nvidia-container-toolkit v$4 (Go module proxy; Apache License 2.0, see
LICENSE beside this file). It lets the collection's tests install "the NVIDIA container toolkit"
with apt, the way real users do, where NVIDIA's repositories cannot be reached.
TXT
        return
    fi
    put_file "$1" "usr/share/doc/$2/README.kubegpu" 0644 <<TXT
$2 $3 (kubegpu test stand-in)

This package is a TEST STAND-IN built by the kubegpu.cluster collection's test sandbox
(sandbox/aptrepo/build_repo.sh). It is NOT NVIDIA software and contains nothing of NVIDIA's.
It only lets the collection's tests install "the NVIDIA container toolkit" with apt, the way
real users do, where NVIDIA's repositories cannot be reached. Its programs are small shell
scripts that answer --version (nvidia-container-runtime-hook exits 0); NVIDIA's runtime,
nvidia-ctk and nvidia-cdi-hook are in nvidia-container-toolkit-base.
TXT
}

# build_deb ROOT PKG VERSION ARCH DEPENDS DESCRIPTION [COMPRESSOR]: DEBIAN/control and md5sums, fixed mtimes,
# dpkg-deb --build (xz -9 unless COMPRESSOR says otherwise).
build_deb() {
    local root=$1 pkg=$2 version=$3 arch=$4 depends=$5 description=$6 compressor=${7:-xz} size
    mkdir -p "$root/DEBIAN"
    # Installed-Size in KiB, as dpkg-gencontrol counts it: each file rounded up to a whole KiB.
    size=$(find "$root" -path "$root/DEBIAN" -prune -o ! -type d -printf '%s\n' | awk '{ k += int(($1 + 1023) / 1024) } END { print k + 0 }')
    {
        echo "Package: $pkg"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $MAINTAINER"
        echo "Installed-Size: $size"
        [ -z "$depends" ] || echo "Depends: $depends"
        echo "Section: utils"
        echo "Priority: optional"
        echo "Homepage: $HOMEPAGE"
        echo "Description: $description (kubegpu test stand-in, not NVIDIA software)"
        echo " Built by the kubegpu.cluster test sandbox so that tests can install $WHAT"
        echo "$WHAT2"
        echo " /usr/share/doc/$pkg/README.kubegpu."
    } > "$root/DEBIAN/control"
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0r md5sum) \
        > "$root/DEBIAN/md5sums"
    chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
    [ ! -f "$root/DEBIAN/triggers" ] || chmod 0644 "$root/DEBIAN/triggers"
    find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    dpkg-deb --root-owner-group "-Z$compressor" -z9 --build "$root" "$pool/${pkg}_${version}_${arch}.deb" >/dev/null
}

# --- The packages, per toolkit version -----------------------------------------------------------------------------

for version in "${TOOLKIT_VERSIONS[@]}"; do
    upstream=${version%-*}
    IFS=. read -r major minor patch <<<"$upstream"

    # NVIDIA's own programs, built from the toolkit's source at this version (sandbox/nvidia-runtime), in a package of ours
    root="$work/nvidia-container-toolkit-base_$version"
    for program in "${RUNTIME_PROGRAMS[@]}"; do
        put_file "$root" "usr/bin/$program" 0755 < "$runtime/$upstream/$program"
    done
    put_file "$root" usr/share/doc/nvidia-container-toolkit-base/LICENSE 0644 < "$runtime/$upstream/LICENSE"
    readme "$root" nvidia-container-toolkit-base "$version" "$upstream"
    # gzip: xz -9 takes a minute for these 27 MB on this machine, gzip -9 seconds (a rebuild runs in every test run)
    build_deb "$root" nvidia-container-toolkit-base "$version" "$ARCH" "" \
        "NVIDIA Container Toolkit base (runtime and nvidia-ctk)" gzip

    root="$work/nvidia-container-toolkit_$version"
    put_file "$root" usr/bin/nvidia-container-runtime-hook 0755 <<SH
#!/bin/sh
# kubegpu test stand-in for NVIDIA's nvidia-container-runtime-hook $upstream (NOT NVIDIA software): does nothing.
exit 0
SH
    readme "$root" nvidia-container-toolkit "$version"
    build_deb "$root" nvidia-container-toolkit "$version" "$ARCH" \
        "nvidia-container-toolkit-base (= $version), libnvidia-container-tools (= $version)" \
        "NVIDIA Container Toolkit (OCI hook)"

    root="$work/libnvidia-container-tools_$version"
    put_file "$root" usr/bin/nvidia-container-cli 0755 <<SH
#!/bin/sh
# kubegpu test stand-in for NVIDIA's nvidia-container-cli $upstream (NOT NVIDIA software): --version only.
case "\${1-}" in
    --version|-V)
        echo "cli-version: $upstream"
        echo "lib-version: $upstream"
        echo "build date: 2025-01-01T00:00+00:00 (kubegpu stand-in)"
        exit 0
        ;;
esac
echo "nvidia-container-cli: kubegpu stand-in: not implemented: \$*" >&2
exit 2
SH
    readme "$root" libnvidia-container-tools "$version"
    build_deb "$root" libnvidia-container-tools "$version" "$ARCH" "libnvidia-container1 (= $version)" \
        "NVIDIA container runtime library (command-line tools)"

    root="$work/libnvidia-container1_$version"
    libdir="usr/lib/$MULTIARCH"
    mkdir -p "$root/$libdir"
    gcc -shared -fPIC -nostdlib -O2 -s -Wl,-soname,libnvidia-container.so.1 -Wl,--build-id=sha1 \
        -DNVC_MAJOR="$major" -DNVC_MINOR="$minor" -DNVC_PATCH="$patch" -DNVC_VERSION="\"$upstream\"" \
        -o "$root/$libdir/libnvidia-container.so.$upstream" "$here/libnvidia-container.c"
    chmod 0644 "$root/$libdir/libnvidia-container.so.$upstream"
    ln -s "libnvidia-container.so.$upstream" "$root/$libdir/libnvidia-container.so.1"
    echo "activate-noawait ldconfig" | put_file "$root" DEBIAN/triggers 0644
    readme "$root" libnvidia-container1 "$version"
    build_deb "$root" libnvidia-container1 "$version" "$ARCH" "" "NVIDIA container runtime library"
done

# The legacy package for Docker < 19.03; NVIDIA's also ships /etc/docker/daemon.json, which a stand-in leaves alone.
root="$work/nvidia-docker2_$DOCKER2_VERSION"
readme "$root" nvidia-docker2 "$DOCKER2_VERSION"
build_deb "$root" nvidia-docker2 "$DOCKER2_VERSION" all "nvidia-container-toolkit (>= $DOCKER2_MIN_TOOLKIT)" \
    "NVIDIA Container Toolkit meta-package for Docker < 19.03 (legacy)"

# --- The stand-in driver packages, per driver version --------------------------------------------------------------
#
# nvidia-driver-cuda ships /usr/lib/fake-nvml/driver-version, one line with the driver version: the sandbox's fake
# NVML (sandbox/fakenvml/driver.c) reports it once the "kernel module" of that version is loaded, and a driver/library
# version mismatch while an older one still is (until a reboot). cuda-drivers-BRANCH and cuda-drivers are the
# metapackages NVIDIA's CUDA repository names (gpu_driver installs cuda-drivers[-BRANCH]).

pool=$cuda_pool
WHAT="an NVIDIA"
WHAT2=" driver with apt where NVIDIA's CUDA repository is unreachable. See"
HOMEPAGE=https://developer.nvidia.com/cuda-downloads

driver_readme() {
    put_file "$1" "usr/share/doc/$2/README.kubegpu" 0644 <<TXT
$2 $3 (kubegpu test stand-in)

This package is a TEST STAND-IN built by the kubegpu.cluster collection's test sandbox
(sandbox/aptrepo/build_repo.sh). It is NOT NVIDIA software and contains nothing of NVIDIA's:
no kernel module and no library. It only lets the collection's tests install and upgrade
"the NVIDIA driver" with apt, the way real users do, where NVIDIA's repositories cannot be
reached. nvidia-driver-cuda ships /usr/lib/fake-nvml/driver-version, which the sandbox's fake
NVML reports as the driver version once a "kernel module" of that version is loaded.
TXT
}

for version in "${DRIVER_VERSIONS[@]}"; do
    upstream=${version%-*}

    root="$work/nvidia-driver-cuda_$version"
    echo "$upstream" | put_file "$root" usr/lib/fake-nvml/driver-version 0644
    driver_readme "$root" nvidia-driver-cuda "$version"
    build_deb "$root" nvidia-driver-cuda "$version" "$ARCH" "" "NVIDIA driver $upstream user-space components"

    root="$work/cuda-drivers-${DRIVER_BRANCH}_$version"
    driver_readme "$root" "cuda-drivers-$DRIVER_BRANCH" "$version"
    build_deb "$root" "cuda-drivers-$DRIVER_BRANCH" "$version" "$ARCH" "nvidia-driver-cuda (= $version)" \
        "NVIDIA driver $DRIVER_BRANCH branch metapackage"

    root="$work/cuda-drivers_$version"
    driver_readme "$root" cuda-drivers "$version"
    build_deb "$root" cuda-drivers "$version" "$ARCH" "cuda-drivers-$DRIVER_BRANCH (= $version)" \
        "NVIDIA driver metapackage (newest branch)"
done

if [ "$debs_only" = 1 ]; then
    find "$out" -mindepth 1 -delete
    cp -p "$toolkit_pool"/*.deb "$cuda_pool"/*.deb "$out/"
    ls "$out"
    exit 0
fi

# --- Flat repository: stable/deb/amd64/{Packages,Packages.gz,Release,InRelease,Release.gpg} -------------------------

# index DIR LABEL: Packages, Packages.gz and Release of the flat repository in DIR.
index() {
    (
    cd "$1"
    # One deb at a time, in sorted order: the Packages file does not depend on the order of the directory.
    printf '%s\n' ./*.deb | sort | while read -r deb; do
        apt-ftparchive packages "$deb"
    done > Packages
    gzip -9n < Packages > Packages.gz
    apt-ftparchive \
        -o APT::FTPArchive::Release::Origin="kubegpu sandbox" \
        -o APT::FTPArchive::Release::Label="$2 (kubegpu test stand-in)" \
        -o APT::FTPArchive::Release::Architectures="$ARCH all" \
        -o APT::FTPArchive::Release::Date="$(date -u -R -d "@$SOURCE_DATE_EPOCH")" \
        release . > "$work/Release"
    mv "$work/Release" Release
    )
}
index "$toolkit_pool" nvidia-container-toolkit
index "$cuda_pool" cuda-drivers
echo "deb $url/stable/deb/\$(ARCH) /" > "$repo/stable/deb/nvidia-container-toolkit.list"

# --- Signing key (generated once, kept in the private GNUPGHOME), gpgkey, InRelease, Release.gpg --------------------

mkdir -p "$gnupg"
chmod 0700 "$gnupg"
gpg_() {
    gpg --homedir "$gnupg" --batch --quiet --no-tty "$@"
}
fingerprint() {
    gpg_ --with-colons --list-secret-keys 2>/dev/null | awk -F: '$1 == "fpr" { print $10; exit }'
}
fpr=$(fingerprint)
if [ -z "$fpr" ]; then
    echo "build_repo.sh: generating the repository signing key in $gnupg"
    gpg_ --passphrase '' --quick-gen-key "$KEY_UID" ed25519 sign never
    fpr=$(fingerprint)
    [ -n "$fpr" ] || { echo "build_repo.sh: no key after gpg --quick-gen-key" >&2; exit 1; }
fi
gpg_ --armor --export "$fpr" > "$repo/gpgkey"
cp "$repo/gpgkey" "$cuda_pool/$CUDA_KEY_NAME"   # NVIDIA serves the CUDA repository's key beside its index
for pool in "$toolkit_pool" "$cuda_pool"; do
    gpg_ --yes --local-user "$fpr" --digest-algo SHA512 --clearsign -o "$pool/InRelease" "$pool/Release"
    gpg_ --yes --local-user "$fpr" --digest-algo SHA512 --armor --detach-sign -o "$pool/Release.gpg" "$pool/Release"
done

# The served key must verify what is served: check with gpgv and a keyring made from gpgkey alone.
gpg_ --dearmor < "$repo/gpgkey" > "$work/keyring.gpg"
verify() {
    gpgv --homedir "$work" --keyring "$work/keyring.gpg" "$@" 2>"$work/gpgv.log" \
        || { echo "build_repo.sh: gpgkey does not verify $*:" >&2; cat "$work/gpgv.log" >&2; exit 1; }
}
for pool in "$toolkit_pool" "$cuda_pool"; do
    verify "$pool/InRelease"
    verify "$pool/Release.gpg" "$pool/Release"
done

# Replace the contents of $out but keep the directory itself: a running container's bind mount stays valid.
find "$out" -mindepth 1 -delete
cp -a "$repo/." "$out/"
echo "build_repo.sh: $out signed by $fpr: $(cd "$toolkit_pool" && echo ./*.deb | wc -w) + $(cd "$cuda_pool" && echo ./*.deb | wc -w) packages"
