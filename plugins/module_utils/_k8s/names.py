# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""Kubernetes' rules for names, label keys and label values (apimachinery's validation), in one place."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

LABEL_VALUE_MAX = 63
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_RE = re.compile(r"^" + _DNS_LABEL + r"$")
_DNS_SUBDOMAIN_RE = re.compile(r"^" + _DNS_LABEL + r"(\." + _DNS_LABEL + r")*$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_dns_label(value):
    """A namespace's name, for example: lower case letters, digits and ``-``, at most 63 characters."""
    return isinstance(value, str) and len(value) <= DNS_LABEL_MAX and bool(_DNS_LABEL_RE.match(value))


def is_dns_subdomain(value, max_length=DNS_SUBDOMAIN_MAX):
    """Most objects' names: DNS labels joined by dots, at most 253 characters."""
    return isinstance(value, str) and len(value) <= max_length and bool(_DNS_SUBDOMAIN_RE.match(value))


def is_valid_label_value(value):
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.match(value))


def is_valid_label_key(key):
    """Whether ``key`` is a valid label key: an optional DNS subdomain prefix and '/', then a name."""
    if not isinstance(key, str) or not key:
        return False
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or not is_dns_subdomain(prefix)):
        return False
    return len(name) <= LABEL_VALUE_MAX and bool(_LABEL_NAME_RE.match(name))
