#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: scheduler_extender
short_description: Send the pods asking for nano-gpu/gpu-percent through nano-gpu's extender, in a kubeadm kube-scheduler
version_added: 0.3.0
description:
  - On a kubeadm control-plane node, merges nano-gpu's extender entry (C(urlPrefix), C(filterVerb) filter,
    C(prioritizeVerb) priorities, C(bindVerb) bind, C(nodeCacheCapable), C(managedResources) nano-gpu/gpu-percent) into
    the kube-scheduler's KubeSchedulerConfiguration file, keeping every other setting and every other extender; an entry
    that already manages nano-gpu/gpu-percent is updated where it stands.
  - The file is the one the static pod's C(--config) names, else O(config_path). Where the pod has no C(--config), the
    module adds it to the manifest (C(/etc/kubernetes/manifests/kube-scheduler.yaml)) with a read-only hostPath mount of
    the file; it also sets an annotation with the file's SHA-256, so that the kubelet restarts the scheduler whenever
    the file changes (kube-scheduler reads it only when it starts).
  - Both files are replaced atomically with their owner and mode; their originals are kept once in O(state_dir)
    (outside the manifests directory, where the kubelet would run a copy as a second pod). O(state=absent) gives back
    the original bytes of each file that is as the module left it, and otherwise removes only what it added.
  - Refuses, before writing (in check mode too), a file that is not a KubeSchedulerConfiguration (naming the file and
    the field), every option kube-scheduler could not use (O(url_prefix), O(weight), O(http_timeout)), and an
    C(extenders) list with nano-gpu's entry merged in that kube-scheduler's own validation would refuse (kubernetes
    C(pkg/scheduler/apis/config/validation/validation.go), C(validateExtenders)) - a weight that is not positive
    where there is a C(prioritizeVerb), a managed resource that is no extended resource name or is managed twice, a
    second extender that binds - naming each field.
  - With O(wait), waits until the kubelet has started a new kube-scheduler with the change, its C(/healthz) answers
    C(ok) and still does a few seconds later. When it does not within O(wait_timeout), the module puts the previous
    configuration file and manifest back (and its own record in O(state_dir)), waits for the kubelet to run the
    scheduler on them, and fails saying what it saw and whether the scheduler is healthy again, as the
    C(container_toolkit) role does for a runtime that does not come back. With O(wait=false) nothing is checked and
    nothing is rolled back.
  - Kubespray renders the scheduler's configuration itself at every run; set its C(kube_scheduler_extenders) instead
    (the filter P(kubegpu.cluster.nano_gpu_kubespray_extenders#filter) renders the value).
author:
  - kubegpu.cluster contributors (@kubegpu)
options:
  state:
    description: V(present) adds or updates the extender; V(absent) takes it out.
    type: str
    choices: [present, absent]
    default: present
  url_prefix:
    description:
      - Where the scheduler reaches nano-gpu's extender, without the verb, such as V(http://10.96.0.50:39999/scheduler).
        The scheduler runs in the host's network, so a ClusterIP (with kube-proxy on the node) or the API server's
        service proxy; not a cluster DNS name. Required with O(state=present).
      - Refused unless it is C(http) or C(https) with a host (an IP address or a DNS name that is not a cluster
        Service name such as C(*.svc) or C(*.cluster.local)) and a port from 1 to 65535 if any, and has no credentials,
        query or fragment (kube-scheduler posts to C(<url_prefix>/<verb>)).
    type: str
  weight:
    description:
      - The extender's weight in the scores; 1 or more, as kube-scheduler wants a positive weight for an extender that
        prioritizes, and at most 92233720368547758 (kube-scheduler multiplies it by up to 100 in a 64-bit score).
    type: int
    default: 1
  http_timeout:
    description:
      - The scheduler's timeout for each call, a Go duration such as V(30s) or V(1m30s), more than zero (kube-scheduler
        takes V(0s) as its default and a negative one as no timeout at all); empty leaves kube-scheduler's default (5 s).
    type: str
  ignorable:
    description: Schedule anyway when the extender does not answer (the pods asking for nano-gpu/gpu-percent then fail to bind).
    type: bool
    default: false
  manifest:
    description: The kube-scheduler static pod manifest; an absolute path.
    type: path
    default: /etc/kubernetes/manifests/kube-scheduler.yaml
  config_path:
    description:
      - The KubeSchedulerConfiguration file to write where the pod has no C(--config) yet; defaults to
        C(/etc/kubernetes/kube-scheduler-config.yaml). Where it has one, that file is used and a different value fails.
      - An absolute path.
    type: path
  state_dir:
    description: Where the originals and the record of what was added are kept; an absolute path.
    type: path
    default: /var/lib/kubegpu/nano-gpu/scheduler
  wait:
    description:
      - After a change of the manifest, wait for the restarted scheduler (a new process, its C(/healthz) ok and still
        ok a few seconds later), and put the previous files back when it does not come.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for it (and again, after a rollback, for the scheduler on the previous files); 0 or more.
    type: int
    default: 120
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads and renders both files and returns the diff, writing nothing.
  diff_mode:
    support: full
    details: Both files before and after.
  idempotent:
    description: Whether a second run with the same options changes nothing and reports no change.
    support: full
    details: A file whose data is already as asked is not rewritten.
  platform:
    platforms: posix
requirements:
  - PyYAML on the control-plane node, and root.
notes:
  - Rewriting a file changes its layout to PyYAML's and drops its comments (the data stays); the original is kept and
    O(state=absent) gives it back byte for byte.
  - C(healthz) is asked on the scheduler's secure port (C(--secure-port), 10259) on loopback, without verifying its
    self-signed certificate.
seealso:
  - module: kubegpu.cluster.nano_gpu_host
"""

EXAMPLES = r"""
- name: Send nano-gpu's pods through its extender
  kubegpu.cluster.scheduler_extender:
    url_prefix: http://10.96.0.50:39999/scheduler
  become: true

- name: Take it out again (the original files come back)
  kubegpu.cluster.scheduler_extender:
    state: absent
  become: true
"""

RETURN = r"""
config_path:
  description: The KubeSchedulerConfiguration file.
  returned: always
  type: str
  sample: /etc/kubernetes/kube-scheduler-config.yaml
manifest:
  description: The static pod manifest.
  returned: always
  type: str
files:
  description: The files changed (or, in check mode, to change).
  returned: always
  type: list
  elements: str
restored:
  description: With O(state=absent), the files given back byte for byte from their originals (V(manifest), V(config)).
  returned: always
  type: list
  elements: str
extender:
  description: nano-gpu's entry as written.
  returned: state is present
  type: dict
  sample: {urlPrefix: "http://10.96.0.50:39999/scheduler", filterVerb: filter, prioritizeVerb: priorities, bindVerb: bind,
           weight: 1, nodeCacheCapable: true, managedResources: [{name: nano-gpu/gpu-percent, ignoredByScheduler: false}],
           ignorable: false}
healthz:
  description: The URL asked after the restart.
  returned: when it waited
  type: str
waited_s:
  description: Seconds until the new scheduler answered.
  returned: when it waited
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import run_module
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import kubeadm


def main():
    module, rules = _options.module(
        AnsibleModule,
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            url_prefix=dict(type="str"),
            weight=dict(type="int", default=1, minimum=1),
            http_timeout=dict(type="str"),
            ignorable=dict(type="bool", default=False),
            manifest=dict(type="path", default=C.SCHEDULER_MANIFEST, absolute=True),
            config_path=dict(type="path", absolute=True),
            state_dir=dict(type="path", default=C.SCHEDULER_STATE_DIR, absolute=True),
            wait=dict(type="bool", default=True),
            wait_timeout=dict(type="int", default=120, minimum=0),
        ),
        required_if=[("state", "present", ["url_prefix"])],
        supports_check_mode=True,
    )
    run_module(module, lambda: kubeadm.run(module.params, check_mode=module.check_mode, want_diff=module._diff),
               requires=(("PyYAML", kubeadm.YAML_ERROR),), rules=rules)


if __name__ == "__main__":
    main()
