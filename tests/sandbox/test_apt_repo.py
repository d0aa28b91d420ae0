# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in NVIDIA container toolkit and driver apt repositories (sandbox/aptrepo, `make apt-repo`).

Host side: the layout mirrors nvidia.github.io/libnvidia-container (flat repository, suite "/", under
stable/deb/amd64), the packages carry the right versions, dependencies and files, the .deb files are byte for byte
reproducible, gpgkey verifies the signatures and `make apt-repo` is a no-op when nothing changed.

In a throwaway kubegpu/node:base container (``--network none``: loopback only), with the repository mounted
read-only at /srv/kubegpu-apt and served by python3 -m http.server on 127.0.0.1:8088: a user's installation as in
NVIDIA's install guide (gpgkey through gpg --dearmor into a keyring, the .list with signed-by, apt-get update with
only that source), all four packages pinned to 1.19.0-1, then an upgrade to 1.20.0-1 and nvidia-docker2; and apt
refusing the repository with another key, without the keyring, with a tampered InRelease and unsigned.
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPO = ROOT / '.build' / 'aptrepo'
POOL = REPO / 'stable' / 'deb' / 'amd64'
# The stand-in driver packages' repository, laid out like NVIDIA's CUDA repository for Debian 12
CUDA_DIR = 'compute/cuda/repos/debian12/x86_64'
CUDA_POOL = REPO / CUDA_DIR
DRIVER_OLD, DRIVER_NEW = '570.124.06-1', '570.172.08-1'
BUILD_SCRIPT = ROOT / 'sandbox' / 'aptrepo' / 'build_repo.sh'
IMAGE = 'kubegpu/node:base'
# The toolkit packages' versions, from the one place (sandbox/aptrepo/versions.env): the older one is pinned
OLD, NEW = next(line.split('=', 1)[1].split() for line in (ROOT / 'sandbox' / 'aptrepo' / 'versions.env').read_text(
    encoding='utf-8').splitlines() if line.startswith('TOOLKIT_VERSIONS='))
DOCKER2 = '2.14.0-1'
TOOLKIT = ('nvidia-container-toolkit', 'nvidia-container-toolkit-base', 'libnvidia-container-tools', 'libnvidia-container1')
MTIME = '2025-01-01 00:00'
LIST_LINE = 'deb http://127.0.0.1:8088/stable/deb/$(ARCH) /'

# What a user does (NVIDIA's install guide with the local server's URLs), as shell functions for the containers.
PRELUDE = r"""
set -euo pipefail
KEYRING=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
LIST=/etc/apt/sources.list.d/nvidia-container-toolkit.list
APT_ONLY=(-o "Dir::Etc::sourcelist=$LIST" -o Dir::Etc::sourceparts=-)
export DEBIAN_FRONTEND=noninteractive

# serve DIR: http.server on the container's loopback, polled (bounded) until gpgkey answers
serve() {
    python3 -m http.server 8088 --bind 127.0.0.1 --directory "$1" >/tmp/http.log 2>&1 &
    for _ in $(seq 100); do
        curl -fs -o /dev/null http://127.0.0.1:8088/gpgkey && return 0
        sleep 0.1
    done
    echo "http.server did not answer:" >&2; cat /tmp/http.log >&2; return 1
}

add_repo() {
    curl -fsSL http://127.0.0.1:8088/gpgkey | gpg --batch --dearmor -o "$KEYRING"
    curl -fsSL http://127.0.0.1:8088/stable/deb/nvidia-container-toolkit.list \
        | sed "s#deb http://#deb [signed-by=$KEYRING] http://#g" > "$LIST"
}

section() { echo "### $1"; }
"""

INSTALL = r"""
serve /srv/kubegpu-apt
add_repo
section list; cat "$LIST"
apt-get "${APT_ONLY[@]}" update -q >/tmp/update.log 2>&1 || { cat /tmp/update.log >&2; exit 1; }
section policy; apt-cache "${APT_ONLY[@]}" policy nvidia-container-toolkit
apt-get "${APT_ONLY[@]}" install -y -q --no-install-recommends nvidia-container-toolkit=1.19.0-1 \
    nvidia-container-toolkit-base=1.19.0-1 libnvidia-container-tools=1.19.0-1 libnvidia-container1=1.19.0-1 \
    >/tmp/install.log 2>&1 || { cat /tmp/install.log >&2; exit 1; }
section dpkg-pinned; dpkg -l | awk '$1 == "ii" && $2 ~ /nvidia/ { print $2, $3 }'
section runtime-version; nvidia-container-runtime --version
section runtime-help; nvidia-container-runtime --help
section ctk-version; nvidia-ctk --version
section ctk-configure; rc=0; nvidia-ctk runtime configure --runtime=docker --dry-run 2>&1 || rc=$?; echo "rc=$rc"
section cdi-hook; rc=0; nvidia-cdi-hook --version 2>&1 || rc=$?; echo "rc=$rc"
section cli-version; nvidia-container-cli --version
section hook; rc=0; nvidia-container-runtime-hook prestart </dev/null || rc=$?; echo "rc=$rc"
section nvc-version; python3 - <<'PY'
import ctypes
class Version(ctypes.Structure):
    _fields_ = [('major', ctypes.c_uint), ('minor', ctypes.c_uint), ('patch', ctypes.c_uint), ('string', ctypes.c_char_p)]
lib = ctypes.CDLL('libnvidia-container.so.1')
lib.nvc_version.restype = ctypes.POINTER(Version)
version = lib.nvc_version().contents
print(version.major, version.minor, version.patch, version.string.decode())
PY
section readme; cat /usr/share/doc/nvidia-container-toolkit/README.kubegpu
apt-get "${APT_ONLY[@]}" install -y -q --no-install-recommends nvidia-container-toolkit nvidia-docker2 \
    >/tmp/upgrade.log 2>&1 || { cat /tmp/upgrade.log >&2; exit 1; }
section dpkg-upgraded; dpkg -l | awk '$1 == "ii" && $2 ~ /nvidia/ { print $2, $3 }'
section runtime-version-upgraded; nvidia-container-runtime --version
"""

# Each negative case changes one thing from the user's setup above, then runs apt-get update.
REFUSALS = {
    'other-key': (r"""
serve /srv/kubegpu-apt
add_repo
gpg --batch --quiet --passphrase '' --quick-gen-key 'someone else <else@example.invalid>' ed25519 sign never
gpg --batch --export 'someone else' > "$KEYRING"
""", r'NO_PUBKEY (?P<keyid>[0-9A-F]{16})'),
    'no-keyring': (r"""
serve /srv/kubegpu-apt
add_repo
rm "$KEYRING"
""", r'NO_PUBKEY (?P<keyid>[0-9A-F]{16})'),
    'tampered-inrelease': (r"""
cp -a /srv/kubegpu-apt /tmp/repo
sed -i 's/^ [0-9a-f]\{8\}/ 00000000/' /tmp/repo/stable/deb/amd64/InRelease
serve /tmp/repo
add_repo
""", r'BADSIG (?P<keyid>[0-9A-F]{16})'),
    'unsigned': (r"""
cp -a /srv/kubegpu-apt /tmp/repo
rm /tmp/repo/stable/deb/amd64/InRelease /tmp/repo/stable/deb/amd64/Release.gpg
serve /tmp/repo
add_repo
""", r"repository 'http://127\.0\.0\.1:8088/stable/deb/amd64 +Release' is not signed"),
}

REFUSAL_TAIL = r"""
rc=0
apt-get "${APT_ONLY[@]}" update -q >/tmp/update.log 2>&1 || rc=$?
cat /tmp/update.log
echo "update-rc=$rc"
rc=0
apt-get "${APT_ONLY[@]}" install -s nvidia-container-toolkit 2>&1 || rc=$?
echo "install-rc=$rc"
"""


def _run(args, timeout, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def _expected_packages():
    """(package, version, architecture) -> (Depends or None, files other than the README)."""
    expected = {}
    for version in (OLD, NEW):
        upstream = version.split('-', maxsplit=1)[0]
        expected[('nvidia-container-toolkit', version, 'amd64')] = (
            'nvidia-container-toolkit-base (= %s), libnvidia-container-tools (= %s)' % (version, version),
            {'./usr/bin/nvidia-container-runtime-hook'})
        expected[('nvidia-container-toolkit-base', version, 'amd64')] = (
            None, {'./usr/bin/nvidia-container-runtime', './usr/bin/nvidia-ctk', './usr/bin/nvidia-cdi-hook',
                   './usr/share/doc/nvidia-container-toolkit-base/LICENSE'})
        expected[('libnvidia-container-tools', version, 'amd64')] = (
            'libnvidia-container1 (= %s)' % version, {'./usr/bin/nvidia-container-cli'})
        expected[('libnvidia-container1', version, 'amd64')] = (
            None, {'./usr/lib/x86_64-linux-gnu/libnvidia-container.so.%s' % upstream,
                   './usr/lib/x86_64-linux-gnu/libnvidia-container.so.1'})
    expected[('nvidia-docker2', DOCKER2, 'all')] = ('nvidia-container-toolkit (>= 1.19.0)', set())
    return expected


def _expected_driver_packages():
    """The stand-in driver packages, as _expected_packages."""
    expected = {}
    for version in (DRIVER_OLD, DRIVER_NEW):
        expected[('nvidia-driver-cuda', version, 'amd64')] = (None, {'./usr/lib/fake-nvml/driver-version'})
        expected[('cuda-drivers-570', version, 'amd64')] = ('nvidia-driver-cuda (= %s)' % version, set())
        expected[('cuda-drivers', version, 'amd64')] = ('cuda-drivers-570 (= %s)' % version, set())
    return expected


def _stanzas(text):
    stanzas = []
    for block in text.strip().split('\n\n'):
        fields = {}
        for line in block.splitlines():
            if not line.startswith(' '):
                key, value = line.split(':', 1)
                fields[key] = value.strip()
        stanzas.append(fields)
    return stanzas


def _sections(stdout):
    sections, name = {}, None
    for line in stdout.splitlines():
        if line.startswith('### '):
            name = line[4:]
            sections[name] = []
        elif name is not None:
            sections[name].append(line)
    return {key: '\n'.join(lines) for key, lines in sections.items()}


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope='module')
def apt_repo():
    """`make apt-repo` (cheap when built), then the directory the nodes mount."""
    proc = _run(['make', '--no-print-directory', '-C', str(ROOT), 'apt-repo'], timeout=600)
    assert proc.returncode == 0, 'make apt-repo failed:\n%s%s' % (proc.stdout, proc.stderr)
    assert (POOL / 'InRelease').is_file()
    return REPO


@pytest.fixture(scope='module')
def node_image():
    """kubegpu/node:base, built with `make node-images` when it is missing."""
    if shutil.which('docker') is None or _run(['docker', 'image', 'inspect', IMAGE], timeout=60).returncode != 0:
        proc = _run(['make', '--no-print-directory', '-C', str(ROOT), 'node-images'], timeout=3600)
        assert proc.returncode == 0, 'make node-images failed:\n%s%s' % (proc.stdout[-4000:], proc.stderr[-4000:])
    return IMAGE


@pytest.fixture(scope='module')
def key_id(apt_repo, tmp_path_factory):
    """The long key ID of the served gpgkey, read with a throwaway GNUPGHOME."""
    home = tmp_path_factory.mktemp('gnupg')
    home.chmod(0o700)
    proc = _run(['gpg', '--homedir', str(home), '--batch', '--with-colons', '--show-keys', str(apt_repo / 'gpgkey')],
                timeout=60)
    assert proc.returncode == 0, proc.stderr
    fingerprints = [line.split(':')[9] for line in proc.stdout.splitlines() if line.startswith('fpr:')]
    assert len(fingerprints) == 1, proc.stdout
    return fingerprints[0][-16:]


def _in_node(image, script, timeout=120):
    """Run PRELUDE + script in a throwaway container that sees only its loopback and the read-only repository."""
    return _run(['docker', 'run', '--rm', '-i', '--network', 'none', '-v', '%s:/srv/kubegpu-apt:ro' % REPO, image,
                 'bash', '-s'], timeout=timeout, input=PRELUDE + script)


def test_layout_mirrors_nvidia(apt_repo):
    files = sorted(str(path.relative_to(apt_repo)) for path in apt_repo.rglob('*') if path.is_file())
    debs = ['stable/deb/amd64/%s_%s_%s.deb' % key for key in sorted(_expected_packages())]
    index = ['stable/deb/amd64/%s' % name for name in ('InRelease', 'Packages', 'Packages.gz', 'Release', 'Release.gpg')]
    cuda = ['%s/%s_%s_%s.deb' % ((CUDA_DIR,) + key) for key in sorted(_expected_driver_packages())]
    cuda_index = ('3bf863cc.pub', 'InRelease', 'Packages', 'Packages.gz', 'Release', 'Release.gpg')
    cuda += ['%s/%s' % (CUDA_DIR, name) for name in cuda_index]
    assert files == sorted(['gpgkey', 'stable/deb/nvidia-container-toolkit.list'] + debs + index + cuda)
    assert (CUDA_POOL / '3bf863cc.pub').read_bytes() == (apt_repo / 'gpgkey').read_bytes()
    assert (apt_repo / 'stable/deb/nvidia-container-toolkit.list').read_text(encoding='utf-8') == LIST_LINE + '\n'
    assert (apt_repo / 'gpgkey').read_text(encoding='ascii').startswith('-----BEGIN PGP PUBLIC KEY BLOCK-----')
    release = (POOL / 'Release').read_text(encoding='utf-8')
    assert 'Date: Wed, 01 Jan 2025 00:00:00 +0000' in release
    assert 'Valid-Until' not in release
    packages = (POOL / 'Packages').read_bytes()
    assert gzip.decompress((POOL / 'Packages.gz').read_bytes()) == packages
    for name in ('Packages', 'Packages.gz'):
        digest = _sha256(POOL / name)
        assert re.search(r'^ %s +%d %s$' % (digest, (POOL / name).stat().st_size, name), release, re.M), name


def test_package_index(apt_repo):
    stanzas = _stanzas((POOL / 'Packages').read_text(encoding='utf-8'))
    found = {(s['Package'], s['Version'], s['Architecture']): s.get('Depends') for s in stanzas}
    assert found == {key: depends for key, (depends, _files) in _expected_packages().items()}
    for stanza in stanzas:
        deb = POOL / stanza['Filename']
        assert stanza['SHA256'] == _sha256(deb) and int(stanza['Size']) == deb.stat().st_size
        assert 'not NVIDIA software' in stanza['Description']


def test_driver_package_index(apt_repo):
    stanzas = _stanzas((CUDA_POOL / 'Packages').read_text(encoding='utf-8'))
    found = {(s['Package'], s['Version'], s['Architecture']): s.get('Depends') for s in stanzas}
    assert found == {key: depends for key, (depends, _files) in _expected_driver_packages().items()}
    for stanza in stanzas:
        deb = CUDA_POOL / stanza['Filename']
        assert stanza['SHA256'] == _sha256(deb) and int(stanza['Size']) == deb.stat().st_size
        assert 'not NVIDIA software' in stanza['Description']
    release = (CUDA_POOL / 'Release').read_text(encoding='utf-8')
    assert 'Label: cuda-drivers (kubegpu test stand-in)' in release


@pytest.mark.parametrize('key', sorted(_expected_packages()) + sorted(_expected_driver_packages()),
                         ids=lambda key: '%s_%s' % key[:2])
def test_package_contents(apt_repo, key, tmp_path):
    package, version, arch = key
    depends, files = {**_expected_packages(), **_expected_driver_packages()}[key]
    deb = (POOL if key in _expected_packages() else CUDA_POOL) / ('%s_%s_%s.deb' % key)
    fields = _run(['dpkg-deb', '-f', str(deb), 'Package', 'Version', 'Architecture', 'Depends'], timeout=60).stdout
    assert _stanzas(fields)[0] == dict({'Package': package, 'Version': version, 'Architecture': arch},
                                       **({'Depends': depends} if depends else {}))
    listing = _run(['dpkg-deb', '-c', str(deb)], timeout=60).stdout.splitlines()
    entries = {}
    for line in listing:
        mode, owner, _size, day, clock, path = line.split(None, 5)
        assert owner == 'root/root' and '%s %s' % (day, clock) == MTIME, line
        entries[path.split(' -> ')[0]] = mode
    readme = './usr/share/doc/%s/README.kubegpu' % package
    assert {path for path, mode in entries.items() if not mode.startswith('d')} == files | {readme}
    assert _run(['dpkg-deb', '-x', str(deb), str(tmp_path)], timeout=60).returncode == 0
    text = (tmp_path / readme).read_text(encoding='utf-8')
    assert 'TEST STAND-IN' in text and 'NOT NVIDIA software' in text
    if package == 'nvidia-driver-cuda':  # what the fake NVML reads (sandbox/fakenvml/driver.c)
        assert (tmp_path / 'usr/lib/fake-nvml/driver-version').read_text(encoding='ascii') == version.split('-')[0] + '\n'
    for path in files:
        if path.startswith('./usr/bin/'):
            assert entries[path] == '-rwxr-xr-x', path
            head = (tmp_path / path).read_bytes()[:9]
            if package == 'nvidia-container-toolkit-base':
                # NVIDIA's programs, built from the toolkit's source at the package's version (sandbox/nvidia-runtime)
                assert head.startswith(b'\x7fELF'), path
                assert ('github.com/NVIDIA/nvidia-container-toolkit v%s' % version.split('-')[0]) in text
            else:
                assert head == b'#!/bin/sh', path


def test_signatures_match_gpgkey(apt_repo, tmp_path):
    keyring = tmp_path / 'keyring.gpg'
    home = tmp_path / 'gnupg'
    home.mkdir(mode=0o700)
    proc = _run(['gpg', '--homedir', str(home), '--batch', '--dearmor', '-o', str(keyring), str(apt_repo / 'gpgkey')],
                timeout=60)
    assert proc.returncode == 0, proc.stderr
    gpgv = ['gpgv', '--homedir', str(home), '--keyring', str(keyring)]
    assert _run(gpgv + [str(POOL / 'InRelease')], timeout=60).returncode == 0
    assert _run(gpgv + [str(POOL / 'Release.gpg'), str(POOL / 'Release')], timeout=60).returncode == 0
    assert _run(gpgv + [str(CUDA_POOL / 'InRelease')], timeout=60).returncode == 0
    assert _run(gpgv + [str(CUDA_POOL / 'Release.gpg'), str(CUDA_POOL / 'Release')], timeout=60).returncode == 0
    inrelease = (POOL / 'InRelease').read_text(encoding='utf-8')
    assert (POOL / 'Release').read_text(encoding='utf-8').strip() in inrelease
    tampered = tmp_path / 'InRelease'
    tampered.write_text(inrelease.replace('Origin: kubegpu sandbox', 'Origin: kubegpu sandboX'), encoding='utf-8')
    assert tampered.read_text(encoding='utf-8') != inrelease
    assert _run(gpgv + [str(tampered)], timeout=60).returncode != 0


def test_debs_are_reproducible(apt_repo, tmp_path):
    runtime = _run(['make', '--no-print-directory', '-s', '-C', str(ROOT), 'nvidia-runtime-dir'], timeout=60)
    assert runtime.returncode == 0, runtime.stdout + runtime.stderr
    proc = _run([str(BUILD_SCRIPT), '--runtime', runtime.stdout.strip(), '--debs-only', '--out', str(tmp_path / 'debs')],
                timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rebuilt = {path.name: _sha256(path) for path in (tmp_path / 'debs').glob('*.deb')}
    served = {path.name: _sha256(path) for path in list(POOL.glob('*.deb')) + list(CUDA_POOL.glob('*.deb'))}
    assert len(served) == len(_expected_packages()) + len(_expected_driver_packages())
    assert rebuilt == served


def test_make_apt_repo_is_a_no_op_when_unchanged(apt_repo):
    before = {path: os.stat(path).st_mtime_ns for path in (POOL / 'InRelease', apt_repo / 'gpgkey')}
    proc = _run(['make', '--no-print-directory', '-C', str(ROOT), 'apt-repo'], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'is up to date' in proc.stdout
    assert {path: os.stat(path).st_mtime_ns for path in before} == before


def test_user_install_with_pins_then_upgrade(apt_repo, node_image):
    proc = _in_node(node_image, INSTALL)
    assert proc.returncode == 0, 'rc %d\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr)
    out = _sections(proc.stdout)
    assert out['list'] == ('deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] '
                           'http://127.0.0.1:8088/stable/deb/$(ARCH) /')
    # both versions are offered, the newer is the candidate: the pin is what selects 1.19.0-1
    assert re.search(r'Candidate: %s$' % re.escape(NEW), out['policy'], re.M), out['policy']
    assert re.search(r'^ +%s 500$' % re.escape(OLD), out['policy'], re.M), out['policy']
    assert out['dpkg-pinned'].splitlines() == sorted('%s %s' % (package, OLD) for package in TOOLKIT)
    # NVIDIA's runtime (sandbox/nvidia-runtime): its version, then the low-level runtime's (runc), which it runs
    assert out['runtime-version'].splitlines()[0] == 'NVIDIA Container Runtime version 1.19.0'
    assert 'runc version' in out['runtime-version']
    assert 'runc - Open Container Initiative runtime' in out['runtime-help']  # it passes --help on to runc
    assert out['ctk-version'].splitlines()[0] == 'NVIDIA Container Toolkit CLI version 1.19.0'
    # NVIDIA's nvidia-ctk writes docker's runtime entry (here only shown: --dry-run)
    assert '"nvidia": {' in out['ctk-configure'] and '"path": "nvidia-container-runtime"' in out['ctk-configure'] \
        and out['ctk-configure'].endswith('rc=0'), out['ctk-configure']
    assert out['cdi-hook'].endswith('rc=0') and '1.19.0' in out['cdi-hook'], out['cdi-hook']
    assert out['cli-version'].splitlines()[0] == 'cli-version: 1.19.0'
    assert out['hook'] == 'rc=0'
    assert out['nvc-version'] == '1 19 0 1.19.0'
    assert 'NOT NVIDIA software' in out['readme']
    assert out['dpkg-upgraded'].splitlines() == sorted(['%s %s' % (package, NEW) for package in TOOLKIT]
                                                       + ['nvidia-docker2 %s' % DOCKER2])
    assert out['runtime-version-upgraded'].splitlines()[0] == 'NVIDIA Container Runtime version 1.20.0'


@pytest.mark.parametrize('case', sorted(REFUSALS))
def test_apt_refuses_what_the_keyring_does_not_verify(apt_repo, node_image, key_id, case):
    setup, pattern = REFUSALS[case]
    proc = _in_node(node_image, setup + REFUSAL_TAIL)
    assert proc.returncode == 0, 'rc %d\n%s\n%s' % (proc.returncode, proc.stdout, proc.stderr)
    assert 'update-rc=100' in proc.stdout, proc.stdout
    match = re.search(pattern, proc.stdout)
    assert match, proc.stdout
    if 'keyid' in match.groupdict():
        assert match.group('keyid') == key_id
    assert 'is not signed' in proc.stdout
    assert 'Unable to locate package nvidia-container-toolkit' in proc.stdout and 'install-rc=100' in proc.stdout
