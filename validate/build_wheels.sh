#!/usr/bin/env bash
# Build .whl/ for the lent H200 (no network there; its image has torch, triton, numpy, pandas, PyYAML and
# nvidia-ml-py but no pydantic). Run it here, on a machine with pip, in the repository root:
#
#   bash validate/build_wheels.sh          # -> .whl/ (about 2.3 MB, 5 wheels; a few seconds)
#   DRY_RUN=1 bash validate/build_wheels.sh   # print the pip commands only (the test checks them)
#
# Follows the device tool's README: cp312 (the image's Python 3.12), manylinux x86_64, --no-deps, one version of
# each package -- the versions installed here, so the device runs the pydantic the tests ran with (pydantic pins
# pydantic_core exactly). On the device, install them before anything imports planner:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#     .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DEST="${WHEEL_DIR:-.whl}"
PACKAGES=(pydantic pydantic_core annotated_types typing_inspection typing_extensions)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

pins=()
for pkg in "${PACKAGES[@]}"; do
  ver=$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$pkg") \
    || { echo "error: build_wheels: $pkg is not installed here; pip install pydantic first" >&2; exit 2; }
  pins+=("$pkg==$ver")
done
cmd=("$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp)
for p in "${PLATFORMS[@]}"; do cmd+=(--platform "$p"); done
cmd+=(-d "$DEST" "${pins[@]}")

if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
if excl=$(git rev-parse --git-path info/exclude 2>/dev/null); then  # .whl/ travels to the device, never to git
  mkdir -p "$(dirname "$excl")"; grep -qx '/.whl/' "$excl" 2>/dev/null || echo '/.whl/' >> "$excl"
fi
rm -rf "$DEST"; mkdir -p "$DEST"
"${cmd[@]}"
n=$(ls "$DEST"/*.whl | wc -l)
[[ $n -eq ${#PACKAGES[@]} ]] || { echo "error: build_wheels: $n wheels in $DEST, expected ${#PACKAGES[@]}" >&2; exit 1; }
echo "built $n wheels in $DEST ($(du -sh "$DEST" | cut -f1)): ${pins[*]}"
