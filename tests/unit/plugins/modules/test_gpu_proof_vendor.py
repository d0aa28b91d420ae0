# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_proof's vendor option: each vendor's proof (its entry of the vendor registry) looks at its own resources and
runs its own workload where the options leave the workload out; what the user gives wins."""

from ansible_collections.kubegpu.cluster.plugins.module_utils import _vendors
from ansible_collections.kubegpu.cluster.plugins.module_utils._amd import constants as amd
from ansible_collections.kubegpu.cluster.plugins.module_utils._intel import constants as intel
from ansible_collections.kubegpu.cluster.plugins.module_utils._k8s import proof
from ansible_collections.kubegpu.cluster.plugins.module_utils._nvidia import constants as nv


def workload(name):
    return proof.Workload(**_vendors.get(name).proof)


def test_nvidia_is_the_default_and_keeps_its_workload():
    nvidia = workload("nvidia")
    params = nvidia.fill({"vendor": "nvidia", "image": None, "success_pattern": None, "command": None})
    assert nvidia.resource_prefixes == (nv.RESOURCE_PREFIX,)
    assert (params["image"], params["success_pattern"], params["command"]) == (nv.PROOF_IMAGE, nv.PROOF_PATTERN, None)


def test_an_amd_proof_runs_rocminfo_on_amd_resources_only():
    amd_proof = workload("amd")
    params = amd_proof.fill({"vendor": "amd", "image": None, "success_pattern": None, "tolerations": None})
    assert amd_proof.resource_prefixes == ("amd.com",)
    assert params["image"] == amd.PROOF_IMAGE and params["command"] == ["rocminfo"]
    node = {"status": {"allocatable": {"nvidia.com/gpu": "1", "amd.com/gpu": "2"}}}
    assert proof.advertised(node, amd_proof) == {"amd.com/gpu": 2}
    job = proof.render_job(params, "gpu-validation", "kg-mi210", "amd.com/gpu", amd_proof)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == amd.PROOF_IMAGE and container["command"] == ["rocminfo"]
    assert container["resources"]["limits"] == {"amd.com/gpu": 1}
    assert {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in job["spec"]["template"]["spec"]["tolerations"]


def test_an_intel_proof_and_what_the_user_gives_wins():
    intel_proof = workload("intel")
    params = intel_proof.fill({"vendor": "intel", "image": "mirror.example/opencl:1", "success_pattern": None,
                               "command": None})
    assert params["image"] == "mirror.example/opencl:1"
    assert params["success_pattern"] == intel.PROOF_PATTERN and params["command"] == ["clinfo"]
    assert intel.PROOF_IMAGE.endswith(":" + intel.DEVICE_PLUGIN_VERSION)
    node = {"status": {"allocatable": {"gpu.intel.com/xe": "2", "gpu.intel.com/i915": "0"}}}
    assert proof.pick_resource(proof.advertised(node, intel_proof), intel_proof) == "gpu.intel.com/xe"
