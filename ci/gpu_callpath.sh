#!/usr/bin/env bash
# One call on the lent H200 for the engine call path (issue 11): the GPU tests (capture + replay, lazy error words,
# threads x streams, torch.compile reduce-overhead, CuPy) and `bench --overhead`, results under $OUT.
# Build here first (sm_90 plugin + the abi3 loader; Python 3.12):
#   STRATA_TARGETS="cpu;sm_90" python3.12 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')"
# Usage on the device: bash ci/gpu_callpath.sh   (STRATA_KERNELS_COMMIT names the commit in the bench JSON)
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[ -f COMMIT ] && export STRATA_KERNELS_COMMIT=${STRATA_KERNELS_COMMIT:-$(cat COMMIT)}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -n 1
  python3 -m strata_kernels explain 2>&1 | head -n 12
} 2>&1 | tee "$OUT/env.txt"

status=0
timeout ${TESTS_TIMEOUT:-330} python3 -m pytest tests/gpu -q -rs -p no:cacheprovider --durations=8 2>&1 \
  | tee "$OUT/gpu_tests.txt"; status=$(( status | ${PIPESTATUS[0]} ))
timeout ${BENCH_TIMEOUT:-150} python3 -m strata_kernels bench --overhead --device cuda --calls ${CALLS:-10000} \
  --json "$OUT/overhead_h200.json" 2>&1 | tee "$OUT/overhead_h200.txt"; status=$(( status | ${PIPESTATUS[0]} ))

echo "== summary (exit $status) =="
tail -n 12 "$OUT/gpu_tests.txt"
tail -n 16 "$OUT/overhead_h200.txt"
exit $status
