# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault suite's smoke subset (tests/faults/README.md; `make faults` runs it all): a few killed-play points on a
node container like the fleet's, and one API-server restart while gpu_node_labels and device_plugin_deploy run on a
few kwok nodes of a control plane of the test's own. Each is seeded: FAULTS_SEED replays a run (the seed is in every
failure's message), a new one is drawn otherwise."""

import os
import random

from faults import run as faults

SEED = os.environ.get("FAULTS_SEED") or str(random.SystemRandom().randrange(10 ** 8))


def _fault(name):
    return next(f for f in faults.FAULTS if f.name == name)


def _check(row, failed):
    assert not failed and row["lost"] == 0 and row["survived"] == row["trials"] > 0, (
        "seed %s (replay: make faults SEED=%s FAULT=%s ONLY=<trial>): %s"
        % (SEED, SEED, row["fault"], [(r["trial"], r["where"], r["problems"]) for r in failed]))


def test_killed_play_points_leave_nothing_lost():
    fault = _fault("killed-play")
    _check(*faults.run(fault, SEED, fault.smoke, smoke=True))


def test_an_api_server_restart_mid_rollout_is_survived(monkeypatch):
    # a control plane beside the stage's own (TEST_STATE_DIR), never the demo's or `make faults`'
    state = os.environ.get("TEST_STATE_DIR")
    if state:
        monkeypatch.setenv("FAULTS_STATE_DIR", state + "-faults")
    fault = _fault("api-server-gone")
    _check(*faults.run(fault, SEED, fault.smoke, smoke=True))
