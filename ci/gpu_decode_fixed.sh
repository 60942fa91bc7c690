#!/usr/bin/env bash
# Issue 12, decode notes item 9 (its last entry): how much of grouped's decode call at 64 and 256 queries is a block's
# fixed part, in one call of ~3 minutes on the lent GPU. Builds the loader and the CPU and sm_90 plugins at (256, 12)
# as main and with docs/notes/ws-no-tiles.patch (TIMING ONLY: every block's tile ranges emptied, so grouped_ws runs
# its launch, items, q, first copies and epilogue only), alternated twice, and times each kernel of grouped's decode
# calls at 32768 cells x 8, 64 and 256 queries and of the prompt at 2100 x 256 (kernels.txt). Under programmatic
# dependent launch grouped_ws's time includes its wait for the union pre-pass, in both builds. Reverts the patch.
# Usage (the device's run): bash ci/gpu_decode_fixed.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
for form in main probe main probe; do  # (not in a pipe: switch_patch keeps its state)
  if [ "$form" = probe ]; then switch_patch docs/notes/ws-no-tiles.patch; else switch_patch ""; fi
  GEOMS=256x12 build_plugins "/tmp/b_$form" "$OUT/build_$form.txt"
  { echo "== $form"
    CASE_VARIANT=grouped timeout 90 python3 ci/grouped_kernels.py decode:32768x8 decode:32768x64 decode:32768x256 \
      2100x256 2>&1 | grep -v -i warn; } | tee -a "$OUT/kernels.txt"
done
