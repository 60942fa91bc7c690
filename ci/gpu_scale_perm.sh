#!/usr/bin/env bash
# Prompt notes item 34: docs/notes/ws-scale-perm.patch (grouped_ws's and the pair form's per-cell K scales, V scales
# and membership bits stored so that a consumer thread's two columns of two n-tiles are one 16-byte load; compiled for
# sm_90a, never run) on the lent GPU, in one call of ~6 minutes. Builds the loader and the CPU and sm_90 plugins at
# (256, 12) with the patch; then a check against fp32 (the pair form, the five-query form, decode calls; two calls'
# bits) (quick.txt), memcheck and racecheck of grouped's prompt (pair form forced) and decode calls (sanitizer*.txt);
# then each kernel's GPU time with and without the patch, alternated twice (a rebuild between), at the prompt's
# 32768 x 2048 (pair form), 2100 x 128 (five-query form) and decode 64 / 256 queries (kernels.txt). Reverts the patch.
# Usage (the device's run): bash ci/gpu_scale_perm.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
switch_patch docs/notes/ws-scale-perm.patch
GEOMS=256x12 build_plugins /tmp/b1 "$OUT/build.txt"
timeout 120 python3 ci/grouped_quick.py prompt:2100x300:1 prompt:4096x64:1 prompt:2100x300:0 \
  prompt:1500x23:0 decode:4096x64 decode:32768x256 2>&1 | grep -v -i warn | tee "$OUT/quick.txt"
# shellcheck disable=SC1091
. ci/sanitize.sh
STRATA_GROUPED_PAIR=1 run_sanitizers 150 python3 ci/holes_case.py grouped both
for form in patch main patch main; do  # (not in a pipe: switch_patch keeps its state)
  if [ "$form" = patch ]; then switch_patch docs/notes/ws-scale-perm.patch; else switch_patch ""; fi
  GEOMS=256x12 build_plugins /tmp/b_$form "$OUT/build_$form.txt"
  { echo "== $form"
    CASE_VARIANT=grouped timeout 60 python3 ci/grouped_kernels.py 32768x2048 2100x128 decode:32768x64 \
      decode:32768x256 2>&1 | grep -v -i warn; } 2>&1 | grep -v "^$" | tee -a "$OUT/kernels.txt"
done
