#!/usr/bin/env bash
# On the lent H200 (device tool): the cuda12 family's sm_90 plugin (clang + PyPI's ptxas 12.9, launched through the
# CUDA driver API; issue 13 part 2) forced on the device, and the parity test of every sm_90 variant at the spec's
# sizes. The H200 has no PyPI CUDA 12 packages, so the plugin is built on the CPU machine and carried:
#   python -m strata_kernels wheel --family cuda12 --targets sm_90 --out /tmp/w \
#     && mkdir -p dist-cuda12 && unzip -o -j /tmp/w/strata_kernels_cuda12-*.whl 'strata_kernels_cuda12/libstrata_sm_90.so' -d dist-cuda12
# carry: dist-cuda12 (git-ignored). The loader and the CPU plugin are built here from the checkout (no CUDA).
# Usage: bash ci/gpu_cuda12.sh   -> $OUT/env.txt, $OUT/parity.txt, $OUT/parity.json, $OUT/table.md
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PLUGIN=$PWD/dist-cuda12/libstrata_sm_90.so
[ -f "$PLUGIN" ] || { echo "missing $PLUGIN: build it on the CPU machine and carry dist-cuda12 (see the header)"; exit 2; }
if ! ls strata_kernels/_loader*.so >/dev/null 2>&1; then
  STRATA_TARGETS=cpu python3 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')" \
    > "$OUT/build.txt" 2>&1 || { tail -n 30 "$OUT/build.txt"; exit 2; }
fi
# Only the carried plugin serves sm_90: the package holds the CPU plugin alone, and no per-user plugin is searched.
rm -f strata_kernels/plugins/libstrata_sm_*.so
export XDG_DATA_HOME=$(mktemp -d) STRATA_KERNELS_PLUGIN_PATH=$PWD/dist-cuda12 STRATA_KERNELS_TARGET=sm_90
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import json, strata_kernels.resolve as r, pathlib; m = r.read_manifest(pathlib.Path('$PLUGIN')); print('manifest:', m['target'], m['toolchain'], 'min_driver_version', m['min_driver_version'], 'variants', m['variants'])"
  readelf -d "$PLUGIN" | grep NEEDED
  python3 -m strata_kernels explain
} 2>&1 | tee "$OUT/env.txt"
grep -q "chosen: sm_90 .*dist-cuda12/libstrata_sm_90.so" "$OUT/env.txt" \
  || { echo "the carried cuda12 sm_90 plugin was not chosen for cuda:0 (see $OUT/env.txt)"; exit 3; }

status=0
timeout ${PARITY_TIMEOUT:-500} python3 -m strata_kernels parity --device cuda --reps 3 --json "$OUT/parity.json" 2>&1 \
  | tee "$OUT/parity.txt"; status=${PIPESTATUS[0]}
python3 - "$OUT/parity.json" > "$OUT/table.md" <<'PY' || status=$(( status | 4 ))
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | case | format | ctx x queries | status | err_new | err_old | ms |")
print("|---|---|---|---|---|---|---|---|")
for r in d["results"]:
    print(f"| {r['variant']} | {r['case']} {r['label']} | {r['fmt']} | {r['ctx']} x {r['n_q']} | {r['status']} "
          f"| {r['err_new']:.3g} | {r['err_old']:.3g} | {r['t_new_ms']:.3g} |")
PY
cat "$OUT/table.md"
echo "== cuda12 sm_90 parity: exit $status =="
exit $status
