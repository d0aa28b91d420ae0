# SPDX-License-Identifier: GPL-3.0-or-later
"""node_feature_discovery's options, checked the same way as that module's and as device_plugin_deploy's nfd option."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd import constants
from ansible_collections.kubegpu.cluster.plugins.module_utils._nfd.args import validated


def test_defaults_are_the_modules():
    params = validated({})
    assert params["namespace"] == constants.NAMESPACE and params["version"] == constants.NFD_VERSION
    assert params["use_existing"] is True and params["state"] == "present" and params["image_pull_secrets"] == []


def test_values_are_converted_as_the_module_converts_them():
    assert validated({"wait_timeout": "30", "use_existing": "no"})["wait_timeout"] == 30
    assert validated({"use_existing": "no"})["use_existing"] is False


@pytest.mark.parametrize("options, words", [
    ({"pci_label_fields": ["colour"]}, "pci_label_fields"),
    ({"no_such_option": 1}, "no_such_option"),
    ({"wait_timeout": "soon"}, "wait_timeout"),
])
def test_a_bad_option_names_the_option_it_came_in_and_the_field(options, words):
    with pytest.raises(OptionError) as failed:
        validated(options)
    assert str(failed.value).startswith("nfd: ") and words in str(failed.value)
