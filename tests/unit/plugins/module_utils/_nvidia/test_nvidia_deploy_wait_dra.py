# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin_deploy waits for allocatable only on the nodes its DaemonSet selects: a node whose device plugin
deploy label is false (moved to DRA) is left out (the demo's rerun timed out on kg-h100 before)."""

from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import deployment


class Listing(object):
    """Lists the nodes a ``key=value`` label selector picks, as the API server does; records the selectors."""

    def __init__(self, nodes):
        self.nodes, self.selectors = nodes, []

    def list(self, _api_version, _kind, label_selector=None):
        self.selectors.append(label_selector)
        key, value = label_selector.split("=")
        return [n for n in self.nodes if n["metadata"]["labels"].get(key) == value]


def node(name, value=None):
    labels = {} if value is None else {"nvidia.com/gpu.deploy.device-plugin": value}
    return {"metadata": {"name": name, "labels": labels}}


def test_nodes_whose_plugin_is_kept_off_are_not_waited_for():
    wanted = {"a": {"nvidia.com/gpu": 1}, "b": {"nvidia.com/gpu": 1}, "c": {"nvidia.com/gpu": 1}}
    listing = Listing([node("a", "true"), node("b", "false"), node("c", "paused-for-mig-change")])
    assert deployment.left_to_others(wanted, {}, listing) == {"a": {"nvidia.com/gpu": 1}, "c": {"nvidia.com/gpu": 1}}
    assert listing.selectors == ["nvidia.com/gpu.deploy.device-plugin=false"]  # only those nodes, not the fleet
    # without deploy labels the DaemonSet does not select on them: every node is waited for
    assert deployment.left_to_others(wanted, {"deploy_labels": False}, listing) == wanted
