# SPDX-License-Identifier: GPL-3.0-or-later
"""What a test does when a setup step it needs has not run.

`make test` runs every setup step first (node containers, a containerd 2.x binary) and sets KUBEGPU_REQUIRE_SETUP=1,
so there a missing step is a failure that names it. Run by hand without the variable, such a test skips, saying which
command provides the step.
"""

import os

import pytest

SETUP_REQUIRED = os.environ.get("KUBEGPU_REQUIRE_SETUP") == "1"


def missing_setup(reason):
    """Skip (by hand) or fail (under `make test`) a test whose setup step did not run."""
    if SETUP_REQUIRED:
        pytest.fail("setup step missing under make test: " + reason, pytrace=False)
    pytest.skip(reason)
