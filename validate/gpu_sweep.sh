#!/usr/bin/env bash
# Calibrate the planner for the NVIDIA GPU in front of you, in one command (< 5 minutes on an H200):
#
#   bash validate/gpu_sweep.sh            # records -> validate/records/<gpu-id>/, spec + calibration -> hardware_specs/
#   OUT=/some/dir bash validate/gpu_sweep.sh   # everything under $OUT instead (records/, hardware_specs/)
#
# Steps: (1) `planner validate run --preset cuda` (STREAM + GEMM peaks, Triton paged attention, tinygemm int4,
# int8, bf16/fp16 baselines, a 4-layer Llama-3-8B decode stack), stopped after GPU_SWEEP_TIMEOUT_S seconds
# (default 270) -- an interrupted sweep keeps every record it finished; (2) `planner validate spec` (measured
# ceilings -> hardware spec YAML); (3) `planner validate fit` (efficiency factors -> calibration YAML, with the
# held-out error report). Needs torch with CUDA and triton; `pip install nvidia-ml-py` adds driver and clocks.
# GPU_SWEEP_DEVICE / GPU_SWEEP_PRESET override the device and preset (the test runs this script with
# cpu / tiny to check its logic on a machine without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

DEVICE="${GPU_SWEEP_DEVICE:-cuda}"
PRESET="${GPU_SWEEP_PRESET:-cuda}"
LIMIT_S="${GPU_SWEEP_TIMEOUT_S:-270}"
PY="${PYTHON:-python3}"
if [[ -n "${OUT:-}" ]]; then
  RECORDS="$OUT/records"; SPECS="$OUT/hardware_specs"
else
  RECORDS="validate/records"; SPECS="hardware_specs"
fi
mkdir -p "$RECORDS" "$SPECS/calibration"

if [[ "$DEVICE" == cuda* ]]; then
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "error: torch sees no CUDA device (set GPU_SWEEP_DEVICE=cpu to try the logic on a CPU)" >&2; exit 2; }
  "$PY" -c "import pynvml" 2>/dev/null || echo "note: pip install nvidia-ml-py to record driver and clocks" >&2
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || true
fi

start=$(date +%s)
set +e
timeout -s INT "$LIMIT_S" "$PY" -m planner validate run --preset "$PRESET" --device "$DEVICE" --out "$RECORDS"
rc=$?
set -e
if [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 130 ]]; then
  echo "error: the sweep failed (exit $rc)" >&2; exit "$rc"
fi
[[ $rc -eq 0 ]] || echo "note: sweep stopped after ${LIMIT_S}s; the records it finished are kept" >&2

# the run just written: the newest .jsonl under $RECORDS
RUN=$(ls -t "$RECORDS"/*/*.jsonl | head -n 1)
DEV_ID=$(basename "$(dirname "$RUN")")
"$PY" -m planner validate spec --records "$RUN" --out "$SPECS/$DEV_ID.yaml"
"$PY" -m planner validate fit --records "$RECORDS/$DEV_ID" --spec "$SPECS/$DEV_ID.yaml" \
  --out "$SPECS/calibration/$DEV_ID.yaml"
echo "done in $(( $(date +%s) - start )) s: records $RECORDS/$DEV_ID, spec $SPECS/$DEV_ID.yaml," \
     "calibration $SPECS/calibration/$DEV_ID.yaml"
