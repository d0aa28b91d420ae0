# SPDX-License-Identifier: GPL-3.0-or-later
"""Device-manager simulator: makes kwok nodes advertise what the NVIDIA device plugin would."""
