#!/usr/bin/env bash
# Issue 12, one query: flash's blocks in two warp groups (docs/notes/flash-two-groups.patch: compiled here for sm_90a
# and sm_80, never run) on the lent GPU, in one call of ~4 minutes. Applies the patch to the tree; builds the loader
# and the CPU and sm_90 plugins at (256, 12) and (128, 4); runs flash's GPU tests (with the patch's test that forces
# one and two groups), the parity test of the flash variant at both geometries, and compute-sanitizer's memcheck and
# racecheck on two-group calls; then times decode calls (CUDA-graph replay, ci/decode_splits.py) with one and two
# groups alternated (STRATA_DECODE_FLASH_GROUPS, read once a process), INT8 and FP16, and two groups at 17 / 22 / 33
# splits. Results under $OUT: build.txt, tests.txt, parity.txt, sanitizer*.txt, time.txt, env.txt.
# Usage (the device's run): bash ci/gpu_flash_groups.sh
set -uo pipefail
git apply docs/notes/flash-two-groups.patch || { echo "the patch does not apply to this tree"; exit 1; }
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12,128x4 build_plugins /tmp/b0 "$OUT/build.txt"
timeout 600 python3 -m pytest tests/gpu/test_flash_decode.py -q > "$OUT/tests.txt" 2>&1; tail -3 "$OUT/tests.txt"
for geo in "256 12" "128 4"; do
  set -- $geo
  timeout 300 python3 -m strata_kernels parity --device cuda --variant flash --head-dim "$1" --group "$2" --reps 1 \
    >> "$OUT/parity.txt" 2>&1
done
grep -E "PASSED|FAIL" "$OUT/parity.txt" | tail -4
# shellcheck disable=SC1091
. ci/sanitize.sh  # memcheck and racecheck of two-group calls: 33 splits of 2 tiles, then splits of 2 and 1 tiles
STRATA_DECODE_FLASH_GROUPS=2 run_sanitizers 200 python3 ci/decode_case.py 4096x1,200x3
SHAPES=${SHAPES:-4096x1,32768x1,32768x2,32768x3,32768x8}
for fmt in int8 fp16; do
  for groups in 1 2 1 2; do
    echo "== groups $groups"
    STRATA_DECODE_FLASH_GROUPS=$groups python3 ci/decode_splits.py flash "$SHAPES" "$fmt" 2>&1 | grep -v -i warn
  done
done | tee "$OUT/time.txt"
# Fewer splits of more tiles with two groups (the merge's rounds against the blocks' tiles), INT8, one and two queries
for splits in 17 22 33; do
  echo "== groups 2, splits $splits"
  STRATA_DECODE_FLASH_GROUPS=2 STRATA_DECODE_FLASH_SPLITS=$splits python3 ci/decode_splits.py flash \
    4096x1,32768x1,32768x2 int8 2>&1 | grep -v -i warn
done | tee -a "$OUT/time.txt"
git apply -R docs/notes/flash-two-groups.patch
