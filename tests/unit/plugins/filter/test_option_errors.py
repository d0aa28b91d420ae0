# SPDX-License-Identifier: GPL-3.0-or-later
"""The option_errors filter: the modules' rules (plugins/module_utils/_options.py) over role variables."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.cluster.plugins.filter.option_errors import option_errors

RULES = {"device_plugin_wait_timeout": {"minimum": 0}, "device_plugin_kubeconfig": {"absolute": True}}


def test_the_defaults_and_empty_values_pass():
    assert option_errors({"device_plugin_wait_timeout": 300, "device_plugin_kubeconfig": ""}, RULES) == []
    assert option_errors({"device_plugin_wait_timeout": "0", "device_plugin_kubeconfig": "~/.kube/config"}, RULES) == []


def test_each_bad_value_is_named():
    assert option_errors({"device_plugin_wait_timeout": "-3", "device_plugin_kubeconfig": "kubeconfig"}, RULES) == [
        "device_plugin_kubeconfig: must be an absolute path (or start with ~), not 'kubeconfig': the module runs on the "
        "managed host, in a working directory nobody chose",
        "device_plugin_wait_timeout: must be 0 or more, not -3"]


def test_an_unknown_rule_or_a_wrong_input_is_an_error():
    with pytest.raises(AnsibleFilterError, match="unknown rule maximum"):
        option_errors({}, {"a": {"maximum": 3}})
    with pytest.raises(AnsibleFilterError, match="takes a dict of values and a dict of rules"):
        option_errors([], RULES)
