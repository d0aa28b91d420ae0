# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: python_env_plan
short_description: What the python_env role makes sure of in a virtualenv, and the one command that checks it
version_added: 0.2.0
author:
  - kubegpu.cluster contributors (@kubegpu)
description:
  - Resolves the requirements a caller of the R(kubegpu.cluster.python_env,ansible_collections.kubegpu.cluster.python_env_role)
    role asks for (bare names get the version pinned in the collection's C(requirements.txt)), adds the collection's own
    host packages that neither the caller nor an earlier call of the same run named, and writes the shell command that
    checks them on the host in one round trip.
  - Used by the python_env role, where the same work written as nested Jinja cost more controller time than the check
    itself on every host; rarely useful on its own.
options:
  _input:
    description: The requirements asked for (C(python_env_packages)).
    type: list
    elements: str
    required: true
  requirements:
    description: The lines of the collection's C(requirements.txt) (comments and blank lines are ignored).
    type: list
    elements: str
    required: true
  collection_packages:
    description: The package names the collection's modules need on every managed host.
    type: list
    elements: str
    default: []
  prepared:
    description: The requirements an earlier call of this run made sure of in the same virtualenv.
    type: list
    elements: str
    default: []
  venv:
    description: Path of the virtualenv; without it (or O(check_script)) the plan has no RV(_value.command).
    type: str
  check_script:
    description: The Python script the command falls back on (prints the requirements not met, as JSON).
    type: str
"""

EXAMPLES = r"""
- name: Check a virtualenv
  ansible.builtin.raw: "{{ plan['command'] }}"
  vars:
    plan: >-
      {{ ['nvidia-ml-py'] | kubegpu.cluster.python_env_plan(requirements=lookup('ansible.builtin.file', 'requirements.txt').splitlines(),
         venv='/opt/kubegpu/venv', check_script=script) }}
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    wanted:
      description: The requirements this call makes sure of, in order, each once.
      type: list
      elements: str
      sample: [nvidia-ml-py==13.615.71, tomlkit==0.13.3]
    command:
      description:
        - The check, one shell command that prints the requirements not met as JSON (C([]) when all are met) and
          fails without the virtualenv.
        - Where every requirement is an exact pin, it starts the virtualenv's python and looks for each pin's
          C(dist-info) directory as pip names it (C(nvidia_ml_py-13.615.71.dist-info)), reading no package metadata;
          otherwise the check script decides.
        - Only with O(venv) and O(check_script); the roles that only want the pins leave them out.
      type: str
"""

import re
import shlex

_NAME = re.compile(r"^[A-Za-z0-9._-]+")
_PIN = re.compile(r"^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$")


def _name(requirement):
    match = _NAME.match(requirement)
    return match.group(0).lower() if match else requirement.lower()


def python_env_plan(packages, requirements, venv=None, check_script=None, collection_packages=(), prepared=()):
    """See DOCUMENTATION."""
    pinned = {}
    for line in requirements:
        line = line.strip()
        if line and not line.startswith("#"):
            pinned[_name(line)] = line
    asked = [pinned.get(p.lower(), p) for p in packages]  # a bare name gets its pin; a requirement stays as it is
    asked_names = set(_name(r) for r in asked)
    prepared_names = set(_name(r) for r in prepared)
    wanted = list(asked)
    for package in collection_packages:
        name = package.lower()
        if name not in asked_names and name not in prepared_names:
            wanted.append(pinned[name])
    wanted = list(dict.fromkeys(wanted))
    if not venv or not check_script:
        return {"wanted": wanted}
    pins = [r for r in wanted if _PIN.match(r)]
    quoted = " ".join(shlex.quote(r) for r in wanted)
    fallback = '"$V/bin/python" -I -c %s %s' % (shlex.quote(check_script), quoted)
    command = "V=%s; set -- \"$V\"/lib/python3*/site-packages; " % shlex.quote(venv)
    if len(pins) == len(wanted):
        dist_infos = ["%s-%s.dist-info" % (re.sub(r"[-_.]+", "_", _name(p)), p.split("==", 1)[1]) for p in pins]
        tests = "".join(' && test -d "$1"/%s' % shlex.quote(d) for d in dist_infos)
        command += 'if "$V/bin/python" -I -S -c "" 2>/dev/null%s; then echo "[]"; else %s; fi' % (tests, fallback)
    else:
        command += fallback
    return {"wanted": wanted, "command": command}


class FilterModule(object):
    def filters(self):
        return {"python_env_plan": python_env_plan}
