# SPDX-License-Identifier: GPL-3.0-or-later
"""What NVIDIA's container runtime must find on a gpu node to give a container its GPUs and the fake NVML.

NVIDIA's runtime (nvidia-container-toolkit v1.19/v1.20, mode ``auto`` = ``jit-cdi`` on an NVML platform) builds the
container's CDI edits at creation time from the host (README.md, *In containers*):

* the driver version is what NVML answers (``pkg/nvcdi/lib.go`` ``nvmllibWithVersion``), and the driver's libraries
  are the files ``*.so.<that version>`` in the directories that hold ``lib*.so.<that version>``
  (``internal/lookup/root/root.go`` ``updateInfo``, ``pkg/nvcdi/driver-nvml.go`` ``getVersionLibs``); symlinks are
  resolved and the target is mounted at its own path (``pkg/lookup/symlinks.go`` ``WithEvaluatedSymlinks``,
  ``internal/discover/mounts.go``); a symlink whose target is missing is skipped (``pkg/lookup/file.go``
  ``assertFile``);
* the device nodes are ``/dev/nvidia<minor>`` of each GPU (``internal/platform-support/dgpu/nvml.go``) and the control
  nodes ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``, ``/dev/nvidia-modeset``
  (``pkg/nvcdi/common-nvml.go``), each only where it exists.

So, at boot (``sandbox/images/fake-nvml-driver-files.service``, before containerd and docker), on a node whose fake
NVML initialises:

1. the fake library is ``libnvidia-ml.so.<driver version>`` with ``libnvidia-ml.so.1`` a symlink to it, as a driver
   installation lays it out (one file, renamed when the version changes: a profile change or a driver package upgrade
   followed by a reboot);
2. ``kubegpu-fake-nvml-<what>.so.<driver version>`` symlinks beside it point at what the fake reads, so the runtime
   mounts each at the path where the fake looks for it by default: the profile (``/etc/fake-nvml/profile.json``), the
   MIG state (``/var/lib/fake-nvml/mig-state.json``), the driver and module version files of the stand-in driver
   packages (``/usr/lib/fake-nvml/driver-version``, ``/run/fake-nvml/module-version``) and ``libjansson.so.4``'s file,
   which the fake links and a real NVML does not need (its soname link is made in the container by the runtime's
   ldconfig hook). Their names do not start with ``lib``, so ldconfig ignores them on the node and in the container;
3. the device nodes (character devices, major 195 as NVIDIA's driver; ``nvidia-uvm`` on major 510, this sandbox's
   choice: the real one is dynamic). No driver is behind them: opening one fails, as nothing in a container needs to.

A node whose fake NVML does not initialise (a profile without the kernel module) gets nothing: the runtime then finds no
driver, as on a real node without one. Standard library only (the node's system Python).

Usage: python3 driver_files.py [--lib-dir DIR] [--dev-dir DIR] [--library PATH]
"""

import argparse
import ctypes
import glob
import os
import stat
import subprocess
import sys

LIB_DIR = '/usr/lib/x86_64-linux-gnu'
DEV_DIR = '/dev'
LINK_PREFIX = 'kubegpu-fake-nvml-'
# What the fake NVML reads, by the name of its link (sandbox/fakenvml/fakenvml.c, mig.c, driver.c: the defaults)
READS = {
    'profile': '/etc/fake-nvml/profile.json',
    'mig-state': '/var/lib/fake-nvml/mig-state.json',
    'driver-version': '/usr/lib/fake-nvml/driver-version',
    'module-version': '/run/fake-nvml/module-version',
}
NVIDIA_MAJOR = 195  # the kernel module's (nvidia.ko registers major 195)
CTL_MINOR = 255  # /dev/nvidiactl
MODESET_MINOR = 254  # /dev/nvidia-modeset
UVM_MAJOR = 510  # nvidia-uvm's major is dynamic on a real host: this sandbox's choice


def nvml_facts(library):
    """(driver version, [GPU minor numbers]) from the fake NVML, or (None, reason) when it does not initialise."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError as exc:
        return None, str(exc)
    rc = nvml.nvmlInit_v2()
    if rc != 0:
        nvml.nvmlErrorString.restype = ctypes.c_char_p
        return None, 'nvmlInit_v2: %s' % nvml.nvmlErrorString(rc).decode()
    try:
        version = ctypes.create_string_buffer(96)
        rc = nvml.nvmlSystemGetDriverVersion(version, len(version))
        if rc != 0:
            return None, 'nvmlSystemGetDriverVersion: %d' % rc
        count = ctypes.c_uint()
        minors = []
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0:
            for index in range(count.value):
                handle = ctypes.c_void_p()
                minor = ctypes.c_uint()
                if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0
                        and nvml.nvmlDeviceGetMinorNumber(handle, ctypes.byref(minor)) == 0):
                    minors.append(minor.value)
        return version.value.decode(), minors
    finally:
        nvml.nvmlShutdown()


def replace_symlink(target, path):
    """``path`` -> ``target``, replaced atomically (a new link beside it, then rename)."""
    tmp = path + '.tmp'
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, path)


def place_library(lib_dir, version):
    """The fake as libnvidia-ml.so.<version>, libnvidia-ml.so.1 a symlink to it; returns the versioned path."""
    soname = os.path.join(lib_dir, 'libnvidia-ml.so.1')
    versioned = os.path.join(lib_dir, 'libnvidia-ml.so.' + version)
    current = os.path.realpath(soname)
    if current != versioned:
        os.rename(current, versioned)
    if not os.path.islink(soname) or os.readlink(soname) != os.path.basename(versioned):
        replace_symlink(os.path.basename(versioned), soname)
    return versioned


def place_links(lib_dir, version):
    """The kubegpu-fake-nvml-*.so.<version> links (old versions' removed); returns {name: target}."""
    for old in glob.glob(os.path.join(lib_dir, LINK_PREFIX + '*')):
        os.unlink(old)
    targets = dict(READS)
    jansson = os.path.join(lib_dir, 'libjansson.so.4')
    if os.path.exists(jansson):
        targets['libjansson'] = os.path.realpath(jansson)
    for name, target in sorted(targets.items()):
        os.symlink(target, os.path.join(lib_dir, '%s%s.so.%s' % (LINK_PREFIX, name, version)))
    return targets


def make_node(path, major, minor):
    """A character device node (0666, as the driver's nvidia-modprobe makes them), unless one is there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.chmod(path, 0o666)
        return
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != major or os.minor(st.st_rdev) != minor:
        raise SystemExit('%s exists and is not the character device %d:%d' % (path, major, minor))


def place_devices(dev_dir, minors):
    nodes = [('nvidia%d' % m, NVIDIA_MAJOR, m) for m in minors]
    nodes += [('nvidiactl', NVIDIA_MAJOR, CTL_MINOR), ('nvidia-modeset', NVIDIA_MAJOR, MODESET_MINOR),
              ('nvidia-uvm', UVM_MAJOR, 0), ('nvidia-uvm-tools', UVM_MAJOR, 1)]
    for name, major, minor in nodes:
        make_node(os.path.join(dev_dir, name), major, minor)
    return [name for name, _major, _minor in nodes]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--lib-dir', default=LIB_DIR)
    parser.add_argument('--dev-dir', default=DEV_DIR)
    parser.add_argument('--library', default=None, help='the fake NVML to ask (default: LIB_DIR/libnvidia-ml.so.1)')
    args = parser.parse_args(argv)
    version, minors = nvml_facts(args.library or os.path.join(args.lib_dir, 'libnvidia-ml.so.1'))
    if version is None:
        for old in glob.glob(os.path.join(args.lib_dir, LINK_PREFIX + '*')):
            os.unlink(old)
        print('driver_files: no driver (%s): nothing for the container runtime to inject' % minors)
        return 0
    library = place_library(args.lib_dir, version)
    targets = place_links(args.lib_dir, version)
    devices = place_devices(args.dev_dir, minors)
    subprocess.run(['ldconfig'], check=True)
    print('driver_files: driver %s: %s; links to %s; devices %s' % (
        version, library, ', '.join(targets[k] for k in sorted(targets)), ' '.join(devices)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
