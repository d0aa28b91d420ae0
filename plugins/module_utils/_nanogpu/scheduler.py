# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Note that this module util is **PRIVATE** to the collection. It can have breaking changes at any time.
"""The kube-scheduler's side of nano-gpu: the ``extenders`` entry of a KubeSchedulerConfiguration (v1) that sends
the pods asking for ``nano-gpu/gpu-percent`` through nano-gpu's scheduler extender. The one place that renders it:
the kubeadm static-pod scheduler, the Kubespray variable and the sandbox's own kube-scheduler all use it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

try:
    from urllib.parse import urlsplit
except ImportError:  # Python 2, never the managed hosts of this collection
    from urlparse import urlsplit  # type: ignore

from ansible_collections.kubegpu.cluster.plugins.module_utils._errors import OptionError
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s.names import is_dns_subdomain, is_valid_label_key
from ansible_collections.kubegpu.cluster.plugins.module_utils._nanogpu import constants as C

# The largest weight kube-scheduler can add up: an extender's scores (0 to extenderv1.MaxExtenderPriority, 10) are
# multiplied by its weight and then by MaxNodeScore / MaxExtenderPriority (10), in int64 (kubernetes
# pkg/scheduler/schedule_one.go, prioritizeNodes). kube-scheduler's own validation asks only for a positive weight.
MAX_WEIGHT = (2 ** 63 - 1) // 100
# Go's time.ParseDuration, which reads metav1.Duration (httpTimeout): a sequence of decimal numbers with a unit each.
_GO_DURATION = re.compile(r"^([0-9]*(\.[0-9]*)?(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+$")
_UNIT_NS = {"ns": 1, "us": 1e3, u"\u00b5s": 1e3, u"\u03bcs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
# Service names resolve only through the cluster's DNS, which a kube-scheduler on the host network does not use
# (a static pod with hostNetwork and the default dnsPolicy gets the node's resolv.conf).
_CLUSTER_DNS = re.compile(r"(^|\.)svc(\.|$)|\.cluster\.local\.?$")


def duration_seconds(text):
    """Seconds of a Go duration string (``30s``, ``1m30s``, ``500ms``), or None when Go would not parse it."""
    text = str(text).strip()
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or not _GO_DURATION.match(body):
        return None
    total = 0.0
    for number, _fraction, unit in re.findall(r"([0-9]*(\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)", body):
        if number in ("", "."):
            return None
        total += float(number) * _UNIT_NS[unit]
    return sign * total / 1e9


def check_url_prefix(url_prefix, option="url_prefix"):
    """Refuse a URL kube-scheduler cannot call (it posts to ``<urlPrefix>/<verb>``, pkg/scheduler/extender.go)."""
    text = str(url_prefix or "")
    if not text.strip():
        raise OptionError(option, "is empty; give the extender's http://HOST:PORT/scheduler")
    if text != text.strip() or any(c.isspace() for c in text):
        raise OptionError(option, "%r has whitespace in it" % text)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise OptionError(option, "%r: the scheme must be http or https (kube-scheduler posts to <urlPrefix>/<verb>), "
                                  "not %r" % (text, parts.scheme or "none"))
    if parts.username is not None or parts.password is not None:
        raise OptionError(option, "%r carries credentials, which would be written in clear into the scheduler's "
                                  "configuration; kube-scheduler has tlsConfig for an extender that wants them" % text)
    if parts.query or parts.fragment:
        raise OptionError(option, "%r has a query or fragment; kube-scheduler appends /<verb> to the prefix" % text)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise OptionError(option, "%r: the port is not a number from 1 to 65535" % text)
    if not host:
        raise OptionError(option, "%r has no host" % text)
    if ":" in host or re.match(r"^[0-9.]+$", host):
        try:
            ipaddress.ip_address(u"%s" % host)
        except ValueError:
            raise OptionError(option, "%r: %r is not an IP address" % (text, host))
    elif not is_dns_subdomain(host.rstrip(".")):
        raise OptionError(option, "%r: %r is neither an IP address nor a DNS name" % (text, host))
    elif _CLUSTER_DNS.search(host):
        raise OptionError(option, "%r names a Service through the cluster's DNS, which the kube-scheduler (a static "
                                  "pod on the host network) does not use; give the Service's cluster IP" % text)
    return text


def check_weight(weight, option="weight"):
    """kube-scheduler refuses an extender with a prioritizeVerb and a weight that is not positive (kubernetes
    pkg/scheduler/apis/config/validation/validation.go, validateExtenders: "must have a positive weight applied to
    it"); above :data:`MAX_WEIGHT` its scores overflow."""
    if isinstance(weight, bool) or not re.match(r"^\s*-?[0-9]+\s*$", str(weight)):
        raise OptionError(option, "must be a whole number, not %r" % (weight,))
    value = int(weight)
    if value < 1 or value > MAX_WEIGHT:
        raise OptionError(option, "must be 1 or more (kube-scheduler refuses a weight that is not positive for an "
                                  "extender that prioritizes) and at most %d (its scores overflow above), not %d"
                                  % (MAX_WEIGHT, value))
    return value


def check_http_timeout(http_timeout, option="http_timeout"):
    """A Go duration (metav1.Duration) above zero: kube-scheduler takes 0 as its default (5 s) and a negative one as
    no timeout at all, so an extender that does not answer would hold every pod that asks for the resource
    (pkg/scheduler/extender.go, NewHTTPExtender; net/http's Client.Timeout)."""
    seconds = duration_seconds(http_timeout)
    if seconds is None:
        raise OptionError(option, "%r is not a duration as kube-scheduler reads one (Go's: 30s, 1m30s, 500ms)"
                          % (http_timeout,))
    if seconds <= 0:
        raise OptionError(option, "%r: must be more than 0 (kube-scheduler takes 0 as its default, 5s, and a negative "
                                  "one as no timeout at all); leave it empty for the default" % (http_timeout,))
    return str(http_timeout).strip()


def extender_entry(url_prefix, weight=1, http_timeout=None, ignorable=False):
    """The ``extenders`` item for nano-gpu's extender at ``url_prefix`` (``http://host:port/<path>``, without the
    verb). ``nodeCacheCapable``: the extender keeps its own view of the nodes, so the scheduler sends node names only.
    ``managedResources``: the scheduler calls the extender only for pods that ask for the resource, and its own
    resource fit does not count the resource (``ignoredByScheduler``: the extender decides which GPU fits).
    Every value is checked first (:func:`check_url_prefix`, :func:`check_weight`, :func:`check_http_timeout`), naming
    the option."""
    entry = {
        "urlPrefix": check_url_prefix(url_prefix).rstrip("/"),
        "filterVerb": C.FILTER_VERB,
        "prioritizeVerb": C.PRIORITIZE_VERB,
        "bindVerb": C.BIND_VERB,
        "weight": check_weight(weight),
        "nodeCacheCapable": True,
        "managedResources": [{"name": C.RESOURCE_NAME, "ignoredByScheduler": False}],
        "ignorable": bool(ignorable),
    }
    if http_timeout:
        entry["httpTimeout"] = check_http_timeout(http_timeout)
    return entry


def is_extended_resource_name(name):
    """kube-scheduler's validateExtendedResourceName: a qualified name (an optional DNS subdomain prefix and a name,
    as a label key) that is an extended resource (kubernetes pkg/apis/core/v1/helper, IsExtendedResourceName: it has a
    prefix outside ``kubernetes.io/``, and ``requests.<name>`` is a qualified name too)."""
    if not is_valid_label_key(name) or "/" not in name:
        return False
    prefix = name.split("/", 1)[0]
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or name.startswith("requests."):
        return False
    return is_valid_label_key("requests." + name)


def extender_problems(extenders, where="extenders"):
    """What kube-scheduler's own validation refuses in an ``extenders`` list (kubernetes
    pkg/scheduler/apis/config/validation/validation.go, validateExtenders), one sentence each naming the field:
    a weight that is not positive where there is a prioritizeVerb, a managed resource name that is not an extended
    resource name or is managed twice, more than one extender that binds; and what its decoder refuses (a urlPrefix
    that is not a string, an httpTimeout that is no duration)."""
    problems, managed, binders = [], {}, []
    for index, item in enumerate(extenders or []):
        path = "%s[%d]" % (where, index)
        if not isinstance(item, dict):
            problems.append("%s: is not a mapping" % path)
            continue
        if not isinstance(item.get("urlPrefix"), str) or not item.get("urlPrefix"):
            problems.append("%s.urlPrefix: is missing" % path)
        weight = item.get("weight", 0)
        if item.get("prioritizeVerb") and (isinstance(weight, bool) or not isinstance(weight, int) or weight <= 0):
            problems.append("%s.weight: %r; an extender with a prioritizeVerb must have a positive weight" % (path, weight))
        if item.get("httpTimeout") not in (None, "") and duration_seconds(item["httpTimeout"]) is None:
            problems.append("%s.httpTimeout: %r is not a duration" % (path, item["httpTimeout"]))
        if item.get("bindVerb"):
            binders.append(path)
        for number, resource in enumerate(item.get("managedResources") or []):
            name = resource.get("name") if isinstance(resource, dict) else None
            field = "%s.managedResources[%d].name" % (path, number)
            if not isinstance(name, str) or not is_extended_resource_name(name):
                problems.append("%s: %r is not an extended resource name (a domain prefix outside kubernetes.io, "
                                "then a name)" % (field, name))
            elif name in managed:
                problems.append("%s: %s is managed by %s already; kube-scheduler refuses a resource managed twice"
                                % (field, name, managed[name]))
            else:
                managed[name] = path
    if len(binders) > 1:
        problems.append("%s: %s implement bind; kube-scheduler takes only one extender that binds"
                        % (where, " and ".join(binders)))
    return problems
