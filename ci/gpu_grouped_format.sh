#!/usr/bin/env bash
# One call on the lent H200 for one KV format of grouped beside v1, the format's default before grouped took it
# (issue 10; FORMAT fp16 (default) or k8v4): build the loader and the CPU and sm_90 plugins (every prebuilt geometry),
# parity of grouped (every format it takes) at each geometry, the FORMAT prompt bench of grouped beside v1 and torch
# FP32 gather + SDPA, the context sweep, the GPU tests, both sanitizers, and grouped against v1 at (128, 4) and
# (128, 8) (the small-grid rule); everything tarred into $OUT/results.tgz (the device tool returns few files).
#   STRATA_KERNELS_COMMIT=<hash> FORMAT=k8v4 bash ci/gpu_grouped_format.sh
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
R=$OUT/r
mkdir -p "$R"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
status=0
OUT=$R/geometries STAGES="build parity" VARIANTS=grouped DEADLINE_S=300 bash ci/gpu_geometries.sh > "$R/geometries.log" 2>&1
grep -E "^parity [0-9]+x[0-9]+: exit|^build:" "$R/geometries.log"; status=$(( status | $(grep -c "^parity .*: exit [^0]" "$R/geometries.log") ))
FORMAT=${FORMAT:-fp16}
OUT=$R FORMAT=$FORMAT VARIANTS=grouped,v1 METHODS=plugin,torch-fp32-sdpa SWEEP_VARIANTS=grouped,v1 SWEEP_METHODS=plugin \
  STAGES="bench sweep tests sanitize" REPS=${REPS:-10} BENCH_TIMEOUT=200 TESTS_TIMEOUT=200 SANITIZER_TIMEOUT=100 \
  bash ci/gpu_grouped.sh > "$R/log.txt" 2>&1; status=$(( status | $? ))
sed -n '/^context/,/^$/p' "$R/bench.txt" "$R/bench_sweep.txt" | cut -c1-130
tail -n 3 "$R/gpu_tests.txt"; cat "$R/sanitizer.txt" 2>/dev/null
for g in 128x4 128x8; do
  timeout 90 python3 -m strata_kernels bench --device cuda --format $FORMAT --head-dim ${g%x*} --group ${g#*x} \
    --variant grouped,v1 --shapes 2100x256,32768x2048 --reps 5 --methods plugin --json "$R/bench_${FORMAT}_$g.json" \
    > "$R/bench_${FORMAT}_$g.txt" 2>&1; status=$(( status | $? ))
  echo "== $g"; sed -n '/^context/,/^$/p' "$R/bench_${FORMAT}_$g.txt" | cut -c1-100
done
tar czf "$OUT/results.tgz" -C "$OUT" r
echo "== exit $status =="
exit $status
