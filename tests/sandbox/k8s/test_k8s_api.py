# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox API server is a real one: it accepts real objects and refuses invalid ones."""

import copy
import json
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml
from kubernetes.client.rest import ApiException

from sandbox.k8s import cluster
from k8s_helpers import gpu_pod, plugin_daemonset


def test_kubeconfig_uses_absolute_paths_and_works_with_kubectl(sandbox):
    with open(sandbox.kubeconfig, encoding="utf-8") as handle:
        kubeconfig = yaml.safe_load(handle)
    cluster = kubeconfig["clusters"][0]["cluster"]
    user = kubeconfig["users"][0]["user"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    for path in (cluster["certificate-authority"], user["client-certificate"], user["client-key"]):
        assert path.startswith("/"), path
    out = subprocess.run(["kubectl", "--kubeconfig", sandbox.kubeconfig, "get", "--raw", "/readyz"],
                         check=True, capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "ok"


def test_server_runs_the_pinned_version(sandbox):
    from kubernetes import client  # pylint: disable=import-outside-toplevel
    info = client.VersionApi(sandbox.api_client).get_code()
    assert info.git_version == "v" + sandbox.kube_version


def test_accepts_a_device_plugin_daemonset_configmap_and_job(sandbox, namespace):
    sandbox.core.create_namespaced_config_map(namespace, {"metadata": {"name": "dp-config"},
                                                          "data": {"config.yaml": "version: v1\n"}})
    ds = plugin_daemonset("nvidia-device-plugin-daemonset", {"sandbox.kubegpu.io/nowhere": "true"}, configmap="dp-config")
    created = sandbox.apps.create_namespaced_daemon_set(namespace, ds, field_validation="Strict")
    assert created.metadata.uid
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "vectoradd"},
           "spec": {"suspend": True, "template": {"spec": gpu_pod("x", 1)["spec"]}}}
    assert sandbox.batch.create_namespaced_job(namespace, job, field_validation="Strict").metadata.uid


def _rejected(call, *args, **kwargs):
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def test_rejects_daemonset_whose_selector_does_not_match_its_template(sandbox, namespace):
    ds = plugin_daemonset("bad-selector", {})
    ds["spec"]["selector"] = {"matchLabels": {"name": "something-else"}}
    exc = _rejected(sandbox.apps.create_namespaced_daemon_set, namespace, ds)
    assert exc.status == 422
    assert "selector` does not match template `labels`" in exc.body


def _raw_post(sandbox, path, body):
    """POST JSON straight to the API server (the Python client would refuse unknown fields itself)."""
    request = urllib.request.Request(sandbox.state["server"] + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=cluster.client_context(sandbox.layout), timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_rejects_daemonset_with_an_unknown_field(sandbox, namespace):
    ds = plugin_daemonset("unknown-field", {})
    ds["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    status, body = _raw_post(sandbox, "/apis/apps/v1/namespaces/%s/daemonsets?fieldValidation=Strict" % namespace, ds)
    assert status == 400, body
    assert 'unknown field "spec.template.spec.containers[0].gpus"' in json.loads(body)["message"]


@pytest.mark.parametrize("resources, message", [
    ({"limits": {"nvidia.com/gpu": "0.5"}}, "must be an integer"),
    ({"requests": {"nvidia.com/gpu": "1"}}, "Limit must be set for non overcommitable resources"),
    ({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}, "must be equal to nvidia.com/gpu limit"),
])
def test_rejects_invalid_gpu_requests(sandbox, namespace, resources, message):
    pod = copy.deepcopy(gpu_pod("bad-gpu", 1))
    pod["spec"]["containers"][0]["resources"] = resources
    exc = _rejected(sandbox.core.create_namespaced_pod, namespace, pod)
    assert exc.status == 422
    assert message in exc.body
