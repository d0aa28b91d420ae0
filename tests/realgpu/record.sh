#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Record what a real NVIDIA GPU reports and run tests/realgpu against it. Run from the repository root on a machine
# with an NVIDIA driver, with in .realgpu/: the pinned wheels of ansible-core, resolvelib, nvidia-ml-py, grpcio and
# protobuf (requirements*.txt) for that machine's Python; nvlibprobe (make nvlibprobe); nvidia-ctk,
# nvidia-container-runtime and nvidia-cdi-hook of the collection's toolkit version (make nvidia-runtime); kubeletcheck
# (make standins-kubeletcheck); and the proof stand-in built for three CUDA versions, vectorAdd-cuda<version>
# (gcc -DPROOF_CUDA_VERSION='"<version>"' sandbox/proof/vectoradd.c -ldl, as sandbox/proof/build_image.sh builds it:
# the proof image's CUDA, the driver's CUDA major with a newer minor, the next major; test_real_runtime.py names them).
# Read-only: nothing here changes the GPU or starts a container. Results go to $OUT (default .realgpu/out).
set -u
OUT=${OUT:-.realgpu/out}
mkdir -p "$OUT" /tmp/realgpu-site /tmp/realgpu-ac/ansible_collections/kubegpu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/realgpu-site \
    .realgpu/*.whl || exit 1
ln -sfn "$PWD" /tmp/realgpu-ac/ansible_collections/kubegpu/cluster
export PYTHONPATH=/tmp/realgpu-site:/tmp/realgpu-ac PYTHONUNBUFFERED=1 KUBEGPU_REALGPU_OUT="$OUT"
{ nvidia-smi; nvidia-smi mig -lgip; nvidia-smi mig -lgipp; uname -r; python3 --version; } >"$OUT/nvidia-smi.txt" 2>&1
python3 -m pytest -q -p no:cacheprovider -c /dev/null --rootdir tests/realgpu --confcutdir tests/realgpu \
    tests/realgpu/test_real_gpu.py tests/realgpu/test_real_runtime.py 2>&1 | tee "$OUT/pytest.txt"
rc=${PIPESTATUS[0]}
# the MIG mode after the checks: left as it was
nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv >>"$OUT/nvidia-smi.txt" 2>&1
exit "$rc"
