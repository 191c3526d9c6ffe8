#!/usr/bin/env bash
# Every GPU check in one command, at most ~4 minutes on one GPU, using only the GPU
# machine's own packages (torch, triton, h5py, scikit-learn, nvidia-ml-py, pytest; no
# Ray, Optuna or pydantic).  All figures land in one file: $OUT/gpu_check.txt
# (OUT defaults to ./bench_out).
#
#   bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench_out}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.txt"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET   # compile the kernels for real
{
  echo "== gpu_check $(date -u +%FT%TZ) rev $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "== kernel and step tests, compiled (augment within 1 ulp in fp32); the step under"
  echo "   torch.cuda.set_sync_debug_mode('warn') (at most one sync per sync_every steps); NVML figures"
  timeout 90 $PY -m pytest -q -s -p no:cacheprovider tests/trainables/test_kernels.py tests/trainables/test_step.py tests/trainables/test_gpu.py \
    tests/trainables/test_gpu_monitor.py 2>&1 | grep -E "gpu_util|passed|failed|error" | tail -8
  echo "== kernel benchmark"
  timeout 60 $PY benchmarks/kernels.py --json "$OUT/kernels.json"
  echo "== ResNet-18 training throughput"
  timeout 120 $PY benchmarks/gpu_train.py --json "$OUT/gpu_train.json"
} 2>&1 | tee "$LOG"
