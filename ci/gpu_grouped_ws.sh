#!/usr/bin/env bash
# One call on the lent H200 for grouped's warp-specialized INT8 kernel (grouped_ws, issue 10): build the loader and the
# CPU and sm_90 plugins at GEOMS (default 256x12,128x8), a quick parity with it (a hang or a wrong answer shows
# first), then the attention kernel's GPU time with STRATA_GROUPED_WS=0 (the grouped kernel) and =1 alternated at
# SHAPES, then parity at the spec's sizes, ci/grouped_items_parity.py and the grouped GPU tests with it.
#   GEOMS=256x12 SHAPES=32768x2048,1500x1500 bash ci/gpu_grouped_ws.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
LOG=${OUT:-/tmp}/ws
mkdir -p "$LOG"
MAX_JOBS=16 STRATA_KERNELS_BUILD_DIR=/tmp/bws STRATA_TARGETS="cpu;sm_90" STRATA_ONLY_GEOMETRIES=${GEOMS:-256x12,128x8} \
  python3 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')" \
  > "$LOG/build.txt" 2>&1 || { echo "build failed"; tail -30 "$LOG/build.txt"; exit 1; }
echo "== quick parity, ws $(date +%T)"
STRATA_GROUPED_WS=1 timeout 120 python3 -m strata_kernels parity --device cuda --variant grouped --quick \
  > "$LOG/parity_quick.txt" 2>&1; echo "exit $?"; grep -E "PASSED|FAIL|rror" "$LOG/parity_quick.txt" | head -8
for ws in 0 1 0 1; do
  echo "== STRATA_GROUPED_WS=$ws $(date +%T)"
  STRATA_GROUPED_WS=$ws timeout 120 python3 ci/grouped_kernels.py $(echo "${SHAPES:-32768x2048,1500x1500}" | tr , ' ') 2>&1 | grep -v -i warn
done
echo "== parity, ws $(date +%T)"
STRATA_GROUPED_WS=1 timeout 300 python3 -m strata_kernels parity --device cuda --variant grouped --reps 1 \
  > "$LOG/parity.txt" 2>&1; echo "exit $?"; grep -E "PASSED|FAIL" "$LOG/parity.txt" | tail -3
STRATA_GROUPED_WS=1 timeout 200 python3 ci/grouped_items_parity.py 2>&1 | tail -6
STRATA_GROUPED_WS=1 timeout 200 python3 -m pytest tests/gpu/test_grouped.py -q -x 2>&1 | tail -3
# WSVARS: candidate forms of templates/cuda/grouped_ws.inc.j2 (git-ignored ci/.var, carried), each built at 256x12
# and checked by the quick parity, then timed beside the tree's form (STRATA_GROUPED_WS=0 once more for reference).
cp templates/cuda/grouped_ws.inc.j2 /tmp/ws_tree.inc.j2
for v in ${WSVARS:-}; do
  name=$(basename "$v" .inc.j2)
  cp "$v" templates/cuda/grouped_ws.inc.j2
  MAX_JOBS=16 STRATA_KERNELS_BUILD_DIR=/tmp/bws2 STRATA_TARGETS="sm_90" STRATA_ONLY_GEOMETRIES=256x12 \
    python3 -c "from strata_kernels import build; build.build(with_loader=False, install_dir='strata_kernels/plugins')" \
    > "$LOG/build_$name.txt" 2>&1 || { echo "== $v: build failed"; tail -5 "$LOG/build_$name.txt"; continue; }
  echo "== $v quick parity $(date +%T)"
  STRATA_GROUPED_WS=1 timeout 120 python3 -m strata_kernels parity --device cuda --variant grouped --quick \
    > "$LOG/parity_quick_$name.txt" 2>&1; echo "exit $?"; grep -E "PASSED|FAIL" "$LOG/parity_quick_$name.txt" | tail -2
  for ws in 1 0 1; do
    echo "== $v STRATA_GROUPED_WS=$ws"
    STRATA_GROUPED_WS=$ws timeout 120 python3 ci/grouped_kernels.py $(echo "${SHAPES:-32768x2048,1500x1500}" | tr , ' ') 2>&1 | grep -v -i warn
  done
done
cp /tmp/ws_tree.inc.j2 templates/cuda/grouped_ws.inc.j2
