#!/usr/bin/env bash
# Issue 10, prompt notes item 39: the pair form's union pre-pass with a search path in bounded buffers (two blocks a
# multiprocessor; a group whose union outgrows them concatenates), and the rule that runs the form at every cache
# length, on the lent GPU in one call of ~4-6 minutes. Builds the CPU and sm_90 plugins at (256, 12); then
# - compute-sanitizer memcheck and racecheck of the pair form's prompts with the search path forced, holes and a
#   width-0 query, then a union past the buffers (sanitizer*.txt, sanitizer_over*.txt);
# - the GPU tests of the pair form and of the union's paths (tests.txt);
# - each kernel's GPU time in the pair form at 65536-524288 x 2048, the union's search path by the rule and off
#   (STRATA_GROUPED_UNION_SEARCH=0: windows, then the merge path) (kernels.txt);
# - the context sweep at 2048 queries, 8192-524288 cells, by the rule and in the five-query form, with the gather
#   floors of the same run (sweep.txt, sweep_*.json).
# Usage (the device's run): bash ci/gpu_pair_search.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
# shellcheck disable=SC1091
. ci/sanitize.sh
export STRATA_GROUPED_PAIR=1 STRATA_GROUPED_UNION_SEARCH=1
run_sanitizers 120 python3 ci/holes_case.py grouped prompt
for t in memcheck racecheck; do mv "$OUT/sanitizer_$t.txt" "$OUT/sanitizer_holes_$t.txt"; done
mv "$OUT/sanitizer.txt" "$OUT/sanitizer_holes.txt"
run_sanitizers 120 python3 ci/pair_over_case.py
for t in memcheck racecheck; do mv "$OUT/sanitizer_$t.txt" "$OUT/sanitizer_over_$t.txt"; done
mv "$OUT/sanitizer.txt" "$OUT/sanitizer_over.txt"
unset STRATA_GROUPED_PAIR STRATA_GROUPED_UNION_SEARCH
timeout 200 python3 -m pytest tests/gpu/test_grouped.py -q -p no:cacheprovider \
  -k "pair or union_search or stage or disjoint or flags" > "$OUT/tests.txt" 2>&1
tail -3 "$OUT/tests.txt"
K="65536x2048 131072x2048 196608x2048 262144x2048 524288x2048"
for us in unset 0; do
  echo "== STRATA_GROUPED_PAIR=1 STRATA_GROUPED_UNION_SEARCH=$us"
  if [ "$us" = unset ]; then unset STRATA_GROUPED_UNION_SEARCH; else export STRATA_GROUPED_UNION_SEARCH=$us; fi
  # shellcheck disable=SC2086
  STRATA_GROUPED_PAIR=1 timeout 90 python3 ci/grouped_kernels.py $K 2>&1 | grep -v -i warn
done | tee "$OUT/kernels.txt"
unset STRATA_GROUPED_UNION_SEARCH
S=${SHAPES:-8192x2048,32768x2048,131072x2048,196608x2048,262144x2048,524288x2048}
for sw in unset 0; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  if [ "$sw" = unset ]; then unset STRATA_GROUPED_PAIR; else export STRATA_GROUPED_PAIR=$sw; fi
  m=plugin
  [ "$sw" = unset ] && m=plugin,gather-floor,gather-floor-grouped
  timeout 150 python3 -m strata_kernels bench --device cuda --variant grouped --reps 5 --shapes "$S" \
    --methods "$m" --json "$OUT/sweep_$sw.json" 2>&1 | grep -E "^[0-9]+x"
done | tee "$OUT/sweep.txt"
