# SPDX-License-Identifier: GPL-3.0-or-later
"""Backups of the runtime tests go to a directory of each test's own, never the host's /var/backups/kubegpu."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.kubegpu.cluster.plugins.module_utils import _files


@pytest.fixture(autouse=True)
def backup_dir(tmp_path_factory, monkeypatch):
    """The default backup directory, redirected for the test (the module's default reads the same constant)."""
    directory = str(tmp_path_factory.mktemp("backups"))
    monkeypatch.setattr(_files, "BACKUP_DIR", directory)
    return directory
