# SPDX-License-Identifier: GPL-3.0-or-later
"""Sandbox stand-ins for the vendors' Kubernetes programs (device plugins and their helpers). Not vendor software:
they run in the sandbox's stand-in images (sandbox/standins/README.md) and do what the simulator (sandbox/k8s/devsim)
computes, from inside their pods, through the same rules."""
