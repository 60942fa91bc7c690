#!/usr/bin/env bash
# One call on the lent H200 (device tool): GPU tests, parity and benchmark, results under $OUT.
# The plugins and the abi3 loader are built on the CPU machine (Python 3.12, nvcc 13.0, sm_90) and carried:
#   STRATA_TARGETS="cpu;sm_90" python3.12 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')"
# carry: strata_kernels/_loader.abi3.so strata_kernels/plugins .whl (pytest wheels; the H200 has no registry)
#        .wheels (the core cp312-abi3 wheel and the cuda13 family wheel, built here:
#                 STRATA_TARGETS=cpu python3.12 -m pip wheel . --no-deps -w .wheels
#                 python3.12 -m strata_kernels wheel --family cuda13 --out .wheels)
# Usage: bash ci/gpu_h200.sh [quick|full|wheels]   (SKIP_PARITY=1 / SKIP_BENCH=1 leave those steps out)
set -uo pipefail
MODE=${1:-full}
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  python3 -m strata_kernels explain
} 2>&1 | tee "$OUT/env.txt"

status=0
# Wheels as users install them (issue 5): a fresh venv (system site-packages for torch, which the GPU parity uses),
# the core and cuda13 wheels built on the CPU machine, --no-index; run from /tmp so the checkout is not imported.
if ls .wheels/strata_kernels-*.whl >/dev/null 2>&1; then
  WH=$PWD/.wheels
  (
    cd /tmp && unset PYTHONPATH && rm -rf /tmp/fresh && python3 -m venv --system-site-packages /tmp/fresh \
      && /tmp/fresh/bin/python -m pip install -q --no-index --no-cache-dir --find-links "$WH" strata-kernels strata-kernels-cuda13 \
      && { /tmp/fresh/bin/python -c "import torch" 2>/dev/null || {
             # torch is the user's framework, not ours: where the base Python keeps it outside the venv's view (user
             # site), point the venv at that one directory only.
             tdir=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))") \
             && echo "$tdir" > "$(/tmp/fresh/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_system_torch.pth" \
             && echo "torch from $tdir (appended after the venv's own packages)"; }; } \
      && /tmp/fresh/bin/python -m pip list 2>/dev/null | grep -i strata \
      && /tmp/fresh/bin/python -c "import strata_kernels, sys; print('imported from', strata_kernels.__file__)" \
      && /tmp/fresh/bin/strata-kernels explain \
      && timeout ${WHEEL_PARITY_TIMEOUT:-300} /tmp/fresh/bin/strata-kernels parity --device cuda --reps 3 --json "$OUT/wheel_parity.json"
  ) 2>&1 | tee "$OUT/wheels.txt"; status=$(( status | ${PIPESTATUS[0]} ))
fi
[ "$MODE" = wheels ] && { echo "== wheels only (exit $status) =="; exit $status; }

python3 -m pytest tests/gpu -q -rs 2>&1 | tee "$OUT/gpu_tests.txt"; status=$(( status | ${PIPESTATUS[0]} ))

if [ -z "${SKIP_PARITY:-}" ] && python3 -c "import strata_kernels.parity" 2>/dev/null; then
  args=(--device cuda --json "$OUT/parity.json" --reps 3)
  [ "$MODE" = quick ] && args+=(--quick)
  timeout ${PARITY_TIMEOUT:-330} python3 -m strata_kernels parity "${args[@]}" 2>&1 | tee "$OUT/parity.txt"; status=$(( status | ${PIPESTATUS[0]} ))
fi
if [ -z "${SKIP_BENCH:-}" ] && python3 -c "import strata_kernels.bench" 2>/dev/null; then
  args=(--device cuda --variant all --json "$OUT/bench.json")
  [ "$MODE" = quick ] && args+=(--shapes 2100x256 --reps 3)
  timeout ${BENCH_TIMEOUT:-150} python3 -m strata_kernels bench "${args[@]}" 2>&1 | tee "$OUT/bench.txt"; status=$(( status | ${PIPESTATUS[0]} ))
fi
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    timeout ${SANITIZER_TIMEOUT:-90} compute-sanitizer --tool $tool --error-exitcode 9 python3 ci/sanitize_case.py > "$OUT/sanitizer_$tool.txt" 2>&1
    rc=$?; status=$(( status | rc ))
    echo "compute-sanitizer $tool: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|sanitizer workload' "$OUT/sanitizer_$tool.txt" | tr '\n' ' ')" >> "$OUT/sanitizer.txt"
  done
  cat "$OUT/sanitizer.txt"
fi

echo "== summary (exit $status) =="
[ -f "$OUT/wheels.txt" ] && grep -E "strata|chosen|passed|failed|parity" "$OUT/wheels.txt" | tail -n 30
tail -n 3 "$OUT/gpu_tests.txt"
[ -f "$OUT/parity.txt" ] && tail -n 20 "$OUT/parity.txt"
[ -f "$OUT/sanitizer.txt" ] && cat "$OUT/sanitizer.txt"
[ -f "$OUT/bench.txt" ] && tail -n 40 "$OUT/bench.txt"
exit $status
