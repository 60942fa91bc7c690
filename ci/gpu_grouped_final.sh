#!/usr/bin/env bash
# The closing run of the grouped prompt kernel on the lent H200 (issue 10), one call: build the sm_90 plugin, the GPU
# time of each of its kernels, the bench of every INT8 prompt variant with its baselines and floors, the context
# sweep, parity, the grouped and flash GPU tests, both sanitizers and an ncu summary; everything tarred under $OUT.
#   STRATA_KERNELS_COMMIT=<hash> bash ci/gpu_grouped_final.sh   (carry strata_kernels/_loader.abi3.so)
# STAGES (default "parity bench sweep sanitize ncu"), REPS, BENCH_TIMEOUT and SANITIZER_TIMEOUT pass to ci/gpu_grouped.sh.
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
R=$OUT/r
mkdir -p "$R"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
MAX_JOBS=16 STRATA_KERNELS_BUILD_DIR=/tmp/b STRATA_TARGETS="cpu;sm_90" python3 -c \
  "from strata_kernels import build; build.build(with_loader=False, install_dir='strata_kernels/plugins')" \
  > "$R/build.txt" 2>&1 || { tail -20 "$R/build.txt"; exit 1; }
python3 ci/grouped_kernels.py 32768x2048 131072x2048 1500x1500 2100x256 8192x2048 524288x2048 2>&1 \
  | grep -v -i warn | tee "$R/kernels.txt"
timeout 120 python3 -m pytest tests/gpu/test_grouped.py tests/gpu/test_flash_decode.py -q 2>&1 \
  | tee "$R/gpu_tests.txt" | tail -3
OUT=$R STAGES="${STAGES:-parity bench sweep sanitize ncu}" REPS=${REPS:-10} BENCH_TIMEOUT=${BENCH_TIMEOUT:-220} \
  SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-120} bash ci/gpu_grouped.sh > "$R/log.txt" 2>&1
# each summary only where its stage ran (STAGES may leave some out)
[ -f "$R/parity_grouped.txt" ] && grep -E "PASSED|FAIL" "$R/parity_grouped.txt" | tail -2
[ -f "$R/bench.txt" ] && sed -n '/^context/,/^$/p' "$R/bench.txt" | cut -c1-120
[ -f "$R/bench_sweep.txt" ] && sed -n '/^context/,/^$/p' "$R/bench_sweep.txt" | cut -c1-100
[ -f "$R/sanitizer.txt" ] && cat "$R/sanitizer.txt"
[ -f "$R/ncu_grouped.txt" ] && grep -E "Duration|Issue Slots|Registers Per|Warp Cycles Per Issued|hmma" "$R/ncu_grouped.txt" | head -12
tar czf "$OUT/results.tgz" -C "$OUT" r
