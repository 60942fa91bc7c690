#!/usr/bin/env bash
# Issue 10, prompt notes item 35: where grouped's pair form spends a tile, by timing each role alone, and two
# candidates, in one call of ~7 minutes on the lent GPU. Builds the loader and the CPU and sm_90 plugins at (256, 12)
# five ways, twice over:
# - main;
# - docs/notes/pair-producer-alone.patch (the consumers only pass the hand-offs: the producer's time alone) and
#   docs/notes/pair-consumers-alone.patch (the producer copies and converts nothing: the consumers' time alone), both
#   TIMING ONLY (their results are wrong);
# - the candidates docs/notes/pair-split-full.patch (the pair form with one full barrier a consumer) and
#   docs/notes/ws-ks-early.patch (both forms of grouped_ws: a q·k group's K scales loaded before its MMAs), each
#   checked against fp32 first (its two calls' bits too; quick_split.txt, quick_ksearly.txt).
# Only ws-ks-early changes the five-query form. Each build's kernel times with the pair form forced at 32768 x 2048
# and 1500 x 1500, and grouped's decode calls (the five-query form) at 64 and 256 queries (kernels.txt). Reverts what
# it applied.
# Usage (the device's run): bash ci/gpu_pair_roles.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
patch_of() {
  case $1 in
    main) echo "" ;;
    split) echo docs/notes/pair-split-full.patch ;;
    ksearly) echo docs/notes/ws-ks-early.patch ;;
    *) echo "docs/notes/pair-$1-alone.patch" ;;
  esac
}
for form in main producer consumers split ksearly main producer consumers split ksearly; do  # (not in a pipe)
  switch_patch "$(patch_of "$form")"
  GEOMS=256x12 build_plugins "/tmp/b_$form" "$OUT/build_$form.txt"
  if { [ "$form" = split ] || [ "$form" = ksearly ]; } && [ ! -f "$OUT/quick_$form.txt" ]; then
    timeout 150 python3 ci/grouped_quick.py prompt:2100x300:1 prompt:4096x64:1 prompt:1500x23:1 prompt:32768x2048:1 \
      prompt:2100x300:0 decode:4096x64 decode:32768x256 2>&1 | grep -v -i warn | tee "$OUT/quick_$form.txt"
  fi
  { echo "== $form"
    STRATA_GROUPED_PAIR=1 CASE_VARIANT=grouped timeout 90 python3 ci/grouped_kernels.py 32768x2048 1500x1500 \
      decode:32768x64 decode:32768x256 2>&1 | grep -v -i warn; } \
    | tee -a "$OUT/kernels.txt"
done
