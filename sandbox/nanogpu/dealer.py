# SPDX-License-Identifier: GPL-3.0-or-later
"""nano-gpu-scheduler's decisions, as pure functions of plain dicts (pods and nodes as the API returns them).

Read in nano-gpu-scheduler 0.3.0 (elastic-ai/elastic-gpu-scheduler's history; paths are that repository's):

* A node has ``capacity[nano-gpu/gpu-percent] / 100`` GPUs of 100 percent each (pkg/utils/node.go
  GetGPUDeviceCountOfNode; pkg/dealer/node.go NewNodeInfo).
* A pod's demand is one share per container, the container's *limit* of ``nano-gpu/gpu-percent`` (pkg/utils/pod.go
  GetGPUPercentFromContainer; pkg/dealer/allocate.go NewDemandFromPod). Each share must fit in one GPU: a container
  never spans GPUs, so 120 never fits, and 60 + 60 in two containers takes two GPUs.
* What is used: the pods labelled ``nano-gpu/assume=true`` on the node (pkg/dealer/dealer.go getNodeInfo), each
  container's share on the GPU its annotation ``nano-gpu/container-<name>`` names (index 0 when it cannot be read,
  none for -1; allocate.go NewPlanFromPod). Finished and deleted pods are released (pkg/controller/controller.go).
* Choosing (pkg/dealer/rater.go): the largest shares first; ``binpack`` puts each on the fullest GPU that still fits,
  ``spread`` on the emptiest; a share of 0 gets no GPU (-1, allocate.go NotNeedGPU). When a share fits nowhere the
  node fails with ``can't allocate   <demand> on <gpus>: indexes=<chosen>`` - the reason the kube-scheduler reports.
* Scoring (rater.go Rate, on the node as it is, before the pod): ``binpack`` ``int(usage*100) - len(gpus)`` (usage =
  used / total percent), ``spread`` ``100*free GPUs + available/10 - len(gpus)``; a node that does not fit scores 0
  (ScoreMin, dealer.go Score).
* Binding (dealer.go Bind, pkg/utils/pod.go GetUpdatedPodAnnotationSpec): every container's GPU index in
  ``nano-gpu/container-<name>``, ``nano-gpu/assume: "true"`` as annotation and label, the pod updated, then bound.

Not followed: upstream keeps this state in memory (informers and a plan cache); the stand-in reads it from the API
server on every call, which gives the same answers for one scheduler at a time. Its load-aware scoring (0.4.0,
Prometheus) is not simulated.
"""

from __future__ import annotations

from . import C

SCORE_MIN = 0
NOT_NEED_GPU = -1


class NoFit(Exception):
    """The demand fits on none of the node's GPUs; the message is upstream's."""


def _int(value) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def gpu_count(node: dict) -> int:
    """GPUs of a node, from its capacity (pkg/utils/node.go)."""
    capacity = ((node or {}).get("status") or {}).get("capacity") or {}
    return _int(capacity.get(C.RESOURCE_NAME)) // C.PERCENT_PER_GPU


def container_share(container: dict) -> int:
    return _int(((container.get("resources") or {}).get("limits") or {}).get(C.RESOURCE_NAME))


def demand(pod: dict) -> list:
    """One share per container, in the pod's order."""
    return [container_share(c) for c in (pod.get("spec") or {}).get("containers") or []]


def wants_gpu(pod: dict) -> bool:
    """Whether the pod asks for the resource (pkg/utils/pod.go IsGPUSharingPod)."""
    return sum(demand(pod)) > 0


def assumed(pod: dict) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(C.ASSUME_KEY) == "true"


def finished(pod: dict) -> bool:
    """pkg/utils/pod.go IsCompletedPod: deleted, Succeeded or Failed."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or \
        (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def container_index(pod: dict, name: str) -> int:
    """The GPU index the extender gave a container (0 when the annotation is missing or not a number)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(C.ANNOTATION_CONTAINER % name)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def free_percent(node: dict, pods: list) -> list:
    """Per GPU of ``node``, the percent left after the assumed, unfinished ``pods`` bound to it."""
    gpus = [C.PERCENT_PER_GPU] * gpu_count(node)
    name = node["metadata"]["name"]
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != name or not assumed(pod) or finished(pod):
            continue
        for container in pod["spec"].get("containers") or []:
            index = container_index(pod, container["name"])
            if 0 <= index < len(gpus):
                gpus[index] -= container_share(container)
    return gpus


def _show(values) -> str:
    return "".join("(%d)" % v for v in values)


def choose(gpus: list, shares: list, priority: str = C.DEFAULT_PRIORITY) -> list:
    """The GPU index per share (rater.go Binpack.Choose / Spread.Choose); raises :class:`NoFit`."""
    left = list(gpus)
    order = sorted(range(len(shares)), key=lambda i: shares[i], reverse=True)  # the largest share first
    indexes = {}
    for i in order:
        if shares[i] == 0:
            indexes[i] = NOT_NEED_GPU
            continue
        fitting = [g for g in range(len(left)) if left[g] >= shares[i]]
        if not fitting:
            chosen = [indexes[j] for j in order if j in indexes]
            raise NoFit("can't allocate   %s on %s: indexes=[%s]" % (_show(shares), _show(gpus),
                                                                     " ".join(str(c) for c in chosen)))
        # binpack: the fullest GPU that fits (sorted by what is left, ascending); spread: the emptiest
        pick = min(fitting, key=lambda g: (left[g], g)) if priority != "spread" else max(fitting, key=lambda g: (left[g], -g))
        left[pick] -= shares[i]
        indexes[i] = pick
    return [indexes[i] for i in range(len(shares))]


def score(gpus: list, priority: str = C.DEFAULT_PRIORITY) -> int:
    """rater.go Rate (without the load-aware part), of the node as it is before the pod."""
    if not gpus:
        return SCORE_MIN
    total = C.PERCENT_PER_GPU * len(gpus)
    if priority == "spread":
        free = sum(1 for g in gpus if g == C.PERCENT_PER_GPU)
        return 100 * free + sum(gpus) // 10 - len(gpus)
    return int(float(total - sum(gpus)) / total * 100) - len(gpus)


def filter_nodes(pod: dict, node_names: list, nodes: dict, pods: list, priority: str = C.DEFAULT_PRIORITY) -> dict:
    """The ``ExtenderFilterResult`` for ``node_names``: ``nodes`` maps name to Node (a missing one fails with the
    lister's error), ``pods`` are the assumed pods of those nodes."""
    fits, failed = [], {}
    shares = demand(pod)
    for name in node_names:
        node = nodes.get(name)
        if node is None:
            failed[name] = "nano gpu scheduler get node failed: node \"%s\" not found" % name
            continue
        try:
            choose(free_percent(node, pods), shares, priority)
            fits.append(name)
        except NoFit as exc:
            failed[name] = str(exc)
    return {"NodeNames": fits, "FailedNodes": failed, "Error": ""}


def prioritize(pod: dict, node_names: list, nodes: dict, pods: list, priority: str = C.DEFAULT_PRIORITY) -> list:
    """The ``HostPriorityList``: each node's score, 0 where the pod does not fit."""
    out = []
    shares = demand(pod)
    for name in node_names:
        node = nodes.get(name)
        value = SCORE_MIN
        if node is not None:
            gpus = free_percent(node, pods)
            try:
                choose(gpus, shares, priority)
                value = score(gpus, priority)
            except NoFit:
                value = SCORE_MIN
        out.append({"Host": name, "Score": value})
    return out


def bound_pod(pod: dict, indexes: list) -> dict:
    """The pod as the extender updates it before the Binding: GPU index per container, the assume mark."""
    meta = pod.setdefault("metadata", {})
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    for container, index in zip(pod["spec"]["containers"], indexes):
        annotations[C.ANNOTATION_CONTAINER % container["name"]] = str(index)
    annotations[C.ASSUME_KEY] = "true"
    labels[C.ASSUME_KEY] = "true"
    meta["annotations"], meta["labels"] = annotations, labels
    return pod
