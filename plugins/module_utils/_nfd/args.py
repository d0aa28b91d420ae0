# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The options of ``node_feature_discovery`` (besides the connection's), written once: that module's argument spec,
and what ``device_plugin_deploy`` checks its ``nfd`` option against."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.kubegpu.cluster.plugins.module_utils import _options
from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import constants as nfd
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.manifests import PCI_LABEL_FIELDS

NFD_OPTIONS = dict(
    namespace=dict(type="str", default=nfd.NAMESPACE),
    version=dict(type="str", default=nfd.NFD_VERSION),
    image=dict(type="str"),
    image_pull_secrets=dict(type="list", elements="str", default=[], no_log=False),  # names, not secrets
    extra_label_ns=dict(type="list", elements="str"),
    pci_device_classes=dict(type="list", elements="str"),
    pci_label_fields=dict(type="list", elements="str", choices=list(PCI_LABEL_FIELDS)),
    worker_tolerations=dict(type="list", elements="dict"),
    worker_node_selector=dict(type="dict", default={}),
    master_tolerations=dict(type="list", elements="dict"),
    priority_class=dict(type="str", default=""),
    use_existing=dict(type="bool", default=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=nfd.DEFAULT_WAIT_TIMEOUT, minimum=0),
)


def validated(options, option="nfd"):
    """``options`` checked and completed with :data:`NFD_OPTIONS`, as the module's own argument spec would; raises
    :class:`OptionError` naming ``option`` and every problem."""
    spec, rules = _options.split(NFD_OPTIONS)
    result = ArgumentSpecValidator(spec).validate(dict(options or {}))
    problems = result.error_messages or _options.errors(result.validated_parameters, rules)
    if problems:
        raise OptionError(option, "; ".join(problems))
    return result.validated_parameters
