#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: mig_layout
short_description: Apply a MIG layout, written in NVIDIA mig-parted's config format, to a host's GPUs through NVML
version_added: 0.2.0
description:
  - Reads the host's GPUs through NVML, picks the layout O(name) of O(config) (mig-parted's C(version) C(v1) format,
    checked as mig-parted v0.15.0 checks a file when it reads it), and, per GPU the layout names, turns MIG mode on or
    off and destroys and creates GPU and compute instances until the GPU has exactly the asked MIG devices. A GPU that
    already has them is not touched; a GPU no entry of the layout matches is left alone.
  - Profile names are checked for their format when the config is read (any slice count, attributes after C(+) or
    C(-)), so a file with layouts for other GPU families, such as NVIDIA's default configs, loads; a name is checked
    against a GPU's own profiles when the selected layout is planned for that GPU.
  - Where an entry has C(devices) C(all), a GPU that is not MIG capable is skipped (the plan's C(why) says so), as mig-parted skips
    it; the others get the layout.
  - Where a GPU cannot switch MIG mode at once (NVML's pending mode differs from the current one until a GPU reset or
    a reboot), the module sets the mode and reports RV(reset_required); a run after the reset creates the instances.
    Check mode reports the same, from what NVML says of the GPU (passed through to a VM, the switch waits; on bare
    metal it is made at once).
  - Stops before any change when the layout cannot be applied (a GPU that is not MIG capable named by its index with
    MIG enabled, a profile the GPU does not offer, devices that do not fit together), naming every such GPU. When NVML refuses midway (a GPU instance in
    use), the GPU's previous MIG devices are created again and the error says so.
  - Sets the fact C(gpu) (C(ansible_facts['gpu']), as M(kubegpu.cluster.gpu_facts) returns it) read after the change,
    so that later tasks (the device plugin's expectations) see the new layout.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  config:
    description:
      - The mig-parted config, C(version) C(v1) and C(mig-configs) (name to a list of entries with C(devices),
        C(device-filter), C(mig-enabled), C(mig-devices)), as data.
      - Exactly one of O(config) and O(config_file).
    type: dict
  config_file:
    description:
      - A mig-parted config file on the host (YAML or JSON), such as the MIG manager's C(config.yaml).
      - An absolute path (C(~) is expanded), since the module runs on the managed host, in a working directory nobody chose.
    type: path
  name:
    description: The layout of the config to apply (mig-parted's C(--selected-config)); may be left out when the config has one.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the managed host, and root (NVML refuses MIG changes to other users).
attributes:
  check_mode:
    support: full
    details: Reads the GPUs and returns the plan, the diff, RV(predicted) and RV(reset_required), changing nothing.
  diff_mode:
    support: full
    details: Each changed GPU's MIG mode and devices before and after.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: A GPU whose MIG mode and devices are as asked is not touched.
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - The module does not stop the GPU's clients; NVML refuses to destroy an instance a process uses. The
    R(kubegpu.cluster.mig,ansible_collections.kubegpu.cluster.mig_role) role stops them first.
  - Compared with mig-parted, the instances' placements are chosen before any is created, from the placements NVML
    offers, instead of trying orderings of the devices; a count of 0 is the same as leaving a profile out.
  - Stricter than mig-parted on purpose, in the selected layout only, where mig-parted reads an entry that can never
    do what it says - a C(device-filter) that is not a PCI device id or a negative GPU index (they match no GPU), an
    empty C(mig-enabled) (read as false, which turns MIG off) - the module refuses it, naming the field.
seealso:
  - name: mig-parted
    description: NVIDIA's MIG partition editor, whose config format this module reads.
    link: https://github.com/NVIDIA/mig-parted
"""

EXAMPLES = r"""
- name: Two 1g.10gb and two 2g.20gb devices on every A100 and H100
  kubegpu.cluster.mig_layout:
    name: mixed
    config:
      version: v1
      mig-configs:
        mixed:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 2, "2g.20gb": 2}

- name: The layout the MIG manager's config file names
  kubegpu.cluster.mig_layout:
    config_file: /etc/nvidia-mig-manager/config.yaml
    name: all-1g.10gb
"""

RETURN = r"""
plan:
  description: Per GPU (NVML index order), what the layout asks and what the module did or would do.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: The GPU's NVML index.
      type: int
    name:
      description: The GPU's name.
      type: str
    action:
      description: C(none), C(enable), C(disable), C(reconfigure) or C(refuse).
      type: str
    current:
      description: C(mig_enabled) and C(mig_devices) (profile to count) before.
      type: dict
    wanted:
      description: The same as the layout asks, or null where no entry matches the GPU.
      type: dict
    mode_change:
      description: Whether the GPU's current MIG mode changes (a GPU reset, or a reboot, where it cannot switch at once).
      type: bool
    reset_required:
      description: Whether the GPU waits for a reset or reboot to take the new MIG mode (after this run; in check
        mode, after the run would set it).
      type: bool
    why:
      description: Why a GPU is left alone or refused; null otherwise.
      type: str
  sample: [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "action": "reconfigure", "mode_change": false,
            "reset_required": false, "current": {"mig_enabled": true, "mig_devices": {"7g.80gb": 1}},
            "wanted": {"mig_enabled": true, "mig_devices": {"1g.10gb": 2, "2g.20gb": 2}}, "why": null}]
reset_required:
  description: The indexes of the GPUs that wait for a GPU reset or a reboot to switch MIG mode (in check mode, those
    that would).
  returned: always
  type: list
  elements: int
  sample: [0, 1]
predicted:
  description: The C(gpu) fact as the host will report it once the plan is applied (what the device plugin will see).
  returned: always
  type: dict
ansible_facts:
  description: The C(gpu) fact read after the change (in check mode, as it is).
  returned: always
  type: complex
  contains:
    gpu:
      description: As M(kubegpu.cluster.gpu_facts) returns it.
      type: dict
"""

import json
import traceback

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import FileError, run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import mig_apply, mig_config
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.nvml import gather_gpu_facts

try:
    import pynvml
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()

try:
    import yaml  # a YAML config file needs PyYAML on the host; JSON does not
except ImportError:
    yaml = None


def _read_config(path):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        raise FileError("cannot read the mig-parted config: %s" % exc, path=path)
    if yaml is None:
        try:
            return json.loads(text)
        except ValueError as exc:
            raise FileError("not a JSON mig-parted config (PyYAML is not installed on the host, so YAML cannot be "
                            "read): %s" % exc, path=path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FileError("not a YAML mig-parted config: %s" % exc, path=path)


def _show(layout):
    if layout is None:
        return "left alone"
    if not layout["mig_enabled"]:
        return "MIG off"
    return "MIG on: " + (", ".join("%s x%d" % (name, count) for name, count in sorted(layout["mig_devices"].items()))
                         or "no MIG devices")


def work(params, check_mode, want_diff):
    if params["config_file"]:
        option, document = "config_file %s" % params["config_file"], _read_config(params["config_file"])
    else:
        option, document = "config", params["config"]
    entries = mig_config.select(mig_config.load(document, option=option), params["name"], option="name", source=option)
    before = gather_gpu_facts(pynvml)
    if before["nvml"]["status"] != "ok":
        raise mig_apply.MigError("NVML does not answer on this host (%s: %s); check the driver with gpu_facts"
                                 % (before["nvml"]["status"], before["nvml"]["message"]))
    steps = mig_config.plan(entries, before)
    refused = [s for s in steps if s["action"] == "refuse"]
    if refused:
        raise mig_apply.MigError("the layout cannot be applied, nothing was changed: " + "; ".join(
            "GPU %s: %s" % (s["index"], s["why"]) for s in refused))
    changing = [s for s in steps if s["action"] != "none"]
    outcomes = {}
    after = before
    if changing:
        pynvml.nvmlInit()
        try:
            mig_apply.check_steps(pynvml, changing)  # every GPU's layout fits before any GPU is touched (and in check mode)
            for step in changing:
                if check_mode:
                    # what the run would report: a mode switch that the GPU cannot make without a reset or a reboot
                    # (where NVML cannot say whether it can, one that may need it)
                    waits = mig_apply.mode_switch_waits(pynvml, step["index"]) if step["mode_change"] else False
                    outcomes[step["index"]] = {"reset_required": step["mode_change"] and waits is not False}
                else:
                    outcomes[step["index"]] = mig_apply.apply_step(pynvml, step)
        finally:
            pynvml.nvmlShutdown()
        if not check_mode:
            after = gather_gpu_facts(pynvml)
    plan = []
    for step in steps:
        reset = outcomes.get(step["index"], {}).get("reset_required", False)
        plan.append(dict((k, step[k]) for k in ("index", "name", "action", "current", "wanted", "mode_change", "why")))
        plan[-1]["reset_required"] = bool(reset)
    result = {"changed": bool(changing), "plan": plan, "reset_required": [p["index"] for p in plan if p["reset_required"]],
              "predicted": mig_config.facts_after(steps, before), "ansible_facts": {"gpu": after}}
    if want_diff and changing:
        result["diff"] = {
            "before": "".join("GPU %s: %s\n" % (s["index"], _show(s["current"])) for s in changing),
            "after": "".join("GPU %s: %s\n" % (s["index"], _show(s["wanted"])) for s in changing),
        }
    return result


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(config=dict(type="dict"), config_file=dict(type="path", absolute=True), name=dict(type="str")),
        required_one_of=[("config", "config_file")],
        mutually_exclusive=[("config", "config_file")],
        supports_check_mode=True,
    )
    run_module(module, lambda: work(module.params, module.check_mode, module._diff),
               requires=(("nvidia-ml-py", PYNVML_IMPORT_ERROR, "https://pypi.org/project/nvidia-ml-py/"),), rules=rules)


if __name__ == "__main__":
    main()
