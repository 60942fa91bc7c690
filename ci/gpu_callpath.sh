#!/usr/bin/env bash
# One call on the lent H200 for the engine call path (issue 11), results under $OUT:
#   tests     pytest tests/gpu (capture + replay, lazy error words, threads x streams, torch.compile reduce-overhead,
#             opcheck, CuPy, no per-call allocation by the torch ops)              -> gpu_tests.txt
#   overhead  strata-kernels bench --overhead (plain call, plan.run, torch op, its kernel without the dispatcher,
#             bare loader, torch.add; 10,000 calls each)                          -> overhead_h200.txt / .json
#   sanitize  compute-sanitizer memcheck and racecheck over ci/sanitize_callpath.py (plan.run, plain calls and
#             torch ops eager + CUDA-graph capture + replay; bad ids eager and in a replay, reported lazily)
#                                                                                 -> sanitizer_{memcheck,racecheck}.txt, sanitizer.txt
# Build here first (sm_90 plugin + the abi3 loader; Python 3.12), and carry both:
#   STRATA_TARGETS="cpu;sm_90" python3.12 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')"
#   carry: strata_kernels/_loader.abi3.so strata_kernels/plugins
# Usage on the device: STAGES="tests overhead sanitize" bash ci/gpu_callpath.sh   (the default runs all three, ~5 min;
# STRATA_KERNELS_COMMIT or a COMMIT file names the commit in the bench JSON)
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[ -f COMMIT ] && export STRATA_KERNELS_COMMIT=${STRATA_KERNELS_COMMIT:-$(cat COMMIT)}
STAGES=${STAGES:-tests overhead sanitize}
has() { [[ " $STAGES " == *" $1 "* ]]; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -n 1
  compute-sanitizer --version 2>&1 | tail -n 1
  python3 -m strata_kernels explain 2>&1 | head -n 12
} 2>&1 | tee "$OUT/env.txt"

status=0
if has tests; then
  timeout ${TESTS_TIMEOUT:-150} python3 -m pytest tests/gpu -q -rs -p no:cacheprovider --durations=8 2>&1 \
    | tee "$OUT/gpu_tests.txt" | tail -n 12; status=$(( status | ${PIPESTATUS[0]} ))
fi
if has overhead; then
  timeout ${BENCH_TIMEOUT:-100} python3 -m strata_kernels bench --overhead --device cuda --calls ${CALLS:-10000} \
    --json "$OUT/overhead_h200.json" > "$OUT/overhead_h200.txt" 2>&1; rc=$?; status=$(( status | rc ))
  sed -n '/^Host time/,$p' "$OUT/overhead_h200.txt"; [ $rc = 0 ] || tail -n 20 "$OUT/overhead_h200.txt"
fi
if has sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    . ci/sanitize.sh
    run_sanitizers ${SANITIZER_TIMEOUT:-100} python3 ci/sanitize_callpath.py; status=$(( status | $? ))
  else
    echo "compute-sanitizer: not found on PATH (stage sanitize not run)" | tee "$OUT/sanitizer.txt"; status=1
  fi
fi
echo "== exit $status (stages: $STAGES) =="
exit $status
