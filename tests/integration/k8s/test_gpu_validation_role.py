# SPDX-License-Identifier: GPL-3.0-or-later
"""The gpu_validation role through ansible-playbook against the sandbox control plane (issue 26):

- it proves on a fresh node, and a rerun where nothing the proof depends on changed runs no proof and reports no
  change, whichever roles ran in the play: the role alone (nothing read of the node but its name), or with the
  driver's facts (as gpu_driver leaves them);
- a value the play does read and that changed (the driver version) proves again;
- it works on every ansible-core the collection claims: run this file with the interpreter of another ansible-core
  to check that one (docs/support-matrix.md, "Other ansible-core versions, by hand"); ansible-core 2.17 and 2.18 templated the role's
  "no decision" to "" instead of null, skipped the proof and failed with "the GPU proof did not pass".

The play runs on localhost, which stands for the GPU host (kubegpu_node_name names the kwok node); a module of the
test's own (library/, beside the playbook) returns the gpu fact the way gpu_driver's gpu_facts does.
"""

import uuid

import ansible
import pytest

from ansible_cli import run_module, run_playbook

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The driver's facts, as gpu_driver would leave them
      test_gpu_fact:
        driver_version: "{{ test_driver_version }}"
      when: test_driver_version | length > 0
    - name: Prove
      ansible.builtin.include_role:
        name: kubegpu.cluster.gpu_validation
"""

FACT_MODULE = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec=dict(driver_version=dict(type="str", required=True)))
    module.exit_json(changed=False, ansible_facts={"gpu": {"present": True, "count": 1,
                                                           "driver_version": module.params["driver_version"]}})


if __name__ == "__main__":
    main()
'''


@pytest.fixture
def gpu_node(sandbox, test_nodes):
    """One kwok node with a T4 profile that advertises nvidia.com/gpu: 1 through a plugin of this test's own."""
    node = test_nodes(1, "t4")[0]
    label = "kubegpu.test/role-" + uuid.uuid4().hex[:8]
    ns = "dp-" + uuid.uuid4().hex[:8]
    sandbox.core.patch_node(node, {"metadata": {"labels": {label: "true"}}})
    rc, result = run_module("kubegpu.cluster.device_plugin_deploy", dict(
        kubeconfig=sandbox.kubeconfig, namespace=ns, node_selector={label: "true"}, wait_timeout=120,
        deploy_labels=False, expected={node: {"nvidia.com/gpu": 1}}))
    assert rc == 0, result
    yield node
    run_module("kubegpu.cluster.device_plugin_deploy", dict(kubeconfig=sandbox.kubeconfig, namespace=ns, state="absent"))


@pytest.fixture
def play(tmp_path, sandbox, gpu_node):
    """``play(driver_version="")``: one run of the role; returns (exit code, the proof task's result, the outcome)."""
    (tmp_path / "library").mkdir()
    (tmp_path / "library" / "test_gpu_fact.py").write_text(FACT_MODULE)
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    namespace = "proof-" + uuid.uuid4().hex[:8]

    def run(driver_version=""):
        code, tasks = run_playbook(playbook, {
            "test_driver_version": driver_version, "kubegpu_node_name": gpu_node,
            "gpu_validation_gpu_hosts": ["localhost"], "gpu_validation_kubeconfig": sandbox.kubeconfig,
            "gpu_validation_nodes": [gpu_node], "gpu_validation_namespace": namespace, "gpu_validation_timeout": 90})
        proofs = [r for name, r in tasks if name == "Run the GPU proof workload"]
        kept = [r for name, r in tasks if name == "Keep the outcome for later plays"]
        return code, (proofs or [{}])[0], (kept or [{}])[0].get("ansible_facts", {}).get("gpu_validation_result"), tasks

    return run


def ran(result):
    return [r["ran"] for r in result.get("results") or []]


def test_a_rerun_proves_nothing_whichever_roles_ran_in_the_play(play, sandbox, gpu_node):
    version = ansible.__version__
    code, first, outcome, tasks = play()
    assert code == 0, (version, tasks)
    assert first["changed"] is True and ran(first) == [True] and first["recorded"] == [gpu_node], (version, first)
    assert outcome["passed"] is True

    code, again, outcome, tasks = play()  # the role alone again: nothing it can read changed
    assert code == 0, (version, tasks)
    assert again["changed"] is False and ran(again) == [False], (version, again)
    assert "not read in this run, so taken as unchanged" in again["results"][0]["detail"]
    assert outcome["passed"] is True

    code, driver, outcome, tasks = play(driver_version="550.54.15")  # the record knew no driver: prove under it
    assert code == 0 and driver["changed"] is True and ran(driver) == [True], (version, driver)
    assert driver["last_proofs"][gpu_node]["under"]["driver_version"] == "550.54.15"

    for driver_version in ("550.54.15", ""):  # with the same facts, and without any again
        code, rerun, outcome, tasks = play(driver_version=driver_version)
        assert code == 0 and rerun["changed"] is False and ran(rerun) == [False], (version, driver_version, rerun)

    code, upgraded, outcome, tasks = play(driver_version="560.35.03")  # what the play read changed: prove again
    assert code == 0 and upgraded["changed"] is True and ran(upgraded) == [True], (version, upgraded)
