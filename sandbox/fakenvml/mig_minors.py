# SPDX-License-Identifier: GPL-3.0-or-later
"""The MIG capability files of a node whose fake NVML serves a given GPU profile.

On a real host the NVIDIA kernel module publishes ``/proc/driver/nvidia-caps/mig-minors``: one line per MIG
capability, ``<name> <minor>``, each minor being that of the character device ``/dev/nvidia-caps/nvidia-cap<minor>``
that grants the capability. NVIDIA's device plugin reads it to give a container a MIG device
(k8s-device-plugin ``internal/mig/mig-dp.go`` GetMigCapabilityDevicePaths, used by ``internal/rm/nvml_devices.go``
GetPaths: ``/dev/nvidia<GPU minor>`` plus the ``gpu<GPU minor>/gi<GI>/access`` and ``gpu<GPU minor>/gi<GI>/ci<CI>/access``
devices), and so does nvidia-ctk's CDI generator (nvidia-container-toolkit ``internal/nvcaps/nvcaps.go``, which walks
``gi0, gi1, ...`` and ``ci0, ci1, ...`` of a GPU until the first one missing).

The file's content is the driver's fixed table, not the current MIG layout (open-gpu-kernel-modules
``kernel-open/nvidia/nv-caps.c``: ``g_nv_cap_mig_table`` and ``g_nv_cap_mig_gpu_table``, minors handed out in table
order by ``_nv_cap_table_init`` after the one NVLink fabric-mgmt capability, minor 0):

    config 1
    monitor 2
    gpu0/gi0/access 3
    gpu0/gi0/ci0/access 4
    ...
    gpu0/gi0/ci7/access 11
    gpu0/gi1/access 12
    ...
    gpu31/gi14/ci7/access 4322

for the 32 GPU minors, 15 GPU instances and 8 compute instances the driver provides for. The ``gpu<N>`` of a line is
the GPU's minor number (``/dev/nvidia<N>``), not its NVML index. What depends on the profile is whether the file exists
at all (not without the kernel module: a profile whose ``nvmlInit`` answers ``DRIVER_NOT_LOADED``), and which
capabilities a MIG device uses (``capabilities``, ``device_paths``).

Docker refuses bind mounts into ``/proc``; the gpu node image mounts a tmpfs over ``/proc/driver`` from inside the node
at boot and writes the file where a real node has it, ``/proc/driver/nvidia-caps/mig-minors``, and creates the
``/dev/nvidia-caps/nvidia-cap<minor>`` nodes of the node's MIG devices (``sandbox/images/fake-nvml-caps.service``).
The MIG devices are those the fake NVML reports: the profile's, or the layout its MIG state file keeps (``state``, see
``mig_state.py``). Standard library only: the node image runs it with
the system Python.

Usage: python3 mig_minors.py --profile PROFILE.json --out FILE [--dev-dir DIR [--major N]] [--state STATE.json]
"""

import argparse
import importlib.util
import json
import os
import stat
import sys

try:
    from sandbox.fakenvml import mig_state
except ImportError:  # loaded as a file (the node image, the tests): mig_state.py is beside it
    _SPEC = importlib.util.spec_from_file_location(
        'mig_state', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mig_state.py'))
    mig_state = importlib.util.module_from_spec(_SPEC)
    _SPEC.loader.exec_module(mig_state)

# nv-caps.c: 32 GPUs (gpu0 .. gpu31), 15 GPU instances (gi0 .. gi14), 8 compute instances (ci0 .. ci7) each
MAX_GPUS = 32
MAX_GPU_INSTANCES = 15
MAX_COMPUTE_INSTANCES = 8
CONFIG_MINOR = 1
MONITOR_MINOR = 2
FIRST_GPU_MINOR = 3
ENTRIES_PER_GI = 1 + MAX_COMPUTE_INSTANCES          # the GI's access file, then its CIs
ENTRIES_PER_GPU = MAX_GPU_INSTANCES * ENTRIES_PER_GI  # 135
# The nvidia-caps character device major is allocated dynamically by the driver (nv-caps.c, alloc_chrdev_region;
# /proc/devices names it "nvidia-caps"). The node images use this fixed one.
DEFAULT_MAJOR = 511
CAPS_DEV_DIR = '/dev/nvidia-caps'
NODE_MIG_MINORS = '/proc/driver/nvidia-caps/mig-minors'  # where the kernel module publishes it


class MigMinorsError(ValueError):
    """A capability the driver's table does not have (GPU minor >= 32, GI >= 15 or CI >= 8)."""


def minor(gpu, gi=None, ci=None):
    """The nvidia-caps minor of gpu<gpu>/gi<gi>/access (ci None) or gpu<gpu>/gi<gi>/ci<ci>/access."""
    if not 0 <= gpu < MAX_GPUS or gi is None or not 0 <= gi < MAX_GPU_INSTANCES:
        raise MigMinorsError('no MIG capability for GPU minor %r, GPU instance %r' % (gpu, gi))
    base = FIRST_GPU_MINOR + gpu * ENTRIES_PER_GPU + gi * ENTRIES_PER_GI
    if ci is None:
        return base
    if not 0 <= ci < MAX_COMPUTE_INSTANCES:
        raise MigMinorsError('no MIG capability for compute instance %r' % (ci,))
    return base + 1 + ci


def table():
    """Every (capability, minor) of the driver's table, in the file's order."""
    rows = [('config', CONFIG_MINOR), ('monitor', MONITOR_MINOR)]
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GPU_INSTANCES):
            rows.append(('gpu%d/gi%d/access' % (gpu, gi), minor(gpu, gi)))
            for ci in range(MAX_COMPUTE_INSTANCES):
                rows.append(('gpu%d/gi%d/ci%d/access' % (gpu, gi, ci), minor(gpu, gi, ci)))
    return rows


def driver_loaded(profile):
    """Whether the node has the kernel module, hence /proc/driver/nvidia-caps: not when nvmlInit says so."""
    return profile.get('errors', {}).get('nvmlInit') != 'DRIVER_NOT_LOADED'


def render(profile):
    """The text of /proc/driver/nvidia-caps/mig-minors for a node serving profile (parsed JSON), or None without one."""
    if not driver_loaded(profile):
        return None
    return ''.join('%s %d\n' % row for row in table())


def _mig_devices(profile, state=None):
    if state is not None:
        profile = mig_state.effective(profile, state)
    for index, gpu in enumerate(profile.get('devices', [])):
        mig = gpu.get('mig', {})
        if not (mig.get('capable') and mig.get('current')):
            continue
        for device in mig.get('devices', []):
            yield gpu.get('minor_number', index), device


def device_paths(profile, state=None):
    """MIG device UUID -> the device nodes the device plugin gives a container for it (internal/rm/nvml_devices.go).

    ``state``: the fake NVML's MIG state (parsed), whose layout replaces the profile's for the GPUs it has."""
    paths = {}
    for gpu_minor, device in _mig_devices(profile, state):
        gi, ci = device['gpu_instance_id'], device['compute_instance_id']
        paths[device['uuid']] = ['/dev/nvidia%d' % gpu_minor,
                                 '%s/nvidia-cap%d' % (CAPS_DEV_DIR, minor(gpu_minor, gi)),
                                 '%s/nvidia-cap%d' % (CAPS_DEV_DIR, minor(gpu_minor, gi, ci))]
    return paths


def capabilities(profile, state=None):
    """(capability, minor) of the node's MIG devices plus config and monitor, sorted by minor, without repeats."""
    if not driver_loaded(profile):
        return []
    caps = {'config': CONFIG_MINOR, 'monitor': MONITOR_MINOR}
    for gpu_minor, device in _mig_devices(profile, state):
        gi, ci = device['gpu_instance_id'], device['compute_instance_id']
        caps['gpu%d/gi%d/access' % (gpu_minor, gi)] = minor(gpu_minor, gi)
        caps['gpu%d/gi%d/ci%d/access' % (gpu_minor, gi, ci)] = minor(gpu_minor, gi, ci)
    return sorted(caps.items(), key=lambda item: item[1])


def write(profile, out, dev_dir=None, major=DEFAULT_MAJOR, state=None):
    """Write the mig-minors file (removed when the node has no driver) and, with dev_dir, the capability devices of
    the node's MIG devices (the profile's, or ``state``'s layout for the GPUs it has).

    Device nodes need CAP_MKNOD (the node containers have it); their modes are the driver's defaults as the MIG user
    guide shows them (``config`` root only, 0400; the others readable by all, 0444). Existing nodes are left alone.
    """
    text = render(profile)
    if text is None:
        if os.path.exists(out):
            os.unlink(out)
        return 0
    os.makedirs(os.path.dirname(out) or '.', exist_ok=True)
    tmp = out + '.tmp'
    with open(tmp, 'w', encoding='ascii') as handle:
        handle.write(text)
    os.replace(tmp, out)
    made = 0
    if dev_dir is not None:
        os.makedirs(dev_dir, exist_ok=True)
        for _cap, cap_minor in capabilities(profile, state):
            path = os.path.join(dev_dir, 'nvidia-cap%d' % cap_minor)
            if not os.path.exists(path):
                os.mknod(path, stat.S_IFCHR | (0o400 if cap_minor == CONFIG_MINOR else 0o444),
                         os.makedev(major, cap_minor))
                made += 1
    return made


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--profile', required=True, help='the node GPU profile (JSON)')
    parser.add_argument('--out', required=True, help='where to write the mig-minors file')
    parser.add_argument('--dev-dir', help='create the nvidia-cap<minor> device nodes of the profile here')
    parser.add_argument('--major', type=int, default=DEFAULT_MAJOR, help='nvidia-caps major (default %(default)s)')
    parser.add_argument('--state', help="the fake NVML's MIG state file (absent: the profile's layout)")
    args = parser.parse_args(argv)
    try:
        with open(args.profile, encoding='utf-8') as handle:
            profile = json.load(handle)
        state = mig_state.load(args.state) if args.state else None
        made = write(profile, args.out, args.dev_dir, args.major, state)
    except (OSError, ValueError) as exc:
        sys.stderr.write('mig_minors: %s\n' % exc)
        return 1
    sys.stdout.write('mig_minors: %s, %d capability devices created\n'
                     % (args.out if driver_loaded(profile) else 'no driver, no mig-minors', made))
    return 0


if __name__ == '__main__':
    sys.exit(main())
