#!/usr/bin/env bash
# GPU validation in one device lease (about 6.5 minutes of run time; 8 with the machine's start-up):
#
#   bash validate/build_wheels.sh                 # once, HERE (pip works here): .whl/ with pydantic & co.
#   # then, on the GPU machine (device tool: carry [".whl"], timeout_s 540):
#   bash validate/gpu_sweep.sh                    # -> $OUT (records/, calibration/, summary.json, flow.log)
#
#   GPU_SWEEP_DRY_RUN=1 OUT=/tmp/flow bash validate/gpu_sweep.sh   # the same steps on a CPU (CI runs this)
#
# It installs .whl/*.whl into /tmp/site when pydantic is missing (the H200 image has torch, triton, numpy, pandas,
# PyYAML and nvidia-ml-py, no pydantic, no network), runs the preflight (validate/preflight.py: versions and
# imports, stdlib only), then `planner validate device` (validate/device.py): correctness gate, one budgeted phase
# per kernel family, guarded fit and check. Exit 0 only when every step passed; 2 when the machine cannot run it.
# GPU_SWEEP_BUDGET_S (default 360) is the budget of the gate and the phases together.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
OUT="${OUT:-validate/device-out}"
BUDGET="${GPU_SWEEP_BUDGET_S:-360}"
if [[ -n "${GPU_SWEEP_DRY_RUN:-}" ]]; then DEVICE=cpu; FLAGS=(--dry-run); else DEVICE=cuda; FLAGS=(); fi

if ! "$PY" -c "import pydantic" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "error: gpu_sweep: installing .whl/*.whl failed" >&2; exit 2; }
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -m validate.preflight --device "$DEVICE" || exit 2
mkdir -p "$OUT"
"$PY" -m planner validate device --out "$OUT" --device "$DEVICE" --budget-s "$BUDGET" "${FLAGS[@]}"
