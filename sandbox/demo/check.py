# SPDX-License-Identifier: GPL-3.0-or-later
"""What `make demo` reports per fleet node beside the bring-up's own results, read from the cluster and the fleet.

``python -m sandbox.demo.check --kubeconfig .sandbox/kubeconfig [--fleet sandbox/fleet.yml]`` prints one JSON object,
per fleet node:

* ``kind``: ``kubelet`` (a real kubelet registered it: no kwok annotation, sandbox/kubelet) or ``kwok`` (kwok plays its
  kubelet, sandbox/k8s); ``kubelet_healthz``: what the node's kubelet answers to ``/healthz`` through the API server's
  node proxy (kubelet nodes only).
* ``plugin``: NVIDIA's device plugin pod on the node (its container ``nvidia-device-plugin-ctr``): name, phase, and
  what its log says it registered with the kubelet (``Registered device plugin for '<resource>' with Kubelet``) -
  read through the kubelet; a kwok pod has no log.
* ``pods``: every pod bound to the node, and those of them neither Running nor Succeeded (with the reason the
  kubelet gives), so the report shows what did not start.
* ``proof_expect``: what the GPU proof must do on this node, computed from two facts, each read from its one place:
  the CUDA version of the node's driver (its profile, ``cuda_driver_version``) and the CUDA version of the proof
  image's tag (``PROOF_IMAGE`` in plugins/module_utils/_nvidia/constants.py), with CUDA's rule as the proof stand-in
  applies it (sandbox/proof/vectoradd.c ``oldest_driver_for``: since CUDA 11 a driver of the image's CUDA major
  release, before that a driver of at least the image's CUDA version;
  https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html). ``expect`` is ``pass``,
  ``fail`` (with ``message``, CUDA's error) or null (no NVIDIA profile: nothing for this rule to say).
* ``simulator_status_patches``: how many times the device-manager simulator's log says it patched the node's status
  (capacity/allocatable: ``node <name>: ... patching status``); on a kubelet node it must be 0, every resource there is
  the kubelet's. The log is the sandbox's (``<kubeconfig's directory>/k8s/logs/devsim.log``, or ``--devsim-log``).
* ``dra``: the devices NVIDIA's DRA driver (``gpu.nvidia.com``) publishes for the node in ResourceSlices (name,
  product, UUID), as ``kubectl get resourceslices`` lists them; empty where the node is not on DRA.
* ``labels_simulated``: whether GFD's and NFD's labels on the node come from the device-manager simulator (every kwok
  node, and kubelet nodes carrying ``sandbox.kubegpu.io/simulated``; sandbox/kubelet/README.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONSTANTS = ROOT / "plugins" / "module_utils" / "_nvidia" / "constants.py"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SIMULATED_ANNOTATION = "sandbox.kubegpu.io/simulated"  # sandbox/kubelet/cluster.py
PLUGIN_CONTAINER = "nvidia-device-plugin-ctr"  # _nvidia/manifests.py
REGISTERED = re.compile(r"Registered device plugin for '([^']+)' with Kubelet")
# CUDA's error (cudaErrorInsufficientDriver), as the proof stand-in and NVIDIA's vectorAdd print it
INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"
# sandbox/proof/rules.mk reads the CUDA version from the tag the same way
IMAGE_CUDA = re.compile(r"[-:]vectoradd-cuda([0-9]+)\.([0-9]+)[0-9.]*$")


def proof_image(path=CONSTANTS) -> str:
    """PROOF_IMAGE, from the collection's NVIDIA constants (loaded by path: the sandbox does not import the
    collection as a package)."""
    spec = importlib.util.spec_from_file_location("kubegpu_demo_nvidia_constants", str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PROOF_IMAGE


def cuda_int(major: int, minor: int) -> int:
    """CUDA's integer form: 12.5 -> 12050."""
    return 1000 * major + 10 * minor


def cuda_text(value: int) -> str:
    return "%d.%d" % (value // 1000, value % 1000 // 10)


def oldest_driver_for(built: int) -> int:
    """The oldest driver CUDA version that runs an application built with CUDA ``built`` (vectoradd.c's rule)."""
    return built // 1000 * 1000 if built >= 11000 else built


def expectation(profile: dict | None, image: str) -> dict:
    """What the proof must do on a node with ``profile`` (a GPU profile's JSON, or None)."""
    match = IMAGE_CUDA.search(image)
    if not match:
        raise ValueError("no CUDA version in the proof image's tag: %s" % image)
    built = cuda_int(int(match.group(1)), int(match.group(2)))
    driver = (profile or {}).get("cuda_driver_version")
    if not driver or (profile or {}).get("vendor", "nvidia") != "nvidia":
        return {"expect": None, "image": image, "image_cuda": cuda_text(built), "why": "no NVIDIA driver in the profile"}
    needs = oldest_driver_for(built)
    ok = int(driver) >= needs
    why = "driver CUDA %s %s CUDA %s, which the image's CUDA %s needs" % (
        cuda_text(int(driver)), ">=" if ok else "<", cuda_text(needs), cuda_text(built))
    out = {"expect": "pass" if ok else "fail", "driver_cuda": cuda_text(int(driver)), "image": image,
           "image_cuda": cuda_text(built), "needs": cuda_text(needs), "why": why}
    if not ok:
        out["message"] = INSUFFICIENT
    return out


def _profile(node: dict, profiles: Path):
    name = node.get("profile")
    if not name:
        return None
    with open(profiles / (name + ".json"), encoding="utf-8") as handle:
        return json.load(handle)


def _waiting_reason(pod) -> str:
    for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        state = status.state
        if state and state.waiting and state.waiting.reason:
            return "%s: %s" % (status.name, state.waiting.reason)
        if state and state.terminated and state.terminated.exit_code:
            return "%s: exit %s" % (status.name, state.terminated.exit_code)
    return pod.status.reason or pod.status.phase or "unknown"


def status_patches(log_text: str, name: str) -> int:
    """The simulator's status patches of node ``name`` in its log (watcher.py, nanogpu.py, vendors.py log each)."""
    return len(re.findall(r"^.*\bnode %s: .*patching status" % re.escape(name), log_text, re.M))


DRA_DRIVER = "gpu.nvidia.com"  # plugins/module_utils/_nvidia/constants.py DRA_DRIVER_NAME (tests/sandbox/unit hold it)


def dra_devices(slices: list, name: str) -> list:
    """``[{name, product, uuid, slice}]`` NVIDIA's DRA driver publishes for node ``name`` (ResourceSlices as dicts)."""
    out = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRA_DRIVER or spec.get("nodeName") != name:
            continue
        for device in spec.get("devices") or []:
            attrs = device.get("attributes") or {}
            out.append({"name": device.get("name"), "slice": item["metadata"]["name"],
                        "product": (attrs.get("productName") or {}).get("string"),
                        "uuid": (attrs.get("uuid") or {}).get("string")})
    return sorted(out, key=lambda d: d["name"] or "")


def node_report(core, name: str, profile, image: str, devsim_log: str = "", slices: list | None = None) -> dict:
    from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel
    out = {"kind": None, "kubelet_healthz": None, "plugin": None, "pods": {}, "not_running": {},
           "dra": dra_devices(slices or [], name),
           "proof_expect": expectation(profile, image), "labels_simulated": None,
           "simulator_status_patches": status_patches(devsim_log, name)}
    try:
        node = core.read_node(name)
    except ApiException as exc:
        out["kind"] = "missing (%s)" % exc.status
        return out
    annotations = node.metadata.annotations or {}
    kwok = annotations.get(KWOK_ANNOTATION) == "fake"
    out["kind"] = "kwok" if kwok else "kubelet"
    out["labels_simulated"] = kwok or SIMULATED_ANNOTATION in annotations
    if not kwok:
        try:
            out["kubelet_healthz"] = core.connect_get_node_proxy_with_path(name, "healthz", _request_timeout=15)
        except ApiException as exc:
            out["kubelet_healthz"] = "error %s: %s" % (exc.status, exc.reason)
    pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % name).items
    for pod in sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name)):
        if pod.metadata.deletion_timestamp:
            continue
        key = "%s/%s" % (pod.metadata.namespace, pod.metadata.name)
        out["pods"][key] = pod.status.phase
        if pod.status.phase not in ("Running", "Succeeded"):
            out["not_running"][key] = _waiting_reason(pod)
        names = [c.name for c in pod.spec.containers]
        if PLUGIN_CONTAINER in names:
            plugin = {"pod": key, "phase": pod.status.phase, "registered": [], "log": None}
            if not kwok:
                try:
                    log = core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace,
                                                       container=PLUGIN_CONTAINER, _request_timeout=15)
                    plugin["registered"] = sorted(set(REGISTERED.findall(log or "")))
                    plugin["log"] = len((log or "").splitlines())
                except ApiException as exc:
                    plugin["log"] = "error %s: %s" % (exc.status, exc.reason)
            out["plugin"] = plugin
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.demo.check", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--fleet", default=str(ROOT / "sandbox" / "fleet.yml"))
    parser.add_argument("--profiles", default=str(ROOT / "sandbox" / "profiles"))
    parser.add_argument("--constants", default=str(CONSTANTS))
    parser.add_argument("--devsim-log", help="the device-manager simulator's log (default: the sandbox's beside the "
                                             "kubeconfig, <its directory>/k8s/logs/devsim.log)")
    args = parser.parse_args(argv)
    log_path = Path(args.devsim_log) if args.devsim_log else Path(args.kubeconfig).parent / "k8s" / "logs" / "devsim.log"
    devsim_log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    api_client = config.new_client_from_config(config_file=args.kubeconfig)
    core = client.CoreV1Api(api_client)
    slices = api_client.sanitize_for_serialization(client.ResourceV1Api(api_client).list_resource_slice().items)
    with open(args.fleet, encoding="utf-8") as handle:
        fleet = (yaml.safe_load(handle) or {}).get("nodes") or []
    image = proof_image(Path(args.constants))
    report = {n["name"]: node_report(core, n["name"], _profile(n, Path(args.profiles)), image, devsim_log, slices)
              for n in fleet}
    print(json.dumps(report, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
