#!/usr/bin/env bash
# Source-level ncu profile of the grouped prompt kernels (union pre-pass and attention) at 32768 x 2048 on the lent
# GPU: per kernel the SpeedOfLight / warp-state summary and the SASS lines with the most stall samples and the most
# excessive shared-memory wavefronts (ci/ncu_source_top.py). Results under $OUT. Usage: bash ci/grouped_profile.sh
# Other kernels: KERNELS (name regexes) and CASE (the workload), e.g. the decode kernel at 64 queries:
#   KERNELS=flash_kernel CASE="python3 ci/decode_case.py 32768x64" bash ci/grouped_profile.sh
# NCU_ARGS: more ncu options, e.g. "--cache-control none" to keep L2 warm between the workload's calls (a decode call
# of one query reads ~2 MB, which back-to-back calls find in L2; ncu flushes the caches before each kernel otherwise).
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
for k in ${KERNELS:-grouped_union_kernel grouped_kernel}; do
  echo "== $k"
  timeout ${NCU_TIMEOUT:-200} ncu --clock-control none -k regex:"$k" -s 1 -c 1 --import-source no \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section InstructionStats \
    --section LaunchStats --section Occupancy ${NCU_ARGS:-} \
    -o /tmp/prof_$k -f ${CASE:-python3 ci/grouped_case.py} > "$OUT/ncu_$k.log" 2>&1 || tail -5 "$OUT/ncu_$k.log"
  ncu -i /tmp/prof_$k.ncu-rep --print-summary none > "$OUT/ncu_$k.txt" 2>&1
  ncu -i /tmp/prof_$k.ncu-rep --page source --csv --print-source sass > /tmp/src_$k.csv 2>&1
  python3 ci/ncu_source_top.py /tmp/src_$k.csv > "$OUT/ncu_src_$k.txt" 2>&1
  grep -E "Duration|Elapsed Cycles|Issued Ipc|Warp Cycles Per Issued|Executed Instructions|Registers|Grid Size|Block Size|\
Achieved Occupancy|Stall|No Eligible" "$OUT/ncu_$k.txt"
  head -43 "$OUT/ncu_src_$k.txt"; sed -n '/== regions/,/^$/p' "$OUT/ncu_src_$k.txt"
done
