#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: container_runtime_facts
short_description: Report a host's container runtimes, how they run and what they run with, in one call
version_added: 0.1.0
description:
  - Reads in one module run what configuring the NVIDIA container runtime decides on, in the way
    M(ansible.builtin.setup) gathers facts, and sets the fact C(container_runtimes)
    (C(ansible_facts['container_runtimes'])).
  - For each runtime of O(runtimes) whose binary answers with its version (docker, containerd, CRI-O, k3s, RKE2, k0s,
    microk8s, the runtimes M(kubegpu.cluster.nvidia_runtime_config) configures) - the systemd unit that runs it (the
    first of its units systemd starts, such as C(k3s) or C(k3s-agent)), the unit's command line with the variables of
    its C(Environment) and C(EnvironmentFile) settings expanded (Debian's C(DOCKER_OPTS) in C(/etc/default/docker)),
    the flags on it, and what the daemon reports it runs with - C(docker info), C(containerd config dump), C(crio
    config), or the containerd config that k3s, RKE2, k0s and microk8s generate at every start.
  - Also whether C(crictl) is installed and which runtimes the CRI reports through it (C(crictl info)), the installed
    versions of O(packages), and the state of O(files) (a repository key, a repository definition, a marker).
  - For each runtime of O(plans) that is found, whether M(kubegpu.cluster.nvidia_runtime_config) with those options
    would change a file, worked out by that module's own planning (which reads the files and writes nothing), so that
    a role calls it only where something is to change.
  - The module only reads. A daemon that does not answer is reported in its C(reports.error),
    not as a failure.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  runtimes:
    description: The runtimes to look for.
    type: list
    elements: str
    choices: [containerd, crio, docker, k0s, k3s, microk8s, rke2]
    default: [containerd, crio, docker, k0s, k3s, microk8s, rke2]
  containerd_config:
    description:
      - The main containerd config that C(containerd --config <file> config dump) loads.
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
    default: /etc/containerd/config.toml
  report:
    description: Ask each daemon found what it runs with, and C(crictl info); V(false) skips those commands.
    type: bool
    default: true
  packages:
    description: Packages whose installed versions to report (through C(dpkg-query) or C(rpm)).
    type: list
    elements: str
    default: []
  files:
    description:
      - Files and directories to describe. The content of a UTF-8 text file of up to 64 KiB is returned, so do not
        name files that hold secrets.
      - Each an absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: list
    elements: path
    default: []
extends_documentation_fragment:
  - kubegpu.cluster.nvidia_runtime_options.plans
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
  - kubegpu.cluster.python_requirements
requirements:
  - Python 3.11 or later (C(tomllib)), or tomlkit, on the managed host to read containerd's and CRI-O's TOML; without
    either, their reports say so in C(reports.error).
attributes:
  check_mode:
    support: full
    details: The module only reads, in check mode too.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to show.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: The module only reads; it always reports no change.
  facts:
    support: full
  platform:
    platforms: posix
seealso:
  - module: kubegpu.cluster.nvidia_runtime_config
  - name: systemd.exec, environment variables in command lines
    description: How systemd expands C($VAR) and C(${VAR}) in C(ExecStart).
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines
"""

EXAMPLES = r"""
- name: Read the container runtimes of every node
  kubegpu.cluster.container_runtime_facts:

- name: Show the default runtime docker reports
  ansible.builtin.debug:
    msg: "{{ ansible_facts['container_runtimes']['runtimes']['docker']['reports']['default_runtime'] }}"

- name: Would nvidia_runtime_config change docker's daemon.json?
  kubegpu.cluster.container_runtime_facts:
    runtimes: [docker]
    plans:
      - runtime: docker
  register: docker_facts

- name: Also the toolkit packages and the repository definition, without asking the daemons
  kubegpu.cluster.container_runtime_facts:
    runtimes: [docker, containerd]
    report: false
    packages: [nvidia-container-toolkit, libnvidia-container1]
    files: [/etc/apt/sources.list.d/nvidia-container-toolkit.list]
"""

RETURN = r"""
python_unmet:
  description: The O(python_requirements) the interpreter does not have (empty when it has them all).
  type: list
  elements: str
  returned: always
  sample: [tomlkit==0.15.2]
ansible_facts:
  description: The facts set.
  returned: always
  type: dict
  contains:
    container_runtimes:
      description: The host's container runtimes and the state around them.
      returned: always
      type: dict
      contains:
        architecture:
          description: The machine's architecture, as C(uname -m) says it.
          type: str
          sample: x86_64
        package_manager:
          description: The host's package manager, C(apt), C(dnf), C(yum) or C(zypper); C(null) when none of them.
          type: str
          sample: apt
        runtimes:
          description: Per runtime found (its binary answered with a version), by the name O(runtimes) uses.
          type: dict
          sample: {"docker": {"binary": "/usr/sbin/dockerd", "version": "20.10.24", "service": "docker"}}
          contains:
            binary:
              description: The runtime's binary.
              type: str
              sample: /usr/sbin/dockerd
            version:
              description: Its version, C(X.Y) or C(X.Y.Z).
              type: str
              sample: 20.10.24
            version_output:
              description:
                - What the binary said when asked for its version (500 characters at most).
                - For docker, when its daemon answers C(docker info), its C(ServerVersion) instead, after the words
                  C(docker info) (the binary is then not started only to print its version).
              type: str
              sample: Docker version 20.10.24+dfsg1, build 297e128
            service:
              description: The systemd unit that runs it, the first of its units in an enabled state, else its first.
              type: str
              sample: docker
            unit_states:
              description: The unit file state of each of its units (C(null) when systemd does not know the unit).
              type: dict
              sample: {"k3s": null, "k3s-agent": "enabled"}
            active:
              description: The active state of C(service).
              type: str
              sample: active
            exec_start:
              description: The unit's C(ExecStart) command line as written.
              type: list
              elements: str
              sample: [/usr/sbin/dockerd, -H, "fd://", $DOCKER_OPTS]
            environment_files:
              description: The unit's C(EnvironmentFile) paths.
              type: list
              elements: str
              sample: [/etc/default/docker]
            command_line:
              description: The command line with the unit's environment expanded and split on whitespace.
              type: list
              elements: str
              sample: [/usr/sbin/dockerd, -H, "fd://", --default-runtime=runc]
            flags:
              description: The names of the C(--flags) on C(command_line), without values.
              type: list
              elements: str
              sample: [--containerd, --default-runtime]
            config_file:
              description: docker only, the C(--config-file) its command line sets; C(null) when it sets none.
              type: str
              sample: null
            reports:
              description: What the daemon reports it runs with; C(null) with O(report=false).
              type: dict
              contains:
                source:
                  description: Where it comes from, a command or the path of a generated config.
                  type: str
                  sample: docker info
                ok:
                  description: Whether it could be read.
                  type: bool
                  sample: true
                error:
                  description: Why not, with the command's own words; C(null) when it could.
                  type: str
                  sample: null
                default_runtime:
                  description: The default runtime.
                  type: str
                  sample: nvidia
                runtimes:
                  description:
                    - Per runtime, its C(path) (docker's C(path), containerd's C(options.BinaryName), CRI-O's
                      C(runtime_path)) and C(type) (containerd's C(runtime_type), CRI-O's C(runtime_type)); for
                      containerd also C(systemd_cgroup) (C(options.SystemdCgroup)).
                  type: dict
                  sample: {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2",
                           "systemd_cgroup": true}}
                cdi:
                  description: containerd's C(enable_cdi); C(null) where the config has no such setting.
                  type: bool
                  sample: null
                live_restore:
                  description:
                    - docker's C(LiveRestoreEnabled) from C(docker info); C(null) for the other runtimes. When it is
                      V(false), restarting docker stops every container on the node, and the module warns where one
                      of O(plans) for docker would change a file (that change means a restart).
                  type: bool
                  sample: false
        crictl:
          description: crictl, and what the CRI reports through it.
          type: dict
          contains:
            path:
              description: Where crictl is; C(null) when it is not installed.
              type: str
              sample: /usr/bin/crictl
            reports:
              description:
                - C(crictl info) as a report of the same keys as a runtime's (C(source), C(ok), C(error),
                  C(default_runtime), C(runtimes), C(cdi)); C(null) without crictl or with O(report=false).
              type: dict
              sample: {"source": "crictl info", "ok": true, "error": null, "default_runtime": "nvidia",
                       "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "type": "io.containerd.runc.v2"}},
                       "cdi": false}
        packages:
          description: Per package of O(packages), its installed version; C(null) when it is not installed.
          type: dict
          sample: {"nvidia-container-toolkit": "1.19.0-1", "nvidia-docker2": null}
        held:
          description: The packages of O(packages) that are installed and on hold (dpkg's selection C(hold)); always
            empty on rpm systems.
          type: list
          elements: str
          sample: ["nvidia-container-toolkit"]
        files:
          description: Per path of O(files), what is there.
          type: dict
          sample: {"/etc/kubernetes/kubelet.env": {"exists": false, "error": null}}
          contains:
            exists:
              description: Whether the path exists.
              type: bool
              sample: true
            directory:
              description: Whether it is a directory (only when it exists).
              type: bool
              sample: false
            mode:
              description: Its permission bits, in octal (only when it exists).
              type: str
              sample: "0644"
            size:
              description: Its size in bytes (only when it exists).
              type: int
              sample: 3177
            sha256:
              description: The SHA-256 of a regular file of up to 16 MiB (only when it exists).
              type: str
              sample: 3f1c0e9a6f7d1b2c4e5a69788f0d1c2b3a4e5f60718293a4b5c6d7e8f9012345
            content:
              description: The text of a UTF-8 file of up to 64 KiB, else C(null) (only when it exists).
              type: str
              sample: "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /\n"
            error:
              description: Why it could not be read, when it could not.
              type: str
              sample: null
        plans:
          description: Per runtime of O(plans) that is found, whether M(kubegpu.cluster.nvidia_runtime_config) would change a file.
          type: dict
          sample: {"docker": {"changed": false, "files": [], "config_path": "/etc/docker/daemon.json", "error": null}}
          contains:
            changed:
              description: Whether a file would change; C(null) when that cannot be told (see C(error)).
              type: bool
              sample: false
            files:
              description: The files that would change.
              type: list
              elements: str
              sample: [/etc/containerd/conf.d/99-nvidia.toml, /etc/containerd/config.toml]
            config_path:
              description: The file that holds the runtime's settings (the drop-in, when there is one).
              type: str
              sample: /etc/docker/daemon.json
            error:
              description: Why the plan could not be made (a malformed file, tomlkit missing), in the module's words.
              type: str
              sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils import _python
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.constants import RUNTIME_NAME, RUNTIME_PATH
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime import registry
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.args import options_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.base import Host
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.containerd import Containerd
from ansible_collections.kubegpu.cluster.plugins.module_utils._runtime.facts import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(
            runtimes=dict(type="list", elements="str", choices=registry.NAMES, default=list(registry.NAMES)),
            containerd_config=dict(type="path", default=Containerd.config_path, absolute=True),
            report=dict(type="bool", default=True),
            packages=dict(type="list", elements="str", default=[]),
            files=dict(type="list", elements="path", default=[], absolute=True),
            # each entry nvidia_runtime_config's options (the nvidia_runtime_options doc fragment's PLANS)
            plans=dict(type="list", elements="dict", default=[], options=options_spec(RUNTIME_NAME, RUNTIME_PATH)),
            **_python.ARG_SPEC
        ),
        supports_check_mode=True,
    )
    run_module(module, lambda: dict(run(module.params, Host.from_module(module)),
                                    python_unmet=_python.unmet(module.params["python_requirements"])), rules=rules)


if __name__ == "__main__":
    main()
