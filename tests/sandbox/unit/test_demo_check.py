# SPDX-License-Identifier: GPL-3.0-or-later
"""What `make demo` expects of the GPU proof on each fleet node (sandbox/demo/check.py), computed from the profile's
driver CUDA version and PROOF_IMAGE's tag, and what a fleet kubelet node is annotated with for the simulated GFD/NFD
labels (sandbox/kubelet/cluster.py)."""

import json
import re
from pathlib import Path

import pytest

from sandbox.demo import check
from sandbox.k8s import nodes
from sandbox.kubelet import cluster

ROOT = Path(__file__).resolve().parents[3]
PROFILES = ROOT / "sandbox" / "profiles"


def profile(name):
    return json.loads((PROFILES / (name + ".json")).read_text(encoding="utf-8"))


def test_the_proof_image_is_read_from_the_collections_constants():
    text = (ROOT / "plugins" / "module_utils" / "_nvidia" / "constants.py").read_text(encoding="utf-8")
    assert check.proof_image() == re.search(r'^PROOF_IMAGE = "(.*)"$', text, re.M).group(1)


def test_the_fleets_expectations_follow_cudas_minor_version_compatibility():
    image = check.proof_image()
    built = check.IMAGE_CUDA.search(image)
    assert built, image
    want = {}
    for node in nodes.load_fleet():
        got = check.expectation(profile(node["profile"]) if node.get("profile") else None, image)
        want[node["name"]] = got["expect"]
        if got["expect"] == "fail":
            assert got["message"] == "CUDA driver version is insufficient for CUDA runtime version"
    if built.group(1) == "12":  # the shipped image, vectoradd-cuda12.5.0: a CUDA 12 driver (>= 12.0) runs it
        assert want == {"kg-v100": "fail", "kg-t4": "fail", "kg-a100": "pass", "kg-h100": "pass", "kg-gtx1060": "fail",
                        "kg-cpu": None, "kg-nodriver": None, "kg-mi210": None, "kg-flex": None}


@pytest.mark.parametrize("image, driver, expect", [
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", 12000, "pass"),  # minor version compatibility
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", 11080, "fail"),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda11.7.1", 11000, "pass"),
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda10.2", 10010, "fail"),  # before CUDA 11: at least its own version
    ("nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda10.2", 10020, "pass"),
])
def test_the_rule(image, driver, expect):
    assert check.expectation({"cuda_driver_version": driver}, image)["expect"] == expect


def test_no_cuda_version_in_the_tag_is_an_error():
    with pytest.raises(ValueError, match="no CUDA version"):
        check.expectation({"cuda_driver_version": 12040}, "example/proof:latest")


def test_fleet_kubelet_nodes_with_a_profile_say_their_labels_are_simulated(tmp_path):
    got = cluster.simulated_annotations({"name": "kg-t4", "profile": "t4"}, tmp_path)
    assert got[nodes.PROFILE_ANNOTATION] == "t4"
    assert got[nodes.MIG_STATE_ANNOTATION] == str(tmp_path.resolve() / "kg-t4" / nodes.MIG_STATE_FILE)
    assert got[cluster.SIMULATED_ANNOTATION].startswith("gfd,nfd:")
    assert check.SIMULATED_ANNOTATION == cluster.SIMULATED_ANNOTATION
    # the device-manager simulator keys its device-plugin part on kwok's annotation, never on these
    assert nodes.KWOK_ANNOTATION not in got
    assert cluster.simulated_annotations({"name": "kg-cpu", "variant": "base"}) == {}


def test_the_simulators_status_patches_are_counted_per_node():
    log = ("2026-11-27 06:00:00 devsim I node kg-t4: patching status {}\n"
           "2026-11-27 06:00:01 devsim.nanogpu I node kg-t4: nano-gpu agent runs; patching status {}\n"
           "2026-11-27 06:00:02 devsim I node kg-t40: patching status {}\n"
           "2026-11-27 06:00:03 devsim I node kg-h100, pod a/b: plugin registered\n")
    assert check.status_patches(log, "kg-t4") == 2
    assert check.status_patches(log, "kg-h100") == 0


def test_the_rule_agrees_with_the_proof_stand_in_on_a_real_driver():
    """The proof stand-in's outcomes on a real H200 (driver CUDA 13.0: images of CUDA 12.5 and 13.1 ran, 14.0 failed
    with CUDA's message; tests/realgpu/test_real_runtime.py's record) are what the demo's rule expects."""
    record = json.loads((ROOT / "tests" / "fixtures" / "realgpu" / "h200-580.159.04-runtime.json").read_text(
        encoding="utf-8"))
    major, minor = record["smi"]["cuda"]
    driver = {"cuda_driver_version": check.cuda_int(major, minor)}
    assert len(record["proof"]) == 3
    for version, seen in record["proof"].items():
        got = check.expectation(driver, "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda" + version)
        assert got["expect"] == ("pass" if seen["rc"] == 0 else "fail"), (version, got, seen)
        if seen["rc"]:
            assert any(got["message"] in line for line in seen["stdout"] + seen["stderr"]), seen
