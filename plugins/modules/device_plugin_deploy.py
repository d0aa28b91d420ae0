#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: device_plugin_deploy
short_description: Deploy the NVIDIA device plugin (and GPU feature discovery) to Kubernetes and wait for the GPUs
version_added: 0.1.0
description:
  - "Renders the NVIDIA k8s-device-plugin as Kubernetes objects modelled on its static manifest (v0.20.0 by default):
    a namespace, a ConfigMap holding the plugin's C(config.yaml) (C(version: v1), C(flags) and C(sharing) in the
    plugin's own schema; one key per config with O(configs)), the plugin DaemonSet reading it through E(CONFIG_FILE),
    NVIDIA's MPS control daemon where a config shares by MPS, and optionally a RuntimeClass and GPU feature discovery
    with least-privilege RBAC."
  - The options are checked with the plugin's own rules (replicas, MPS with MIG, resource names, devices, strategies)
    before any API call, so a config the plugin would refuse never reaches the cluster.
  - Objects are written with server-side apply (field manager C(kubegpu.cluster), conflicts forced). A hash of the
    config is put in the pod template, so a config change rolls the plugin pods.
  - With O(wait), watches the DaemonSet rollout and then every node in O(expected) until it advertises the expected
    allocatable counts; on timeout it names each node that is short, its plugin pod's phase and last events.
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  namespace:
    description:
      - The namespace of the deployment. Created by the module when missing, and then marked with the annotation
        C(kubegpu.cluster/created-by), so that O(state=absent) deletes it again; an existing namespace is used as is
        and never deleted.
    type: str
    default: nvidia-device-plugin
  version:
    description: The device plugin release, used for the default O(image).
    type: str
    default: v0.20.0
  image:
    description: The image, for a private registry or mirror. Defaults to C(nvcr.io/nvidia/k8s-device-plugin:<version>).
    type: str
  image_pull_secrets:
    description:
      - Names of Secrets in O(namespace) to pull the image with. Create the namespace and the Secrets first; a
        namespace the module creates has none.
    type: list
    elements: str
    default: []
  device_list_strategy:
    description:
      - The plugin's C(flags.plugin.deviceListStrategy), how devices are passed to containers.
      - With V(cdi-annotations) or V(cdi-cri), the plugin pods get what NVIDIA's Helm chart gives them for CDI, the
        host's C(/var/run/cdi) (where the plugin writes the CDI spec of its devices for the container runtime) and
        O(nvidia_driver_root) read-only at C(/driver-root) (from which it generates that spec). The container runtime
        must read CDI specs (containerd with C(enable_cdi), CRI-O always); V(cdi-cri) needs Kubernetes 1.31 or later
        (C(DevicePluginCDIDevices)).
      - With V(volume-mounts) (or a O(mig_strategy) other than V(none)), the plugin container gets the C(SYS_ADMIN)
        capability the chart gives it, in place of the hardened security context.
    type: list
    elements: str
    choices: [envvar, volume-mounts, cdi-annotations, cdi-cri]
    default: [envvar]
  device_id_strategy:
    description: The plugin's C(flags.plugin.deviceIDStrategy).
    type: str
    choices: [uuid, index]
    default: uuid
  fail_on_init_error:
    description: The plugin's C(flags.failOnInitError); V(false) lets the plugin run on nodes without GPUs.
    type: bool
    default: true
  nvidia_driver_root:
    description: The plugin's C(flags.nvidiaDriverRoot), where the driver is installed on the host.
    type: str
    default: /
  runtime_class:
    description:
      - Name of a RuntimeClass with handler C(nvidia) to create (unless one of that name exists) and to run the pods
        with. Leave empty when the NVIDIA runtime is the container runtime's default.
    type: str
  node_selector:
    description:
      - The pods' nodeSelector. Each DaemonSet adds its operand's deploy label (O(deploy_labels)), a named config's
        C(nvidia.com/device-plugin.config) label, and for the MPS control daemon C(nvidia.com/mps.capable=true).
    type: dict
    default: {"nvidia.com/gpu.present": "true"}
  deploy_labels:
    description:
      - Select on the GPU Operator's operand labels, C(nvidia.com/gpu.deploy.device-plugin=true) for the plugin and
        the MPS control daemon and C(nvidia.com/gpu.deploy.gpu-feature-discovery=true) for GFD, so that NVIDIA's MIG
        manager can stop our pods while it changes a node's MIG layout (it sets them to C(paused-for-mig-change)).
        M(kubegpu.cluster.gpu_node_labels) sets them to V(true) where they are absent.
      - V(false) for clusters where nothing sets those labels.
    type: bool
    default: true
  tolerations:
    description: The pods' tolerations. Defaults to C(nvidia.com/gpu) Exists NoSchedule and C(CriticalAddonsOnly) Exists.
    type: list
    elements: dict
  priority_class:
    description: The pods' priorityClassName; an empty string for none.
    type: str
    default: system-node-critical
  max_unavailable:
    description:
      - How many nodes' pods a rolling update of the DaemonSets replaces at a time (C(rollingUpdate.maxUnavailable)),
        a count of nodes or a percentage of them such as V(10%).
      - Left out, the DaemonSets carry NVIDIA's chart's C(updateStrategy) as it is (C(RollingUpdate)), which
        Kubernetes completes with one node at a time. On a large fleet that is slow (a config change across 2,000
        nodes replaced 75 to 100 pods a minute in the sandbox), and every node whose pod is replaced advertises no
        GPUs until its new pod registers; a wider step is quicker and takes more nodes' GPUs away at once.
    type: raw
  gfd:
    description:
      - Also deploy GPU feature discovery (same image, a DaemonSet per config, C(flags.gfd) in the config). Its
        ServiceAccount may only C(get), C(list), C(watch), C(create) and C(update) C(nodefeatures.nfd.k8s-sigs.io)
        in O(namespace) (the NodeFeature objects NFD turns into node labels) and C(get) nodes.
      - Node feature discovery (NFD) must run in the cluster, with its NodeFeature API, to turn those objects into
        labels; O(nfd) deploys it in the same call.
    type: bool
    default: false
  state:
    description:
      - V(present) applies the objects (and removes those of an earlier run no longer needed).
      - V(absent) deletes exactly what the module created, found by label C(app.kubernetes.io/managed-by=kubegpu.cluster)
        in O(namespace), the cluster-scoped ones by label C(kubegpu.cluster/namespace), and the namespace only when the
        module created it.
    type: str
    choices: [present, absent]
    default: present
  wait:
    description: Wait (with watches) for the rollout and O(expected), or with O(state=absent) for the pods to go.
    type: bool
    default: true
  wait_timeout:
    description:
      - How long to wait in all, in seconds.
      - 0 or more; the module refuses less before it does anything.
    type: int
    default: 300
  expected:
    description:
      - Node name to a dict of resource name to count that the node must advertise as allocatable, for example
        C(gpu-1) with C(nvidia.com/gpu) V(4). Names without a prefix get C(nvidia.com/). A count of 0 means absent.
      - Mutually exclusive with O(facts), which works these counts out.
    type: dict
    default: {}
  facts:
    description:
      - Host name to its C(gpu) fact, as M(kubegpu.cluster.gpu_facts) returns it. The module works out what each node
        will advertise from these facts and the plugin's config, with the plugin's own rules (the counts
        M(kubegpu.cluster.gpu_expected_resources) previews), and waits for exactly that, as with O(expected). Nodes
        without GPUs are left out, and each node is predicted under its own config (O(node_configs)).
      - A node the plugin would exit on under its config (a lost GPU, a compute capability NVML does not give, MIG
        devices of several types with O(mig_strategy=single), a C(1c.2g.20gb) MIG device with O(mig_strategy=mixed),
        ...) fails the module before any API call, naming every such node and the plugin's own reason, instead of
        waiting out O(wait_timeout).
      - So does a node whose config shares by MPS where NVIDIA's MPS control daemon cannot run, so that the plugin
        would wait for it and advertise nothing - where GPU feature discovery would not label
        C(nvidia.com/mps.capable=true), which the daemon selects on (a GPU in MIG mode under O(mig_strategy=none), a
        lost GPU, a CUDA driver version NVML does not give, ...).
      - Devices the plugin marks unhealthy (O(health_checks)) are left out of the counts, from the XID events in the
        facts.
      - Mutually exclusive with O(expected).
    type: dict
    default: {}
  health_checks:
    description:
      - The plugin's XID health checks (its E(DP_DISABLE_HEALTHCHECKS) and E(DP_ENABLE_HEALTHCHECKS)). A device marked
        unhealthy stays in the node's capacity and leaves its allocatable until the plugin restarts. The plugin always
        ignores XIDs 13, 31, 43, 45, 68 and 109 (application errors).
      - With O(facts), the counts waited for leave out what the plugin marks unhealthy, by the same rules.
    type: dict
    suboptions:
      enabled:
        description: V(false) turns the checks off (E(DP_DISABLE_HEALTHCHECKS=all)).
        type: bool
        default: true
      ignore_xids:
        description: More XIDs to ignore (E(DP_DISABLE_HEALTHCHECKS)).
        type: list
        elements: int
        default: []
      check_xids:
        description:
          - XIDs to check even where the plugin ignores them by default (E(DP_ENABLE_HEALTHCHECKS)). Refused with
            O(health_checks.enabled=false), which v0.20.0 lets win over this list.
        type: list
        elements: int
        default: []
  node_names:
    description: Host name in O(facts) and O(label_facts) to its Kubernetes node name, for hosts whose names differ.
    type: dict
    default: {}
  label_facts:
    description:
      - Host name to its C(gpu) fact. With it, and O(state=present), the module first labels the GPU nodes from these
        facts exactly as M(kubegpu.cluster.gpu_node_labels) does with them as its O(kubegpu.cluster.gpu_node_labels#module:nodes)
        (the same rules, plugin configs and field manager; O(accelerator_label), O(missing_nodes), O(gfd)), before the
        rollout, whose O(node_selector) needs C(nvidia.com/gpu.present). One call for both saves a module start and an API
        connection on every run.
      - The labels' result is returned as RV(labels). Remove labels with M(kubegpu.cluster.gpu_node_labels) and
        O(kubegpu.cluster.gpu_node_labels#module:state=absent), after the plugin.
    type: dict
  nfd:
    description:
      - With it, the module also deploys node feature discovery (or uses the one the cluster runs) exactly as
        M(kubegpu.cluster.node_feature_discovery) does with these options (all of that module's options except
        O(kubegpu.cluster.node_feature_discovery#module:kubeconfig) and
        O(kubegpu.cluster.node_feature_discovery#module:context), which are this module's; its
        O(kubegpu.cluster.node_feature_discovery#module:state) is this module's O(state)) - before the plugin and
        GPU feature discovery with O(state=present), after them with O(state=absent), so that nfd-master takes GFD's
        labels back first. One call for both saves a module start and an API connection on every run.
      - Checked with that module's own argument spec; its result is returned as RV(nfd).
    type: dict
  accelerator_label:
    description: With O(label_facts), the key of the label set to the product slug; an empty string sets no such label.
    type: str
    default: accelerator
  readiness_taint:
    description:
      - The readiness gate. With O(label_facts), each node that these labels make a GPU node (C(nvidia.com/gpu.present)
        set to C(true) in this run - a node that just joined, or whose GPU was just found) is tainted
        C(kubegpu.cluster/gpu-unproven=true:NoSchedule) before the plugin can advertise anything there, so that no
        workload lands on it until M(kubegpu.cluster.gpu_proof) with
        O(kubegpu.cluster.gpu_proof#module:readiness_taint=true) has passed on it and removed the taint.
      - The device plugin, GPU feature discovery and the NFD worker tolerate the taint (added to O(tolerations) and
        the NFD worker's tolerations). A node already labelled is never tainted, so a rerun changes nothing.
      - O(state=absent) with O(clear_node_marks=true) removes the taint from every node that has it.
    type: bool
    default: false
  clear_node_marks:
    description:
      - With O(state=absent), also remove what the collection left on the nodes themselves, on every node - the
        readiness taint (O(readiness_taint)) and the record of the last passed proof (annotation
        C(kubegpu.cluster/last-proof), written by M(kubegpu.cluster.gpu_proof)) - so that a bring-up after the teardown
        proves the nodes again. The device_plugin role sets it with C(device_plugin_state=absent) (the teardown of
        C(kubegpu.cluster.site)); leave it off to remove one deployment of several.
    type: bool
    default: false
  missing_nodes:
    description:
      - With O(label_facts), what to do about hosts whose nodes are not in the cluster.
      - V(fail) fails before any node is changed, naming them all. V(skip) warns and labels the others.
    type: str
    choices: [fail, skip]
    default: fail
extends_documentation_fragment:
  - kubegpu.cluster.k8s_auth
  - kubegpu.cluster.nvidia_plugin_config
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: A server-side dry run (C(dryRun=All)) tells what would change; objects in a namespace that does not exist
      yet are reported as created.
  diff_mode:
    support: full
    details: Before and after of every object that changes, without status and server-managed metadata.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details:
      - The live objects are compared before and after the server-side apply, so a second run reports every object
        V(unchanged). The pods only roll when the config changes (its hash is in the pod template).
      - With O(state=absent), a second run finds nothing of the module's left and reports no change.
  platform:
    platforms: posix
notes:
  - Changes are detected by comparing the live object before and after the apply, ignoring status, resourceVersion,
    generation, managedFields and timestamps.
seealso:
  - module: kubegpu.cluster.nvidia_runtime_config
  - name: NVIDIA k8s-device-plugin
    description: The plugin's configuration file and manifests.
    link: https://github.com/NVIDIA/k8s-device-plugin
"""

EXAMPLES = r"""
- name: Deploy the device plugin and wait until gpu-1 advertises its 4 GPUs
  kubegpu.cluster.device_plugin_deploy:
    kubeconfig: ~/.kube/config
    expected:
      gpu-1:
        nvidia.com/gpu: 4

- name: Time-slice every GPU 4 ways, advertised as nvidia.com/gpu.shared, with a RuntimeClass
  kubegpu.cluster.device_plugin_deploy:
    runtime_class: nvidia
    sharing:
      strategy: time-slicing
      replicas: 4
      rename_by_default: true

- name: MIG mixed by default, MPS (with its control daemon) on the nodes gpu-7 and gpu-8
  kubegpu.cluster.device_plugin_deploy:
    mig_strategy: mixed
    configs:
      mps4:
        mig_strategy: none
        sharing: {strategy: mps, replicas: 4}
    node_configs:
      gpu-7: mps4
      gpu-8: mps4
    facts: "{{ dict(groups['gpu_nodes'] | zip(groups['gpu_nodes'] | map('extract', hostvars, ['ansible_facts', 'gpu']))) }}"

- name: MIG mixed with GPU feature discovery, from a private registry
  kubegpu.cluster.device_plugin_deploy:
    mig_strategy: mixed
    gfd: true
    image: registry.example.com/nvidia/k8s-device-plugin:v0.20.0
    image_pull_secrets: [registry-example]

- name: Remove it again
  kubegpu.cluster.device_plugin_deploy:
    state: absent
"""

RETURN = r"""
objects:
  description: Every object considered, with its C(kind), C(name), C(namespace) and C(action) (created, updated,
    unchanged or deleted; in check mode what would happen).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "DaemonSet", "name": "nvidia-device-plugin-daemonset", "namespace": "nvidia-device-plugin",
            "action": "created"}]
configs:
  description: Every config by name (C(default) and each of O(configs)), as data.
  returned: always
  type: dict
  sample: {"default": {"version": "v1", "flags": {"migStrategy": "none"}}}
config:
  description: The rendered C(config.yaml) of the default config as data.
  returned: always
  type: dict
  sample: {"version": "v1", "flags": {"migStrategy": "none", "failOnInitError": true, "nvidiaDriverRoot": "/",
           "plugin": {"passDeviceSpecs": false, "deviceListStrategy": ["envvar"], "deviceIDStrategy": "uuid"}}}
config_hash:
  description: SHA-256 of the config file, also in the pod template annotation C(kubegpu.cluster/config-hash).
  returned: always
  type: str
  sample: 3f1c0e9a6f7d1b2c4e5a69788f0d1c2b3a4e5f60718293a4b5c6d7e8f9012345
namespace:
  description: The namespace used.
  returned: always
  type: str
  sample: nvidia-device-plugin
resources:
  description: Per node in O(expected), the C(nvidia.com/*) allocatable counts it advertises after the wait.
  returned: always
  type: dict
  sample: {"gpu-1": {"nvidia.com/gpu": 4}}
expected:
  description: What the module waits for per node, from O(expected) or worked out from O(facts); empty for O(state=absent).
  returned: always
  type: dict
  sample: {"gpu-1": {"nvidia.com/gpu": 4}}
nodes_seen:
  description:
    - Every node of the cluster as the wait for the GPUs last saw it - C(metadata.name), the annotation
      C(kubegpu.cluster/last-proof) where a node has one, and its C(nvidia.com/*) allocatable - so that the proof stage
      can tell, without listing the nodes again, whether any proof has to run (the P(kubegpu.cluster.proof_settled#filter)
      filter).
  returned: when the module waited for nodes to advertise resources
  type: list
  elements: dict
  sample: [{"metadata": {"name": "gpu-1"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}]
nfd:
  description: With O(nfd), what deploying (or removing) node feature discovery did, as M(kubegpu.cluster.node_feature_discovery) returns it.
  returned: when O(nfd) is given
  type: dict
  sample: {"changed": false, "namespace": "node-feature-discovery", "existing": null}
labels:
  description:
    - With O(label_facts), what labelling the nodes did, as M(kubegpu.cluster.gpu_node_labels) returns it (C(changed),
      C(nodes), C(summary), C(field_manager)).
  returned: when O(label_facts) is given and O(state=present)
  type: dict
  sample: {"changed": false, "summary": {"total": 5, "changed": 0, "unchanged": 5, "missing": 0}}
tainted:
  description: With O(readiness_taint) and O(label_facts), the nodes given the readiness taint (in check mode, that would be).
  returned: when O(readiness_taint) and O(label_facts) are given and O(state=present)
  type: list
  elements: str
  sample: ["gpu-7"]
untainted:
  description: With O(clear_node_marks), the nodes whose readiness taint was removed (in check mode, would be).
  returned: when O(state=absent) and O(clear_node_marks)
  type: list
  elements: str
  sample: []
proofs_forgotten:
  description:
    - With O(clear_node_marks), the nodes whose record of the last passed proof (annotation C(kubegpu.cluster/last-proof),
      written by M(kubegpu.cluster.gpu_proof)) was removed (in check mode, would be), so that a bring-up after the
      teardown proves them again.
  returned: when O(state=absent) and O(clear_node_marks)
  type: list
  elements: str
  sample: [gpu-1]
diff:
  description:
    - C(before) and C(after), each mapping C(Kind/namespace/name) to the object (null when absent).
    - With O(label_facts) and changed labels, a list - one entry per relabelled node (C(node/<name> labels)), then the
      objects' entry.
  returned: in diff mode
  type: raw
  sample: {"before": {"ConfigMap/nvidia-device-plugin/nvidia-device-plugin-config": null}, "after": {}}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.args import argument_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.client import REQUIRES
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.args import health_checks_spec, plugin_config_spec
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia.deployment import run


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=argument_spec(
            namespace=dict(type="str", default=nv.DEVICE_PLUGIN_NAMESPACE),
            version=dict(type="str", default=nv.DEVICE_PLUGIN_VERSION),
            image=dict(type="str"),
            image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
            device_list_strategy=dict(type="list", elements="str", default=list(nv.DEFAULT_DEVICE_LIST_STRATEGY),
                                      choices=list(nv.DEVICE_LIST_STRATEGIES)),
            device_id_strategy=dict(type="str", default=nv.DEFAULT_DEVICE_ID_STRATEGY, choices=list(nv.DEVICE_ID_STRATEGIES)),
            fail_on_init_error=dict(type="bool", default=True),
            nvidia_driver_root=dict(type="str", default=nv.DEFAULT_DRIVER_ROOT),
            runtime_class=dict(type="str"),
            node_selector=dict(type="dict", default=dict(nv.DEFAULT_NODE_SELECTOR)),
            deploy_labels=dict(type="bool", default=True),
            tolerations=dict(type="list", elements="dict"),
            priority_class=dict(type="str", default=nv.DEFAULT_PRIORITY_CLASS),
            max_unavailable=dict(type="raw"),
            gfd=dict(type="bool", default=False),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=nv.DEFAULT_WAIT_TIMEOUT, minimum=0),
            expected=dict(type="dict", default={}),
            facts=dict(type="dict", default={}),
            health_checks=dict(type="dict", options=health_checks_spec()),
            node_names=dict(type="dict", default={}),
            label_facts=dict(type="dict"),
            nfd=dict(type="dict"),
            accelerator_label=dict(type="str", default=nv.DEFAULT_ACCELERATOR_LABEL),
            missing_nodes=dict(type="str", default="fail", choices=["fail", "skip"]),
            readiness_taint=dict(type="bool", default=False),
            clear_node_marks=dict(type="bool", default=False),
            **plugin_config_spec()
        ),
        mutually_exclusive=[("expected", "facts")],
        supports_check_mode=True,
    )
    run_module(module, lambda: run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=REQUIRES, rules=rules)


if __name__ == "__main__":
    main()
