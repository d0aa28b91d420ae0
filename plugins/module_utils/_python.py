# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Whether the interpreter a module runs with has the Python packages the collection's roles asked for.

A facts module that runs first on a host reports it (its ``python_requirements`` option, ``python_unmet`` in its
result), so a rerun learns that the virtualenv is ready from the read it makes anyway, with no round trip of its own;
the python_env role (which checks with pip's own rules and installs) runs only where something is unmet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import re

try:
    from importlib import metadata as _metadata
except ImportError:  # Python < 3.8: nothing can be confirmed, so python_env decides
    _metadata = None

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)\s*$")

# The option as the modules declare it (the doc fragment kubegpu.cluster.python_requirements documents it).
ARG_SPEC = {"python_requirements": {"type": "list", "elements": "str", "default": []}}


def _specifier(requirement):
    """The requirement's version specifier, read by ``packaging`` (or pip's copy of it), or None."""
    for name in ("packaging.requirements", "pip._vendor.packaging.requirements"):
        try:
            parsed = importlib.import_module(name).Requirement(requirement)
        except ImportError:
            continue
        except Exception:  # pylint: disable=broad-except  # a requirement packaging cannot read is not met here
            return None
        return parsed.specifier
    return None


def met(requirement, version_of=None):
    """Whether this interpreter has ``requirement`` (a pip requirement). An exact pin (``name==version``) is compared
    with the installed version as it is; any other requirement needs ``packaging``. What cannot be confirmed counts as
    not met, so that the python_env role decides with pip's rules."""
    version_of = version_of or (_metadata.version if _metadata else None)
    name = _NAME.match(requirement or "")
    if not name or version_of is None:
        return False
    try:
        have = version_of(name.group(1))
    except Exception:  # pylint: disable=broad-except  # PackageNotFoundError, or metadata that cannot be read
        return False
    pin = _PIN.match(requirement)
    if pin:
        return have == pin.group(2)
    specifier = _specifier(requirement)
    return specifier is not None and specifier.contains(have, prereleases=True)


def unmet(requirements, version_of=None):
    """The requirements this interpreter does not have, in order."""
    return [r for r in requirements or [] if not met(r, version_of)]
