#!/usr/bin/env bash
# Issue 10: the context sweep at 2048 queries after the pair form's cache bar (PAIR_MAX_CELLS), on the lent GPU in one
# call of ~3-4 minutes: grouped by the rule and the five-query form (STRATA_GROUPED_PAIR=0) on caches of 8192 to
# 524288 cells beside the gather floors of the same run (sweep.txt, sweep_*.json), and an ncu summary of the
# attention kernel (grouped_ws_kernel) at 32768 and 524288 cells in both forms: time, DRAM and L2 traffic, L2 hit
# rate, instructions issued (ncu_ws.txt; the second call, L2 kept warm as in the bench): why the kernel's time grows
# with the cache where its gathers leave L2.
# Usage (the device's run): bash ci/gpu_pair_sweep.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
S=${SHAPES:-8192x2048,32768x2048,131072x2048,196608x2048,262144x2048,524288x2048}
for sw in unset 0; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  if [ "$sw" = unset ]; then unset STRATA_GROUPED_PAIR; else export STRATA_GROUPED_PAIR=$sw; fi
  m=plugin
  [ "$sw" = unset ] && m=plugin,gather-floor,gather-floor-grouped
  timeout 150 python3 -m strata_kernels bench --device cuda --variant grouped --reps 5 --shapes "$S" \
    --methods "$m" --json "$OUT/sweep_$sw.json" 2>&1 | grep -E "^[0-9]+x"
done | tee "$OUT/sweep.txt"
unset STRATA_GROUPED_PAIR
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,smsp__inst_issued.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
if command -v ncu > /dev/null; then
  for shape in 32768x2048 524288x2048; do
    for sw in 1 0; do
      echo "== $shape STRATA_GROUPED_PAIR=$sw"
      STRATA_GROUPED_PAIR=$sw timeout 100 ncu --clock-control none --cache-control none -k regex:grouped_ws -s 1 -c 1 \
        --metrics "$M" python3 ci/grouped_case.py "$shape" 2>&1 | grep -E "^ +(gpu__|dram__|lts__|smsp__|sm__)"
    done
  done | tee "$OUT/ncu_ws.txt"
fi
