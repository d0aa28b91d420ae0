#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# kubegpu SANDBOX STAND-IN for the init container of NVIDIA's DRA kubelet plugin chart (kubernetes-sigs/
# dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/templates/kubeletplugin.yaml: `bash
# /usr/bin/kubelet-plugin-prestart.sh`, the driver root's parent at /driver-root-parent). Not NVIDIA's script: it only
# checks that the driver root holds NVML (libnvidia-ml.so.1) and exits 0; without one it says so and looks again every
# 10 s, as NVIDIA's waits for the driver.
set -uo pipefail
root=${NVIDIA_DRIVER_ROOT:-/}
if [[ $root == / ]]; then here=/driver-root-parent; else here=/driver-root-parent/$(basename "$root"); fi
echo "kubegpu sandbox stand-in for kubelet-plugin-prestart.sh (not NVIDIA's software): driver root $root at $here"
while :; do
    for dir in usr/lib/x86_64-linux-gnu usr/lib64 usr/lib lib/x86_64-linux-gnu; do
        if [[ -e $here/$dir/libnvidia-ml.so.1 ]]; then
            echo "found $root$dir/libnvidia-ml.so.1: the driver is there"
            exit 0
        fi
    done
    echo "no libnvidia-ml.so.1 under the driver root $root yet; looking again in 10 s"
    sleep 10
done
