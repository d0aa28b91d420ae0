# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the get-pip script ansible-test downloads from a host that this machine cannot reach.

ansible-test runs it inside each fresh sanity virtualenv with pip-install arguments (``pip==24.2 ...``); it seeds pip
from the standard library's ensurepip and then installs what was asked from PyPI. `make sanity` copies it to the
cache path ansible-test looks in first (~/.ansible/test/cache/get_pip_<version>.py).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import sys


def main():
    args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)


if __name__ == "__main__":
    main()
