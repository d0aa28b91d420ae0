# SPDX-License-Identifier: GPL-3.0-or-later
"""Show a pod scheduled through nano-gpu's extender: create a pod asking ``nano-gpu/gpu-percent``, watch (bounded)
until it is bound or the scheduler gives up on it, and report where it went and what the extender wrote.

``python -m sandbox.nanogpu.demo --kubeconfig .sandbox/kubeconfig [--percent 20] [--namespace default] [--keep]``
prints one JSON object (``bound``, ``node``, ``gpu``, ``annotations``, ``reason``) and exits 0 when the pod was bound
through the extender (its annotations are there), 1 otherwise. :func:`schedule_share` does the same from Python
(the integration test uses it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from . import C

CONTAINER = "cuda"


def share_pod(name: str, percent: int) -> dict:
    """A pod of one container asking ``percent`` of a GPU (upstream README's example, a sleeping CUDA container)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "nano-gpu-demo"}},
            "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": CONTAINER, "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                                     "command": ["sleep", "infinity"],
                                     "resources": {"limits": {C.RESOURCE_NAME: str(percent)}}}]}}


def _scheduling_reason(core, namespace: str, name: str) -> str | None:
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=%s,reason=FailedScheduling" % name)
    messages = [e.message for e in sorted(events.items, key=lambda e: str(e.last_timestamp or e.event_time or ""))]
    return messages[-1] if messages else None


def report(pod, reason=None) -> dict:
    annotations = dict(pod.metadata.annotations or {})
    ours = dict((k, v) for k, v in annotations.items() if k.startswith("nano-gpu/"))
    gpu = ours.get(C.ANNOTATION_CONTAINER % CONTAINER)
    return {"pod": "%s/%s" % (pod.metadata.namespace, pod.metadata.name), "node": pod.spec.node_name,
            "bound": bool(pod.spec.node_name) and ours.get(C.ASSUME_KEY) == "true",
            "gpu": int(gpu) if gpu is not None else None, "annotations": ours, "phase": pod.status.phase,
            "reason": reason}


def schedule_share(api_client, percent: int = 20, namespace: str = "default", timeout: float = 60.0, name=None,
                   keep: bool = True) -> dict:
    """Create the pod, wait until it is bound (or until the scheduler reports why not, or ``timeout``), return
    :func:`report`. With ``keep=False`` the pod is deleted afterwards."""
    core = client.CoreV1Api(api_client)
    name = name or "nano-gpu-%d-%s" % (percent, uuid.uuid4().hex[:6])
    created = core.create_namespaced_pod(namespace, share_pod(name, percent))
    deadline = time.monotonic() + timeout
    pod, version = created, created.metadata.resource_version
    try:
        while not pod.spec.node_name:
            reason = _scheduling_reason(core, namespace, name)
            remaining = int(deadline - time.monotonic())
            if reason or remaining <= 0:
                return report(pod, reason or "not bound after %.0f s" % timeout)
            stream = watch.Watch()
            for event in stream.stream(core.list_namespaced_pod, namespace, field_selector="metadata.name=%s" % name,
                                       resource_version=version, timeout_seconds=min(remaining, 5)):
                pod, version = event["object"], event["object"].metadata.resource_version
                if pod.spec.node_name:
                    stream.stop()
                    break
        return report(pod)
    finally:
        if not keep:
            try:
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.nanogpu.demo", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--percent", type=int, default=20)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true", help="leave the pod (default: delete it after the report)")
    args = parser.parse_args(argv)
    result = schedule_share(config.new_client_from_config(config_file=args.kubeconfig), args.percent, args.namespace,
                            args.timeout, keep=args.keep)
    print(json.dumps(result, sort_keys=True))
    return 0 if result["bound"] else 1


if __name__ == "__main__":
    sys.exit(main())
