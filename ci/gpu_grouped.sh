#!/usr/bin/env bash
# One call on the lent H200 for the grouped prompt kernel (issue 10): its GPU tests, parity, the bench of every INT8
# (or FORMAT) prompt variant beside the torch baselines and the gather floors, sanitizers, and an ncu summary; results under $OUT.
# The sm_90 plugin and the abi3 loader are built on the CPU machine and carried (see ci/gpu_h200.sh):
#   STRATA_KERNELS_BUILD_DIR=/work/build-main STRATA_TARGETS="cpu;sm_90" python3.12 -c \
#     "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')"
# carry: strata_kernels/_loader.abi3.so strata_kernels/plugins
# Usage: STAGES="tests bench parity sanitize ncu" SHAPES=... bash ci/gpu_grouped.sh
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
STAGES=${STAGES:-bench tests parity sanitize sweep ncu}
export STRATA_KERNELS_COMMIT=${STRATA_KERNELS_COMMIT:-unknown}   # the tree travels without .git
SHAPES=${SHAPES:-32768x2048,131072x2048,1500x1500,2100x256}
FORMAT=${FORMAT:-int8}   # fp16: VARIANTS=grouped,v1 SWEEP_VARIANTS=grouped,v1 METHODS=plugin,torch-fp32-sdpa (the floors are INT8's)
VARIANTS=${VARIANTS:-grouped,v2,imma,v1}
status=0
has() { [[ " $STAGES " == *" $1 "* ]]; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -m strata_kernels explain | grep -E "sm_90|would run|chosen" | head -5
} 2>&1 | tee "$OUT/env.txt"

if has bench; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m strata_kernels bench --device cuda --format "$FORMAT" --variant "$VARIANTS" --shapes "$SHAPES" \
    --reps ${REPS:-10} --methods ${METHODS:-plugin,gather-floor,gather-floor-grouped,torch-fp32-sdpa} \
    --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; rc=$?; status=$(( status | rc ))
  sed -n '/^context/,$p' "$OUT/bench.txt"; [ $rc = 0 ] || tail -20 "$OUT/bench.txt"
fi
if has sweep; then
  timeout ${SWEEP_TIMEOUT:-120} python3 -m strata_kernels bench --device cuda --format "$FORMAT" \
    --variant ${SWEEP_VARIANTS:-grouped,v2} --shapes ${SWEEP_SHAPES:-8192x2048,524288x2048} --reps 5 \
    --methods ${SWEEP_METHODS:-plugin,gather-floor-grouped} \
    --json "$OUT/bench_sweep.json" > "$OUT/bench_sweep.txt" 2>&1; status=$(( status | $? ))
  sed -n '/^context/,$p' "$OUT/bench_sweep.txt"
fi
if has formats; then
  for f in fp16 k8v4 q4_0; do
    timeout 120 python3 -m strata_kernels bench --device cuda --format $f --shapes "$SHAPES" --reps 5 \
      --methods plugin --json "$OUT/bench_$f.json" 2>&1 | sed -n '/^context/,$p'
  done
fi
if has tests; then
  timeout ${TESTS_TIMEOUT:-150} python3 -m pytest tests/gpu -q -rs 2>&1 | tee "$OUT/gpu_tests.txt" | tail -8; status=$(( status | ${PIPESTATUS[0]} ))
fi
if has parity; then
  timeout ${PARITY_TIMEOUT:-300} python3 -m strata_kernels parity --device cuda --variant grouped --reps 3 \
    --json "$OUT/parity_grouped.json" > "$OUT/parity_grouped.txt" 2>&1; rc=$?; status=$(( status | rc ))
  tail -n 25 "$OUT/parity_grouped.txt"
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
  . ci/sanitize.sh
  run_sanitizers ${SANITIZER_TIMEOUT:-150} python3 ci/sanitize_case.py ${SANITIZE_VARIANTS:-grouped}
  status=$(( status | $? ))
fi
if has ncu && command -v ncu >/dev/null; then
  timeout 240 ncu --clock-control none -k regex:grouped -c 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    --section InstructionStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active" python3 ci/grouped_case.py > "$OUT/ncu_grouped.txt" 2>&1
  grep -E "grouped|Duration|Issue Slots|Registers Per|Achieved Active|Warp Cycles Per Issued|hmma|stalled" \
    "$OUT/ncu_grouped.txt" | awk '$NF+0 >= 0.05 || !/stalled/' | head -80
fi
echo "== exit $status =="
exit $status
