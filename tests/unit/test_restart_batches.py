# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 26: runtime restarts hit every GPU node at once. The plays that restart a daemon run in batches: the
container toolkit stage (site.yml imports it) 20% of the GPU nodes at a time by default, stopping at the first batch
with a failed node; the kube-scheduler plays of nano_gpu one control-plane node at a time. Renders the plays' keywords
as Ansible would, with and without the variables."""

from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def plays(name):
    return yaml.safe_load((ROOT / "playbooks" / name).read_text())


def render(value, **variables):
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(str(value)).render(**variables)


def toolkit_play():
    (play,) = [p for p in plays("container_toolkit.yml") if "roles" in p]
    assert [r["role"] for r in play["roles"]] == ["kubegpu.cluster.container_toolkit"]
    return play


@pytest.mark.parametrize("variables, serial, max_fail", [
    ({}, "20%", "0"),
    ({"kubegpu_runtime_restart_serial": 1}, "1", "0"),
    ({"kubegpu_runtime_restart_serial": "100%", "kubegpu_runtime_restart_max_fail_percentage": 10}, "100%", "10"),
])
def test_the_toolkit_stage_restarts_in_batches(variables, serial, max_fail):
    play = toolkit_play()
    assert render(play["serial"], **variables) == serial
    assert render(play["max_fail_percentage"], **variables) == max_fail


def test_site_runs_the_toolkit_stage_through_that_play():
    imports = [p.get("ansible.builtin.import_playbook") for p in plays("site.yml")]
    assert "kubegpu.cluster.container_toolkit" in imports


def test_the_kube_scheduler_plays_of_nano_gpu_go_one_control_plane_node_at_a_time():
    scheduler_plays = [p for p in plays("nano_gpu.yml") if "kubegpu_scheduler_hosts" in str(p.get("hosts"))]
    assert len(scheduler_plays) == 2  # the way back's and the bring-up's
    for play in scheduler_plays:
        assert render(play["serial"]) == "1" and play["max_fail_percentage"] == 0


def test_the_docs_name_the_variables_and_what_a_restart_stops():
    text = (ROOT / "docs" / "getting-started.md").read_text()
    for words in ("kubegpu_runtime_restart_serial", "kubegpu_runtime_restart_max_fail_percentage", "live-restore",
                  "What a restart stops", "kubegpu_scheduler_restart_serial"):
        assert words in text, words
