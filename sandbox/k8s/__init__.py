# SPDX-License-Identifier: GPL-3.0-or-later
"""The sandbox control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok and the device-manager simulator."""
