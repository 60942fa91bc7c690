#!/usr/bin/env bash
# Issue 12, one query: two forms of flash on the lent GPU, compiled here for sm_90a and sm_80 and never run, in one
# call of ~6 minutes:
# - the blocks in two warp groups (docs/notes/flash-two-groups.patch), applied to the tree, built at (256, 12) and
#   (128, 4);
# - the one-group kernel's row table skipping the batch entries no thread holds (docs/notes/flash-row-skip.patch), in
#   a worktree of the tree at /tmp/rs, built at (256, 12).
# In order: both builds (the loader and the CPU and sm_90 plugins); flash's GPU tests in each tree (the two-group
# patch's test forces one and two groups); the flash variant's parity test (both geometries; the row skip's at
# (256, 12)); decode times (CUDA-graph replay, ci/decode_splits.py) of one group (main's kernel), the row skip and two
# groups alternated (STRATA_DECODE_FLASH_GROUPS, read once a process), INT8 and FP16, and two groups at 17 / 22 / 33
# splits; last, compute-sanitizer memcheck and racecheck of two-group calls and of the row skip (33 splits of 2
# tiles, then splits of 2 and 1 tiles), so that a call that runs out of time loses only those.
# Results under $OUT: env.txt, build.txt, tests.txt, parity.txt, time.txt, sanitizer*.txt; the row skip's build, test,
# parity and sanitizer files under rs/.
# Usage (the device's run): bash ci/gpu_flash_groups.sh
set -uo pipefail
# the row skip's tree: a worktree of HEAD with the tree's tracked changes (the device's checkout may show an older
# HEAD than the tree it was given), then the patch
git diff --binary HEAD > /tmp/tree.diff
git worktree add -f /tmp/rs HEAD > /dev/null 2>&1
(cd /tmp/rs && { [ ! -s /tmp/tree.diff ] || git apply /tmp/tree.diff; } \
  && git apply "$OLDPWD/docs/notes/flash-row-skip.patch") || { echo "flash-row-skip.patch does not apply"; exit 1; }
git apply docs/notes/flash-two-groups.patch || { echo "flash-two-groups.patch does not apply to this tree"; exit 1; }
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
RS="$OUT/rs"
mkdir -p "$RS"
GEOMS=256x12,128x4 build_plugins /tmp/b0 "$OUT/build.txt"
(cd /tmp/rs && GEOMS=256x12 build_plugins /tmp/b_rs "$RS/build.txt")
# in_rs COMMAND...: COMMAND in the row skip's tree, its package first on the path
in_rs() { (cd /tmp/rs && PYTHONPATH=/tmp/rs "$@"); }
timeout 300 python3 -m pytest tests/gpu/test_flash_decode.py -q -p no:cacheprovider > "$OUT/tests.txt" 2>&1
tail -1 "$OUT/tests.txt"
in_rs timeout 300 python3 -m pytest tests/gpu/test_flash_decode.py -q -p no:cacheprovider > "$RS/tests.txt" 2>&1
tail -1 "$RS/tests.txt"
parity_at flash 256x12 128x4
(OUT="$RS"; in_rs parity_at flash 256x12)
SHAPES=${SHAPES:-4096x1,32768x1,32768x2,32768x3,32768x8}
for fmt in int8 fp16; do
  for form in 1 rs 2 1 rs 2; do
    if [ "$form" = rs ]; then
      echo "== one group, row skip"
      in_rs python3 ci/decode_splits.py flash "$SHAPES" "$fmt" 2>&1 | grep -v -i warn
    else
      echo "== groups $form"
      STRATA_DECODE_FLASH_GROUPS=$form python3 ci/decode_splits.py flash "$SHAPES" "$fmt" 2>&1 | grep -v -i warn
    fi
  done
done | tee "$OUT/time.txt"
# Fewer splits of more tiles with two groups (the merge's rounds against the blocks' tiles), INT8, one and two queries
for splits in 17 22 33; do
  echo "== groups 2, splits $splits"
  STRATA_DECODE_FLASH_GROUPS=2 STRATA_DECODE_FLASH_SPLITS=$splits python3 ci/decode_splits.py flash \
    4096x1,32768x1,32768x2 int8 2>&1 | grep -v -i warn
done | tee -a "$OUT/time.txt"
# shellcheck disable=SC1091
. ci/sanitize.sh
STRATA_DECODE_FLASH_GROUPS=2 run_sanitizers 150 python3 ci/decode_case.py 4096x1,200x3
(OUT="$RS"; in_rs run_sanitizers 120 python3 ci/decode_case.py 4096x1,200x3)
git apply -R docs/notes/flash-two-groups.patch
git worktree remove -f /tmp/rs
