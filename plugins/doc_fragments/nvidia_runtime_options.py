# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options of a runtime's configuration with the NVIDIA runtime in it: nvidia_runtime_config's own options
    (``DOCUMENTATION``) and each entry of container_runtime_facts' ``plans`` (``PLANS``: the same options, one level
    down, their references to one another those of the entry). Paired with the argument spec of
    plugins/module_utils/_runtime/args.py (options_spec): change them together. ansible-test reads a fragment's
    strings as literals, so PLANS is written out; tests/unit/plugins/module_utils/_runtime/test_runtime_args.py makes
    it from DOCUMENTATION and fails, naming the line, when the two differ."""

    DOCUMENTATION = r"""
options:
  runtime:
    description: The container runtime whose configuration is edited.
    type: str
    required: true
    choices: [docker, containerd, crio, k3s, rke2, k0s, microk8s]
  config_path:
    description:
      - The runtime's main configuration file.
      - Defaults to C(/etc/docker/daemon.json), C(/etc/containerd/config.toml) or C(/etc/crio/crio.conf) by O(runtime).
      - For k3s and RKE2, the drop-in the module writes, C(/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml) or
        C(/etc/rancher/rke2/config.yaml.d/99-nvidia.yaml); it holds the default runtime only, and goes with
        O(state=absent) or O(set_as_default=false) (the distribution registers the runtime by itself). The module
        refuses a O(runtime_path) they would not find (not C(nvidia-container-runtime) on PATH or in the GPU
        operator's C(/usr/local/nvidia/toolkit)).
      - For k0s, the file of C(/etc/k0s/containerd.d) the module writes, C(/etc/k0s/containerd.d/nvidia.toml) (the name
        NVIDIA's operator documentation uses on k0s); it must end in C(.toml). For microk8s,
        C(/var/snap/microk8s/current/args/containerd-template.toml).
      - It does not have to exist; a missing file is created.
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
  drop_in_path:
    description:
      - Write the settings to this drop-in file instead of editing O(config_path); containerd and CRI-O only
        (docker has no drop-in directory, and the module refuses the option for it). Must be absolute.
      - For containerd, the module also makes sure that O(config_path) lists this exact path in its C(imports),
        unless an absolute glob already there matches it (containerd expands entries containing C(*)). containerd
        before 2.1 replaces a whole plugin table with the imported one, so the drop-in carries the entire CRI plugin
        table containerd loads today with the runtime added, and nothing else. That is the table of O(config_path), or of
        the last file it imports that has one; for containerd 2.1 and later, which merge plugin tables, the tables
        merged, as they load them. Run the module again after changing those CRI tables, or the drop-in's older copy wins;
        the runtime's own C(config dump) tells.
      - For CRI-O, which merges drop-in files key by key, the drop-in holds only the runtime's tables and
        O(config_path) is neither read nor changed. NVIDIA's tools use C(/etc/crio/crio.conf.d/99-nvidia.toml).
      - NVIDIA's tools use C(/etc/containerd/conf.d/99-nvidia.toml) for containerd.
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
  runtime_name:
    description: Name of the runtime in the configuration (a RuntimeClass C(handler) for Kubernetes).
    type: str
    default: nvidia
  runtime_path:
    description:
      - The NVIDIA runtime executable. Must be absolute for containerd and CRI-O.
      - For containerd this is the runc shim's C(options.BinaryName).
    type: str
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - Make the runtime the default (docker C(default-runtime), containerd C(default_runtime_name), CRI-O
        C(default_runtime)), so that pods without a RuntimeClass get the GPUs, as the device plugin needs.
      - V(false) on a file whose default is O(runtime_name) (from an earlier run) gives the default back to what the
        user had before, as O(state=absent) does.
      - With O(state=absent), the default goes back when it names O(runtime_name), whatever this option says.
    type: bool
    default: true
  cdi:
    description:
      - Turn on CDI device injection, docker C(features.cdi) (docker 25 or later) and containerd C(enable_cdi) on the
        CRI plugin.
      - Ignored for CRI-O, which has no such switch (it always reads CDI specifications); the module warns.
      - O(state=absent) gives C(features.cdi) or C(enable_cdi) back to what it was only where the module turned CDI on
        (the marker described under RV(changed_files) remembers it; with a drop-in, the drop-in held it);
        a user's own C(enable_cdi = true), such as EKS ships, stays, whatever this option says.
    type: bool
    default: false
  config_version:
    description:
      - containerd, k0s and microk8s only (the module refuses any other value than V(auto) for docker, CRI-O, k3s and
        RKE2).
      - For k0s, V(auto) takes the version of what k0s generated last (C(/run/k0s/containerd-cri.toml)), else asks its
        bundled C(/var/lib/k0s/bin/containerd), which means V(2) on containerd 1.x and V(3) on 2.x (k0s refuses any other version in
        C(containerd.d)). Before k0s ever ran on the host neither is there, and the module asks for O(config_version).
      - V(2) writes the containerd 1.x layout (CRI plugin C(io.containerd.grpc.v1.cri)), V(3) the containerd 2.0 to 2.2
        layout and V(4) the containerd 2.3 and later layout (both with the CRI runtime plugin
        C(io.containerd.cri.v1.runtime); version 4 differs from 3 in the server settings only).
      - V(auto) reads the C(version) of O(config_path). When the file is missing or holds no settings, it asks
        C(containerd --version) for the version that containerd writes itself (1.x means V(2), 2.0 to 2.2 mean V(3),
        2.3 and later V(4)), and writes V(2) when there is no containerd binary.
      - A file with settings but no C(version) is version 1 for containerd; the module refuses it (and V(version = 1))
        rather than write a layout containerd would read differently. Migrate it first (C(containerd config migrate)).
        An explicit version that differs from the file's C(version) is refused as well.
    type: str
    choices: ['auto', '2', '3', '4']
    default: auto
  state:
    description:
      - V(present) registers the runtime.
      - V(absent) removes the runtime's table; gives the default runtime setting, when it names O(runtime_name), back
        to what the user had (see RV(changed_files) for the marker that remembers it; without one, the
        setting is removed and the runtime's built-in default applies); removes C(runtimes) (docker) and any table left empty that
        had no header of its own, and C(features.cdi)/C(enable_cdi) as described for O(cdi).
      - "For docker, V(absent) takes out only what the marker beside C(daemon.json) says O(state=present) put in: the
        runtime's entry goes back to the user's own where there was one (its path, C(runtimeArgs) and all), as does a
        C(default-runtime) the user had set to it; a file that held nothing (empty, blank, C({})) gets its text back,
        and a file O(state=present) created goes. Without a marker of O(runtime_name) (O(state=present) never changed
        the file, which was configured as asked already), C(daemon.json) is the user's and stays as it is."
      - For a containerd drop-in, V(absent) removes the C(imports) entry equal to O(drop_in_path) and deletes the
        drop-in. An C(imports) list left empty stays, as V([]), unless the main config had no C(imports) before
        O(state=present) added it; the drop-in's first line (a comment) remembers that, and the key goes with it.
        For a CRI-O drop-in, it removes the runtime's tables from the drop-in, and deletes the file when nothing else
        is left in it.
    type: str
    choices: [present, absent]
    default: present
"""

    PLANS = r"""

options:
  plans:
    description:
      - Options of M(kubegpu.cluster.nvidia_runtime_config), one entry per runtime, to report in
        RV(ansible_facts.container_runtimes.plans) whether that module would change a file. An entry whose
        runtime is not found is left out. Each option means what it means to that module (its descriptions below;
        I(the module) is that module).
      - For docker, an empty O(plans[].config_path) follows a C(--config-file) on dockerd's command line.
      - O(plans[].state=absent) tells whether removing the runtime would change a file.
    type: list
    elements: dict
    default: []
    suboptions:
      runtime:
        description: The container runtime whose configuration is edited.
        type: str
        required: true
        choices: [docker, containerd, crio, k3s, rke2, k0s, microk8s]
      config_path:
        description:
          - The runtime's main configuration file.
          - Defaults to C(/etc/docker/daemon.json), C(/etc/containerd/config.toml) or C(/etc/crio/crio.conf) by O(plans[].runtime).
          - For k3s and RKE2, the drop-in the module writes, C(/etc/rancher/k3s/config.yaml.d/99-nvidia.yaml) or
            C(/etc/rancher/rke2/config.yaml.d/99-nvidia.yaml); it holds the default runtime only, and goes with
            O(plans[].state=absent) or O(plans[].set_as_default=false) (the distribution registers the runtime by itself). The module
            refuses a O(plans[].runtime_path) they would not find (not C(nvidia-container-runtime) on PATH or in the GPU
            operator's C(/usr/local/nvidia/toolkit)).
          - For k0s, the file of C(/etc/k0s/containerd.d) the module writes, C(/etc/k0s/containerd.d/nvidia.toml) (the name
            NVIDIA's operator documentation uses on k0s); it must end in C(.toml). For microk8s,
            C(/var/snap/microk8s/current/args/containerd-template.toml).
          - It does not have to exist; a missing file is created.
          - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
        type: path
      drop_in_path:
        description:
          - Write the settings to this drop-in file instead of editing O(plans[].config_path); containerd and CRI-O only
            (docker has no drop-in directory, and the module refuses the option for it). Must be absolute.
          - For containerd, the module also makes sure that O(plans[].config_path) lists this exact path in its C(imports),
            unless an absolute glob already there matches it (containerd expands entries containing C(*)). containerd
            before 2.1 replaces a whole plugin table with the imported one, so the drop-in carries the entire CRI plugin
            table containerd loads today with the runtime added, and nothing else. That is the table of O(plans[].config_path), or of
            the last file it imports that has one; for containerd 2.1 and later, which merge plugin tables, the tables
            merged, as they load them. Run the module again after changing those CRI tables, or the drop-in's older copy wins;
            the runtime's own C(config dump) tells.
          - For CRI-O, which merges drop-in files key by key, the drop-in holds only the runtime's tables and
            O(plans[].config_path) is neither read nor changed. NVIDIA's tools use C(/etc/crio/crio.conf.d/99-nvidia.toml).
          - NVIDIA's tools use C(/etc/containerd/conf.d/99-nvidia.toml) for containerd.
          - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
        type: path
      runtime_name:
        description: Name of the runtime in the configuration (a RuntimeClass C(handler) for Kubernetes).
        type: str
        default: nvidia
      runtime_path:
        description:
          - The NVIDIA runtime executable. Must be absolute for containerd and CRI-O.
          - For containerd this is the runc shim's C(options.BinaryName).
        type: str
        default: /usr/bin/nvidia-container-runtime
      set_as_default:
        description:
          - Make the runtime the default (docker C(default-runtime), containerd C(default_runtime_name), CRI-O
            C(default_runtime)), so that pods without a RuntimeClass get the GPUs, as the device plugin needs.
          - V(false) on a file whose default is O(plans[].runtime_name) (from an earlier run) gives the default back to what the
            user had before, as O(plans[].state=absent) does.
          - With O(plans[].state=absent), the default goes back when it names O(plans[].runtime_name), whatever this option says.
        type: bool
        default: true
      cdi:
        description:
          - Turn on CDI device injection, docker C(features.cdi) (docker 25 or later) and containerd C(enable_cdi) on the
            CRI plugin.
          - Ignored for CRI-O, which has no such switch (it always reads CDI specifications); the module warns.
          - O(plans[].state=absent) gives C(features.cdi) or C(enable_cdi) back to what it was only where the module turned CDI on
            (the marker described under RV(kubegpu.cluster.nvidia_runtime_config#module:changed_files) remembers it; with a drop-in, the drop-in held it);
            a user's own C(enable_cdi = true), such as EKS ships, stays, whatever this option says.
        type: bool
        default: false
      config_version:
        description:
          - containerd, k0s and microk8s only (the module refuses any other value than V(auto) for docker, CRI-O, k3s and
            RKE2).
          - For k0s, V(auto) takes the version of what k0s generated last (C(/run/k0s/containerd-cri.toml)), else asks its
            bundled C(/var/lib/k0s/bin/containerd), which means V(2) on containerd 1.x and V(3) on 2.x (k0s refuses any other version in
            C(containerd.d)). Before k0s ever ran on the host neither is there, and the module asks for O(plans[].config_version).
          - V(2) writes the containerd 1.x layout (CRI plugin C(io.containerd.grpc.v1.cri)), V(3) the containerd 2.0 to 2.2
            layout and V(4) the containerd 2.3 and later layout (both with the CRI runtime plugin
            C(io.containerd.cri.v1.runtime); version 4 differs from 3 in the server settings only).
          - V(auto) reads the C(version) of O(plans[].config_path). When the file is missing or holds no settings, it asks
            C(containerd --version) for the version that containerd writes itself (1.x means V(2), 2.0 to 2.2 mean V(3),
            2.3 and later V(4)), and writes V(2) when there is no containerd binary.
          - A file with settings but no C(version) is version 1 for containerd; the module refuses it (and V(version = 1))
            rather than write a layout containerd would read differently. Migrate it first (C(containerd config migrate)).
            An explicit version that differs from the file's C(version) is refused as well.
        type: str
        choices: ['auto', '2', '3', '4']
        default: auto
      state:
        description:
          - V(present) registers the runtime.
          - V(absent) removes the runtime's table; gives the default runtime setting, when it names O(plans[].runtime_name), back
            to what the user had (see RV(kubegpu.cluster.nvidia_runtime_config#module:changed_files) for the marker that remembers it; without one, the
            setting is removed and the runtime's built-in default applies); removes C(runtimes) (docker) and any table left empty that
            had no header of its own, and C(features.cdi)/C(enable_cdi) as described for O(plans[].cdi).
          - "For docker, V(absent) takes out only what the marker beside C(daemon.json) says O(plans[].state=present) put in: the
            runtime's entry goes back to the user's own where there was one (its path, C(runtimeArgs) and all), as does a
            C(default-runtime) the user had set to it; a file that held nothing (empty, blank, C({})) gets its text back,
            and a file O(plans[].state=present) created goes. Without a marker of O(plans[].runtime_name) (O(plans[].state=present) never changed
            the file, which was configured as asked already), C(daemon.json) is the user's and stays as it is."
          - For a containerd drop-in, V(absent) removes the C(imports) entry equal to O(plans[].drop_in_path) and deletes the
            drop-in. An C(imports) list left empty stays, as V([]), unless the main config had no C(imports) before
            O(plans[].state=present) added it; the drop-in's first line (a comment) remembers that, and the key goes with it.
            For a CRI-O drop-in, it removes the runtime's tables from the drop-in, and deletes the file when nothing else
            is left in it.
        type: str
        choices: [present, absent]
        default: present
"""
