#!/usr/bin/env bash
# Issue 10: the pair form's cache bar (cuda/dispatch.inc.j2, PAIR_MAX_CELLS: prompts on caches of more than 196608
# cells keep the five-query form, whose union pre-pass has the search path there), on the lent GPU in one call of
# ~2-3 minutes. Builds the CPU and sm_90 plugins at (256, 12); the bar's GPU test (which() on both sides of it); the
# bench of grouped at 2048 queries on caches of 131072 to 524288 cells by the rule, the form forced and off
# (bench_long.txt, bench_pair_*.json); each kernel's GPU time at 196608 and 524288 cells, the form forced and off
# (kernels_long.txt: the union's path shows in its time).
# Usage (the device's run): bash ci/gpu_pair_long.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
timeout 90 python3 -m pytest tests/gpu/test_grouped.py -q -p no:cacheprovider -k "pair_form_within_its_windows" \
  > "$OUT/tests.txt" 2>&1
tail -2 "$OUT/tests.txt"
S=${SHAPES:-131072x2048,163840x2048,196608x2048,262144x2048,524288x2048}
for sw in unset 1 0; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  if [ "$sw" = unset ]; then unset STRATA_GROUPED_PAIR; else export STRATA_GROUPED_PAIR=$sw; fi
  timeout 100 python3 -m strata_kernels bench --device cuda --variant grouped --reps 5 --shapes "$S" \
    --methods plugin --json "$OUT/bench_pair_$sw.json" 2>&1 | grep -E "^[0-9]+x"
done | tee "$OUT/bench_long.txt"
unset STRATA_GROUPED_PAIR
for sw in 1 0; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  STRATA_GROUPED_PAIR=$sw timeout 60 python3 ci/grouped_kernels.py 196608x2048 524288x2048 2>&1 | grep -v -i warn
done | tee "$OUT/kernels_long.txt"
