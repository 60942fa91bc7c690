#!/usr/bin/env bash
# One call on the lent H200 for the decode kernel (issue 12): its GPU tests, parity of the decode kernels in every
# format, the decode bench (flash beside split and the chunk + merge decode, torch, and the copy floor) with GB/s and
# the CUDA-graph GPU time, and the sanitizers; results under $OUT.
# Build here first (sm_90 plugin + the abi3 loader; Python 3.12):
#   STRATA_TARGETS="cpu;sm_90" python3.12 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')"
# carry: strata_kernels/_loader.abi3.so strata_kernels/plugins
# Usage: STAGES="tests parity bench formats sanitize ncu" bash ci/gpu_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[ -f COMMIT ] && export STRATA_KERNELS_COMMIT=${STRATA_KERNELS_COMMIT:-$(cat COMMIT)}
STAGES=${STAGES:-tests parity bench formats sanitize}
SHAPES=${SHAPES:-4096x1,4096x8,32768x1,32768x8,32768x64,32768x256,131072x1,131072x64,131072x256}
VARIANTS=${VARIANTS:-flash,split,fp32}
status=0
has() { [[ " $STAGES " == *" $1 "* ]]; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -m strata_kernels explain 2>&1 | grep -E "sm_90|decode" | head -6
} 2>&1 | tee "$OUT/env.txt"

if has tests; then
  timeout ${TESTS_TIMEOUT:-200} python3 -m pytest ${TESTS:-tests/gpu} -q -rs -p no:cacheprovider 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -n 12; status=$(( status | ${PIPESTATUS[0]} ))
fi
if has parity; then
  timeout ${PARITY_TIMEOUT:-200} python3 -m strata_kernels parity --device cuda --variant flash,split --reps 1 \
    --json "$OUT/parity_decode.json" > "$OUT/parity_decode.txt" 2>&1; rc=$?; status=$(( status | rc ))
  grep -E "decode|PASS|FAIL|passed|failed" "$OUT/parity_decode.txt" | tail -n 40
fi
if has bench; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m strata_kernels bench --op decode --device cuda --variant "$VARIANTS" \
    --shapes "$SHAPES" --reps ${REPS:-20} --methods ${METHODS:-plugin,copy-floor,torch-fp32-sdpa} \
    --json "$OUT/bench_decode.json" > "$OUT/bench_decode.txt" 2>&1; rc=$?; status=$(( status | rc ))
  sed -n '/^context/,$p' "$OUT/bench_decode.txt"; [ $rc = 0 ] || tail -n 20 "$OUT/bench_decode.txt"
fi
if has formats; then
  for f in fp16 q4_0 k8v4; do
    timeout 120 python3 -m strata_kernels bench --op decode --device cuda --format $f --variant flash,fp32 \
      --shapes ${FORMAT_SHAPES:-4096x1,32768x64,32768x256} --reps 10 --methods plugin,copy-floor \
      --json "$OUT/bench_decode_$f.json" > "$OUT/bench_decode_$f.txt" 2>&1; status=$(( status | $? ))
    sed -n '/^context/,/^$/p' "$OUT/bench_decode_$f.txt"
  done
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
  . ci/sanitize.sh
  run_sanitizers ${SANITIZER_TIMEOUT:-150} python3 ci/sanitize_case.py flash; status=$(( status | $? ))
fi
if has ncu && command -v ncu >/dev/null; then
  stalls=$(for r in barrier short_scoreboard long_scoreboard wait math_pipe_throttle mio_throttle lg_throttle \
    not_selected selected dispatch_stall no_instruction branch_resolving membar tex_throttle imc_miss; do
    printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," $r; done)
  pipes="sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp16.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
  timeout 200 ncu --kernel-name regex:flash --launch-skip 2 --launch-count 2 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --metrics "${stalls}${pipes}" \
    python3 ci/decode_case.py 32768x64 > "$OUT/ncu_decode.txt" 2>&1
  grep -E "flash|Duration|Throughput|Achieved Occupancy|Registers|stalled|pipe|inst_executed|bank|issue_active|warps_active" "$OUT/ncu_decode.txt" | head -80
fi
echo "== exit $status =="
exit $status
