#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: nvidia_runtime_config
short_description: Register the NVIDIA container runtime with docker, containerd, CRI-O, k3s, RKE2, k0s or microk8s
version_added: 0.1.0
description:
  - Adds the NVIDIA container runtime to the configuration of docker (C(daemon.json)), containerd (C(config.toml),
    in place or through a drop-in file) or CRI-O (C(crio.conf) or a drop-in), optionally as the default runtime and
    with CDI turned on; or removes exactly what it adds. This is what C(nvidia-ctk runtime configure) does, as an
    idempotent module with check mode, diff, backups and validation.
  - Every other setting, its order and, for TOML files, its comments are kept. A file that needs no change is not
    touched (its modification time stays the same).
  - "Files are replaced atomically: the new content is written to a temporary file in the same directory (for a file in a
    directory whose every file the runtime reads, such as CRI-O's C(crio.conf.d), in the directory above it), with the
    owner, group, mode and extended attributes (POSIX ACLs, the SELinux label, C(user.*)) of the file it replaces
    (V(0644) and none for a new file; a missing directory is created V(0755)), validated, then renamed over the live
    file. An extended attribute that cannot be copied fails the run, with the live file left as it was. Symbolic links
    are followed: the file they point to is replaced."
  - Only regular files are read. A configuration path that is a FIFO, a device, a socket or a directory (or a link to
    one) is refused, naming it, before anything is opened for reading.
  - "k3s and RKE2 generate their containerd's C(config.toml) again at every start, so the module never edits it (it
    refuses such a path for O(runtime=containerd)). They register the NVIDIA runtime themselves when they find
    C(nvidia-container-runtime) on their PATH; with O(runtime=k3s) or O(runtime=rke2) the module makes it their
    default through what they read: a drop-in of their C(config.yaml.d) with C(default-runtime: <name>)."
  - "k0s builds its containerd's CRI settings at every start from containerd's defaults and the files of
    C(/etc/k0s/containerd.d), which it merges in as patches. With O(runtime=k0s) the module writes one such file, with
    the runtime (copied from the default runtime, runc or crun of what k0s generated last), the default and CDI as
    asked and nothing else, so removing it gives back what the other files say. It never edits
    C(/etc/k0s/containerd.toml) while k0s manages it, nor C(/run/k0s/containerd-cri.toml), and refuses to work where
    the user took C(containerd.toml) over (k0s then ignores C(containerd.d)): configure that file with
    O(runtime=containerd)."
  - "microk8s writes its containerd's C(args/containerd.toml) again at every start from
    C(args/containerd-template.toml), replacing C(${SNAP}), C(${SNAP_DATA}) and C(${RUNTIME}). With
    O(runtime=microk8s) the module edits the template in place as it edits a containerd C(config.toml); the
    placeholders are values like any other (a C(default_runtime_name) of C(${RUNTIME}) comes back with
    O(state=absent)). It refuses the rendered file."
  - The module does not restart the runtime; RV(restart_required) says when a restart is needed.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  backup:
    description:
      - Before changing a file, copy it into O(backup_dir), at the file's own absolute path below it and named like
        M(ansible.builtin.copy)'s backups (C(<file>.<pid>.<YYYY-MM-DD@HH:MM:SS>~)), keeping owner, group and mode.
        Every changed file that existed is copied, the main config and the drop-in alike; see RV(backup_files).
      - Not beside the file, as M(ansible.builtin.copy) does. CRI-O reads every file under C(crio.conf.d) whatever its
        name, and a containerd C(imports) glob such as C(conf.d/*) matches any name, so a backup there would be loaded
        as configuration, old settings and all, even after O(state=absent).
    type: bool
    default: false
  backup_dir:
    description:
      - Where O(backup=true) puts its copies; directories it creates there are V(0700) (configurations can hold
        registry credentials).
      - The module refuses a directory the runtime reads (inside C(crio.conf.d), say), before anything is written.
      - An absolute path (C(~) is expanded).
    type: path
    default: /var/backups/kubegpu
  validate:
    description:
      - A command run before the live file is replaced, with C(%s) standing for the candidate file; the files are left
        untouched when it exits non-zero. It is split like a shell command line but run without a shell.
      - For containerd, C(%s) is always a main configuration. With O(drop_in_path), it is a temporary copy of
        O(config_path), in the same directory, whose C(imports) name the candidate drop-in in place of O(drop_in_path)
        (an absolute glob that matches it is expanded there as containerd would, in containerd's order), so the
        command sees exactly the set of files containerd will load once the change is made. Without O(drop_in_path),
        C(%s) is the candidate main configuration itself.
      - When omitted for containerd and a C(containerd) binary is found, C(containerd --config %s config dump) is
        used, and the module also checks in its output that the merged configuration has the runtime (with
        C(BinaryName)), the default runtime and CDI as asked, so that a file imported later that replaces the CRI
        table is caught. With a drop-in, it warns when the CRI settings containerd would load change in other ways.
        This is skipped, with a warning, when the installed containerd cannot read the config's version (1.x and version 3
        or 4; 2.0 to 2.2 and version 4).
      - For a CRI-O drop-in, C(%s) is the candidate drop-in. For docker, C(dockerd --validate --config-file %s) does.
      - Set to an empty string to skip validation. Nothing is validated in check mode.
    type: str
extends_documentation_fragment:
  - kubegpu.cluster.nvidia_runtime_options
  - ansible.builtin.action_common_attributes
requirements:
  - tomlkit on the managed host, for containerd and CRI-O.
attributes:
  check_mode:
    support: full
    details: Nothing is written, and O(validate) is not run.
  diff_mode:
    support: full
    details: One before/after entry per file that changes (two with a containerd drop-in).
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: A file that needs no change is not rewritten (its modification time stays the same).
  platform:
    platforms: posix
notes:
  - The module edits files only; restart the runtime (a handler on RV(restart_required)) for the change to take effect.
  - For containerd, the runtime copies the settings and C(options) of a template runtime, the default runtime
    (C(default_runtime_name); once ours is the default, the one it replaced), else C(runc), else C(crun), as long as
    it uses the runc shim and is not an C(nvidia*) runtime, as nvidia-ctk picks it; so C(SystemdCgroup = true) is
    inherited. C(runtime_type) is C(io.containerd.runc.v2) and C(options.BinaryName) is O(runtime_path). An existing
    table of that name is refreshed from the template key by key (a stale C(SystemdCgroup) follows runc's again);
    keys only it has stay.
  - For CRI-O, the runtime copies the table of the default runtime, else C(runc), else C(crun) (C(monitor_path),
    C(runtime_root), C(monitor_cgroup), C(allowed_annotations)), as nvidia-ctk does, with C(runtime_path) and
    C(runtime_type = "oci"); with a drop-in, the template comes from O(config_path) and the drop-in together
    (O(config_path) is read, never written).
  - Malformed JSON or TOML fails with the file, line and column, and the file is left byte for byte as it was.
seealso:
  - name: nvidia-ctk runtime configure
    description: NVIDIA's command that makes the same changes.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
  - module: ansible.builtin.copy
"""

EXAMPLES = r"""
- name: Make the NVIDIA runtime docker's default
  kubegpu.cluster.nvidia_runtime_config:
    runtime: docker
    backup: true
  register: docker_runtime

- name: Register the NVIDIA runtime with containerd through a drop-in, with CDI
  kubegpu.cluster.nvidia_runtime_config:
    runtime: containerd
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml
    cdi: true
  notify: Restart containerd

- name: Register it with containerd 2.x, in config.toml itself, without making it the default
  kubegpu.cluster.nvidia_runtime_config:
    runtime: containerd
    config_version: "3"
    set_as_default: false

- name: Register it with CRI-O in its drop-in directory
  kubegpu.cluster.nvidia_runtime_config:
    runtime: crio
    drop_in_path: /etc/crio/crio.conf.d/99-nvidia.toml

- name: Validate a daemon.json with dockerd itself before it goes live
  kubegpu.cluster.nvidia_runtime_config:
    runtime: docker
    validate: dockerd --validate --config-file %s

- name: Remove the runtime from containerd again (drop-in deleted, imports entry removed)
  kubegpu.cluster.nvidia_runtime_config:
    runtime: containerd
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml
    state: absent
"""

RETURN = r"""
config_path:
  description: The file the settings were written to (or would be); the drop-in when O(drop_in_path) is given.
  returned: always
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
config_version:
  description: The containerd config version written (V(2), V(3) or V(4)); C(null) for docker and CRI-O.
  returned: always
  type: int
  sample: 2
restart_required:
  description:
    - Whether a file changed on disk, so that the runtime must be restarted (or reloaded) to use it.
    - In check mode, whether it would change.
  returned: always
  type: bool
  sample: true
changed_files:
  description:
    - Every file changed (or, in check mode, that would change), in the order they are written. With a containerd
      drop-in, the drop-in comes first, then the main config (O(state=present)); the other way round for O(state=absent).
    - A changed file without an entry in RV(backup_files) did not exist before (a rollback deletes it).
    - When the module makes O(runtime_name) the default of a file edited in place that named another default, or
      turns CDI on there, or changes a docker C(daemon.json) at all, it first writes C(<config_path>.kubegpu.json)
      beside it (where the runtime reads every file beside it, as CRI-O does in C(crio.conf.d), in the directory
      above instead, as C(crio.conf.d_<name>.kubegpu.json)), holding what was there before (for docker also the
      user's own entry for the runtime, and the text of a file that held nothing), so that O(state=absent) (or
      O(set_as_default=false)) gives it back exactly; the marker goes when nothing is left to remember. No daemon
      reads it, so a change to the marker alone needs no restart (RV(restart_required)). A drop-in needs no marker,
      as the user's settings stay in the main file.
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml, /etc/containerd/config.toml]
backup_file:
  description: The backup of the file in RV(config_path), when there was one to take.
  returned: when O(backup=true) and RV(config_path) existed and changed
  type: str
  sample: /var/backups/kubegpu/etc/docker/daemon.json.2417.2026-11-22@07:49:12~
backup_files:
  description:
    - Every backup taken, live file to backup. With a containerd drop-in this can hold both the main config and the
      drop-in; restore them all to roll back.
  returned: when O(backup=true)
  type: dict
  sample: {"/etc/containerd/config.toml": "/var/backups/kubegpu/etc/containerd/config.toml.2417.2026-11-22@07:49:12~"}
diff:
  description:
    - One entry per changed file (the first file's unchanged text when nothing changes), with C(before), C(after),
      C(before_header) and C(after_header); a missing or deleted file's text is empty.
  returned: in diff mode
  type: list
  elements: dict
  sample: [{"before": "{}\n", "after": "{...}\n", "before_header": "/etc/docker/daemon.json", "after_header": "/etc/docker/daemon.json"}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _files, _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.args import options_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.engine import Host, run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(
            options_spec(RUNTIME_NAME, RUNTIME_PATH),  # documented by the nvidia_runtime_options doc fragment
            backup=dict(type="bool", default=False),
            backup_dir=dict(type="path", default=_files.BACKUP_DIR, absolute=True),
            validate=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff,
                                   host=Host.from_module(module)), rules=rules)


if __name__ == "__main__":
    main()
