#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_proof
short_description: Prove that Kubernetes schedules GPU work, by running a Job that asks for one GPU
version_added: 0.1.0
description:
  - Creates one Job (or one per node in O(nodes)) whose single container asks for one GPU (C(limits), so the request
    equals the limit) and tolerates the C(nvidia.com/gpu) taint, waits with a watch until every Job has finished or
    O(timeout) has passed, and then reads each pod's log for O(success_pattern) (the CUDA C(vectorAdd) sample prints
    C(Test PASSED)).
  - The Jobs are always deleted again, whatever happened, and so is O(namespace) when this module created it.
  - "With O(vendor=amd) or O(vendor=intel) the proof is that vendor's: it looks at the C(amd.com/*) or
    C(gpu.intel.com/*) resources only (C(amd.com/gpu), C(gpu.intel.com/i915), C(gpu.intel.com/xe)), and O(image),
    O(command), O(success_pattern) and O(tolerations) default to the vendor's workload - a ROCm image running
    C(rocminfo), whose log names the GPU's C(gfx) target; Intel's OpenCL image running C(clinfo), whose log shows a
    C(Device Name)."
  - With O(device_class), a proof's pod asks for one device of that DeviceClass through a ResourceClaim (Dynamic
    Resource Allocation, for example NVIDIA's DRA driver's C(gpu.nvidia.com)) instead of an extended resource.
  - Without O(resource), each proof asks for the resource its node advertises, in this order
    C(nvidia.com/gpu), C(nvidia.com/gpu.shared), the first C(nvidia.com/mig-*); the cluster-wide proof picks the same
    way from the sum over all nodes.
  - A proof that does not pass says why, from the pod's phase, conditions and last events, with the usual fix
    (C(Insufficient nvidia.com/gpu), an untolerated taint, an image that cannot be pulled, NVML not found).
  - "Proof only when something could have changed: with O(proven_under), a passed proof is recorded on its node, in
    the annotation C(kubegpu.cluster/last-proof) (JSON: C(passed_at), C(job), C(resource), C(detail) and C(under),
    what it ran under: the node's device plugin config hash, driver version, container runtime, and a hash of the
    proof itself: image, command, arguments, RuntimeClass, success pattern). With O(reprove=changed) a later run
    proves a node again only where one of those changed, where the node no longer advertises the resource it was
    proved on, or where no passed proof is on record; for the other nodes RV(results) carries the last proof. The
    cluster-wide proof stands when the last proof on any node of O(proven_under) does."
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  vendor:
    description:
      - Whose GPUs to prove. V(nvidia) looks at C(nvidia.com/*); V(amd) and V(intel) at their vendor's resources, with
        their vendor's workload as the default of O(image), O(command), O(success_pattern) and O(tolerations).
    type: str
    choices: [nvidia, amd, intel]
    default: nvidia
  namespace:
    description: Namespace for the Jobs; created (and deleted afterwards) when missing.
    type: str
    default: gpu-validation
  image:
    description:
      - The workload image, for example from a mirror of C(nvcr.io).
      - Defaults to C(nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0), C(docker.io/rocm/dev-ubuntu-22.04:6.2)
        with O(vendor=amd), C(docker.io/intel/intel-opencl-icd) of the Intel plugin's release with O(vendor=intel).
    type: str
  command:
    description: The container's command, in place of the image's entry point (for example V([nvidia-smi])).
    type: list
    elements: str
  args:
    description: The container's arguments.
    type: list
    elements: str
  image_pull_secrets:
    description: Names of Secrets in O(namespace) to pull the image with.
    type: list
    elements: str
    default: []
  resource:
    description:
      - The extended resource to ask for one of, for example V(nvidia.com/gpu), V(nvidia.com/gpu.shared) or
        V(nvidia.com/mig-1g.10gb). A name without a prefix gets the vendor's, C(nvidia.com/) by default (C(amd.com/)
        with O(vendor=amd), C(gpu.intel.com/) with O(vendor=intel)). Picked per node when omitted.
    type: str
  device_class:
    description:
      - "Prove Dynamic Resource Allocation instead: each proof's pod gets one device of this DeviceClass through a
        ResourceClaimTemplate (C(gpu-proof-claim) in O(namespace), deleted afterwards), allocated by the scheduler, in
        place of an extended resource (O(resource) must then be left out). For NVIDIA's DRA driver, V(gpu.nvidia.com).
        RV(allocatable) then counts, per node, the devices its ResourceSlices publish, as C(claim/<device class>)."
      - Needs the C(resource.k8s.io) API (the newest version the server serves is used).
    type: str
  nodes:
    description:
      - Run one proof pinned (by C(kubernetes.io/hostname)) to each of these nodes. When empty, one proof runs
        wherever the scheduler puts it.
    type: list
    elements: str
    default: []
  per_node:
    description: With an empty O(nodes), run one proof on every node that advertises an C(nvidia.com/*) resource.
    type: bool
    default: false
  runtime_class:
    description: RuntimeClass of the proof pods; leave empty when C(nvidia) is the runtimes' default.
    type: str
  tolerations:
    description: The pods' tolerations. Defaults to C(nvidia.com/gpu) Exists NoSchedule.
    type: list
    elements: dict
  readiness_taint:
    description:
      - The readiness gate's other half (M(kubegpu.cluster.device_plugin_deploy)'s
        O(kubegpu.cluster.device_plugin_deploy#module:readiness_taint) sets it). The proof pods tolerate the taint
        C(kubegpu.cluster/gpu-unproven), and each node a proof passed on (or whose last proof stands, see O(reprove))
        loses it. A node whose proof failed keeps it. Returned as RV(untainted).
    type: bool
    default: false
  success_pattern:
    description:
      - Text the log must contain. An empty string checks only that the Job succeeded.
      - Defaults to C(Test PASSED), C(gfx) with O(vendor=amd), C(Device Name) with O(vendor=intel).
    type: str
  require_log:
    description:
      - Fail a proof whose Job succeeded but whose log cannot be read. Off by default, so a cluster whose logs are
        not served (a kubelet that cannot be reached from the API server) still passes on the Job's success.
    type: bool
    default: false
  proven_under:
    description:
      - Per Kubernetes node, what a proof there runs under, so that a passed proof is recorded on the node and a
        later run proves it again only when one of these changed (O(reprove)).
      - C(config) names the node's device plugin config in O(plugin_configs) (C(default) when not given); C(driver_version)
        and C(runtime) are strings, for example the driver version of its C(gpu) facts and its container runtimes'
        default runtimes and versions.
      - A value left out or null (not read in this run; without O(plugin_configs) the config's hash is unknown too) is
        taken as unchanged since the node's last passed proof, and a new record keeps the last one's value for it; a
        value known now where the record has none proves again. The proof itself (image, command, arguments,
        RuntimeClass, success pattern) is always known and must be the same.
    type: dict
    default: {}
  plugin_configs:
    description:
      - The device plugin's configs by name, as data (the RV(kubegpu.cluster.device_plugin_deploy#module:configs)
        result); each node's C(config) of O(proven_under) is hashed as that module hashes it.
    type: dict
    default: {}
  reprove:
    description:
      - V(changed) proves a node of O(proven_under) again only where what it runs under changed (see the
        description); V(always) proves every time (and records every passed proof).
    type: str
    choices: [changed, always]
    default: changed
  timeout:
    description:
      - Seconds to wait for the Jobs. Their C(activeDeadlineSeconds) is 300 more, a safety net for a run that is
        interrupted before it deletes them.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The Jobs are sent as a server-side dry run (validated by the API server) and nothing runs.
  diff_mode:
    support: none
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: partial
    details:
      - The Jobs are temporary and removed before the module returns. Without O(proven_under) the module always
        reports C(changed=false).
      - With O(proven_under) it reports C(changed) when it records a passed proof on a node (in check mode, when a
        proof would run on such a node); a second run with nothing changed proves nothing and reports no change,
        unless O(reprove=always).
  platform:
    platforms: posix
notes:
  - The module fails when a proof does not pass; its result (with every proof's detail) is returned with the failure.
seealso:
  - module: kubegpu.cluster.device_plugin_deploy
  - name: CUDA samples on NGC
    description: The C(vectoradd) image used by default.
    link: https://catalog.ngc.nvidia.com/orgs/nvidia/teams/k8s/containers/cuda-sample
"""

EXAMPLES = r"""
- name: One GPU workload anywhere in the cluster
  kubegpu.cluster.gpu_proof:
    kubeconfig: ~/.kube/config

- name: One proof per GPU node, from a mirror, with the nvidia RuntimeClass
  kubegpu.cluster.gpu_proof:
    per_node: true
    image: registry.example.com/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
    runtime_class: nvidia

- name: One proof per GPU node, again only where its plugin config, driver or runtime changed since it last passed
  kubegpu.cluster.gpu_proof:
    per_node: true
    plugin_configs: "{{ device_plugin_result.configs }}"
    proven_under:
      gpu-1: {config: default, driver_version: "550.54.15", runtime: "containerd 1.7.24 default nvidia"}
      gpu-2: {config: mps4, driver_version: "550.54.15", runtime: "containerd 1.7.24 default nvidia"}

- name: Run nvidia-smi on a MIG slice
  kubegpu.cluster.gpu_proof:
    resource: nvidia.com/mig-1g.10gb
    image: nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04
    command: [nvidia-smi]
    success_pattern: ""
"""

RETURN = r"""
passed:
  description: Whether every proof passed; C(null) in check mode.
  returned: always
  type: bool
  sample: true
results:
  description: One entry per proof.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The node the proof ran on (or was pinned to).
      type: str
      sample: gpu-1
    resource:
      description: The resource asked for.
      type: str
      sample: nvidia.com/gpu
    job:
      description: The Job's name.
      type: str
      sample: gpu-proof
    phase:
      description: The pod's last phase.
      type: str
      sample: Succeeded
    passed:
      description: Whether this proof passed.
      type: bool
      sample: true
    log_checked:
      description: Whether the log could be read and was checked for O(success_pattern).
      type: bool
      sample: true
    detail:
      description: What happened, in one line, with the fix for a known failure.
      type: str
      sample: succeeded, log shows 'Test PASSED'
    ran:
      description: Whether the proof ran in this run; V(false) for a node whose last proof still stands (O(reprove)).
      type: bool
      sample: true
    last_proof:
      description: The proof recorded on the node (see RV(last_proofs)), when one is.
      type: dict
      sample: {"passed_at": "2026-11-25T04:40:12Z", "job": "gpu-proof-gpu-1-3f1c0e", "resource": "nvidia.com/gpu",
               "detail": "succeeded, log shows 'Test PASSED'", "under": {"config_hash": "3f1c...", "driver_version":
               "550.54.15", "runtime": "containerd 1.7.24 default nvidia", "proof": "9a1b2c3d4e5f6071"}}
  sample: [{"node": "gpu-1", "resource": "nvidia.com/gpu", "job": "gpu-proof", "phase": "Succeeded", "passed": true,
            "log_checked": true, "detail": "succeeded, log shows 'Test PASSED'", "ran": true}]
recorded:
  description: The nodes on which a passed proof was recorded in this run (in check mode, would be if it passed).
  returned: always
  type: list
  elements: str
  sample: [gpu-1]
untainted:
  description: With O(readiness_taint), the nodes whose readiness taint was removed (in check mode, would be).
  returned: always
  type: list
  elements: str
  sample: [gpu-7]
last_proofs:
  description: Per node, the last passed proof recorded on it (C(kubegpu.cluster/last-proof)), after this run.
  returned: always
  type: dict
  sample: {"gpu-1": {"passed_at": "2026-11-25T04:40:12Z", "job": "gpu-proof-gpu-1-3f1c0e", "resource": "nvidia.com/gpu",
           "detail": "succeeded, log shows 'Test PASSED'", "under": {"config_hash": "3f1c...", "driver_version": "550.54.15",
           "runtime": "containerd 1.7.24 default nvidia", "proof": "9a1b2c3d4e5f6071"}}}
allocatable:
  description: Every node's allocatable counts of the resources of O(vendor) (C(nvidia.com/*) by default), read before the proof.
  returned: always
  type: dict
  sample: {"gpu-1": {"nvidia.com/gpu": 4}, "cpu-1": {}}
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: gpu-validation
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options, _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            vendor=dict(type="str", default=_vendors.NVIDIA.name, choices=sorted(_vendors.NAMES)),
            namespace=dict(type="str", default=proof.NAMESPACE),
            image=dict(type="str"),
            command=dict(type="list", elements="str"),
            args=dict(type="list", elements="str"),
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
            resource=dict(type="str"),
            device_class=dict(type="str"),
            nodes=dict(type="list", elements="str", default=[]),
            per_node=dict(type="bool", default=False),
            runtime_class=dict(type="str"),
            tolerations=dict(type="list", elements="dict"),
            readiness_taint=dict(type="bool", default=False),
            success_pattern=dict(type="str"),
            require_log=dict(type="bool", default=False),
            timeout=dict(type="int", default=proof.TIMEOUT, minimum=0),
            proven_under=dict(type="dict", default={}),
            plugin_configs=dict(type="dict", default={}),
            reprove=dict(type="str", default="changed", choices=list(proof.REPROVE)),
        ),
        supports_check_mode=True,
        mutually_exclusive=[("resource", "device_class")],
    )
    workload = proof.Workload(**_vendors.get(module.params["vendor"]).proof)
    run_module(module, lambda: proof.run(module.params, workload, check_mode=module.check_mode), requires=REQUIRES,
               rules=rules)


if __name__ == "__main__":
    main()
