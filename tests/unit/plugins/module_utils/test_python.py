# SPDX-License-Identifier: GPL-3.0-or-later
"""What a facts module reports of its interpreter's packages (python_requirements -> python_unmet)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from importlib import metadata

from ansible_collections.kubegpu.cluster.plugins.module_utils import _python

INSTALLED = {"nvidia-ml-py": "13.615.71", "tomlkit": "0.15.2"}


def version_of(name):
    try:
        return INSTALLED[name]
    except KeyError:
        raise metadata.PackageNotFoundError(name)


def test_exact_pins_are_compared_as_they_are():
    assert _python.unmet(["nvidia-ml-py==13.615.71", "tomlkit==0.13.3"], version_of) == ["tomlkit==0.13.3"]


def test_a_missing_package_and_an_unreadable_line_are_unmet():
    assert _python.unmet(["kubernetes==37.0.2", "", "==1.0"], version_of) == ["kubernetes==37.0.2", "", "==1.0"]


def test_ranges_are_read_by_packaging():
    assert _python.unmet(["nvidia-ml-py>=12", "tomlkit<0.14", "tomlkit>=0.13,!=0.15.2"], version_of) == [
        "tomlkit<0.14", "tomlkit>=0.13,!=0.15.2"]


def test_this_interpreters_own_packages():
    have = metadata.version("PyYAML")
    assert _python.unmet(["PyYAML==%s" % have, "pyyaml>=1", "no-such-package-kubegpu==1.0"]) == ["no-such-package-kubegpu==1.0"]


def test_nothing_asked_nothing_unmet():
    assert _python.unmet([]) == [] and _python.unmet(None) == []
