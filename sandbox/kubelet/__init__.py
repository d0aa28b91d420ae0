# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubelet nodes: fleet node containers that run a real kubelet next to their containerd (README.md)."""
