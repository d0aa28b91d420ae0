# SPDX-License-Identifier: GPL-3.0-or-later
"""API server gone mid-rollout (filled in below)."""
NODES = 500
SMOKE_NODES = 50
