#!/usr/bin/env bash
# Issue 10, prompt notes items 33 and 35: grouped's pair form as it stands (cuda/gpair.cu.j2, the `pair` switch of
# cuda/grouped_ws.inc.j2, the CUDA dispatch's pair_form: INT8 prompts at (256, 12) on sm_90 from 128 queries), with
# PATCH applied if given (a candidate; docs/notes/pair-land-next.patch, one full barrier a consumer and the union
# pre-pass's windows-only block in 64 KB, landed this way on 2026-12-05), on the lent GPU, in one call of ~2-6
# minutes. Builds the loader and the CPU and sm_90 plugins at (256, 12); then, in order:
# - compute-sanitizer memcheck and racecheck of the pair form's prompt calls (STRATA_GROUPED_PAIR=1, holes, a width-0
#   query) (sanitizer*.txt; call2 also carried a fallback probe for hazards, ci/pair-cons.patch, not needed and gone);
# - a check against fp32: grouped with the form by the rule, forced and off, two calls' bits, which() (quick.txt);
# - parity of gpair (the form forced at every size) and grouped at (256, 12) (parity.txt); the GPU tests of the pair
#   form, of the union's stage (the patch's: a window past UNION_STAGE_MAX entries) and of its clusters (tests.txt);
# - each kernel's GPU time with the form on and off at the prompt shapes and below the bar (kernels.txt);
# - the bench at the six shapes: auto (the form), v2, torch FP32 gather + SDPA and both gather floors
#   (bench_prompt.*), then grouped with the form off (bench_off.*).
# Usage (the device's run): [PATCH=a patch file] [SHAPES=32768x2048,...] [QUICK=1: up to the GPU tests] \
#   bash ci/gpu_pair_land.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
switch_patch "${PATCH:-}"  # (a candidate on top of the tree, reverted at the exit)
GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
# QUICK (a call with little device time left): the checks, the GPU tests but the union's clusters', and the pair
# form's kernels at two shapes; no parity runs, no bench
TESTS_K="pair or stage or union_in_clusters" PAIRS="1 0"
KSHAPES="32768x2048 1500x1500 2100x256 2100x192 2100x128 4096x64"
[ -n "${QUICK:-}" ] && TESTS_K="pair or stage" KSHAPES="32768x2048 2100x128" PAIRS=1
SHAPES=${SHAPES:-32768x2048,131072x2048,1500x1500,2100x256,2100x192,2100x128}  # the bench's (a short call: fewer)
# shellcheck disable=SC1091
. ci/sanitize.sh
STRATA_GROUPED_PAIR=1 run_sanitizers 120 python3 ci/holes_case.py grouped prompt
timeout 120 python3 ci/grouped_quick.py prompt:2100x300 prompt:4096x64:1 prompt:1500x23:1 prompt:2100x300:0 \
  prompt:32768x256 2>&1 | grep -v -i warn | tee "$OUT/quick.txt"
timeout 150 python3 -m pytest tests/gpu/test_grouped.py -q -p no:cacheprovider -k "$TESTS_K" \
  > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt"
if [ -z "${QUICK:-}" ]; then
  parity_at gpair 256x12
  parity_at grouped 256x12
fi
for sw in $PAIRS; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  # shellcheck disable=SC2086
  STRATA_GROUPED_PAIR=$sw timeout 60 python3 ci/grouped_kernels.py $KSHAPES 2>&1 | grep -v -i warn
done | tee "$OUT/kernels.txt"
[ -n "${QUICK:-}" ] && exit 0
timeout 150 python3 -m strata_kernels bench --device cuda --variant auto,v2 --reps 10 \
  --shapes "$SHAPES" \
  --methods plugin,torch-fp32-sdpa,gather-floor,gather-floor-grouped \
  --json "$OUT/bench_prompt.json" > "$OUT/bench_prompt.txt" 2>&1
grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_prompt.txt" | head -30
STRATA_GROUPED_PAIR=0 timeout 80 python3 -m strata_kernels bench --device cuda --variant grouped --reps 10 \
  --shapes "$SHAPES" \
  --methods plugin --json "$OUT/bench_off.json" \
  > "$OUT/bench_off.txt" 2>&1
grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_off.txt" | head -12
