#!/usr/bin/env bash
# One call on the lent H200 for the prebuilt geometries (issue 14): build the sm_90 plugin from backends/cuda.toml (so
# it carries every prebuilt (head_dim, G) pair), run the parity test at the spec's sizes for every variant the plugin
# holds at each of its geometries, and bench prompt and decode at (128, 4), (128, 8) and (256, 12); results under $OUT.
# The geometries and variants are read from the built plugin's manifest, so a pair or a variant added to the table is
# covered without editing this file. Planned for ~6 minutes on the H200 (16 cores; estimated, not yet run there):
# build ~1 min (8 pairs x ~22 CPU s), parity ~25 s per geometry (8), bench ~10-15 s per call (6). If the deadline cuts
# the bench, run it alone in a second call: STAGES="build bench" (the build is then a no-op only on a warm machine).
#
# Run from the repository root (the tree may travel without .git):
#   STRATA_KERNELS_COMMIT=$(git rev-parse --short HEAD) bash ci/gpu_geometries.sh
# Optional: STAGES="build parity bench" (default all three), VARIANTS (default: every variant the plugin holds), BENCH_GEOMETRIES="128x4 128x8 256x12",
#   BENCH_SHAPES=32768x2048,2100x256 (prompt), DECODE_SHAPES=32768x1,32768x8 (decode), PARITY_TIMEOUT=120 (per geometry),
#   DEADLINE_S=540 (every step ends by then), PARITY_ARGS (default "--reps 1": correctness, not timing), MAX_JOBS (default: all cores), STRATA_KERNELS_BUILD_DIR (default /tmp/strata-geometries-build).
# A carried loader (strata_kernels/_loader.abi3.so, built on the CPU machine as ci/gpu_h200.sh says) is used when
# present; otherwise the build makes one. Exit status: 0 when every step passed and every (geometry, variant) ran.
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export STRATA_KERNELS_COMMIT=${STRATA_KERNELS_COMMIT:-unknown}
export STRATA_KERNELS_BUILD_DIR=${STRATA_KERNELS_BUILD_DIR:-/tmp/strata-geometries-build}
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
PY=${PYTHON:-python3}
STAGES=${STAGES:-build parity bench}
BENCH_GEOMETRIES=${BENCH_GEOMETRIES:-128x4 128x8 256x12}
BENCH_SHAPES=${BENCH_SHAPES:-32768x2048,2100x256}
DECODE_SHAPES=${DECODE_SHAPES:-32768x1,32768x8}
# DEVICE, PLUGIN and PARITY_ARGS exist to dry-run the script's logic on the CPU plugin (DEVICE=cpu
# PLUGIN=strata_kernels/plugins/libstrata_cpu.so STAGES="parity bench" PARITY_ARGS=--quick); leave them alone on the H200.
DEVICE=${DEVICE:-cuda}
PLUGIN=${PLUGIN:-strata_kernels/plugins/libstrata_sm_90.so}
PARITY_ARGS=${PARITY_ARGS:---reps 1}
status=0
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-540}   # the device tool stops a command at 600 s: end every step by then, results kept
# cap SECONDS -> SECONDS, or what is left before the deadline if less (at least 1)
cap() { local rem=$(( DEADLINE_S - ($(date +%s) - START) )); (( rem < $1 )) && echo $(( rem > 1 ? rem : 1 )) || echo "$1"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  echo "commit $STRATA_KERNELS_COMMIT"
} 2>&1 | tee "$OUT/env.txt"

if has build; then
  step "build cpu;sm_90 from backends/*.toml into strata_kernels/plugins"
  loader=1; ls strata_kernels/_loader*.so >/dev/null 2>&1 && loader=0
  start=$(date +%s)
  STRATA_TARGETS="cpu;sm_90" timeout "$(cap ${BUILD_TIMEOUT:-300})" $PY -c "
import sys
from strata_kernels import build
res = build.build(with_loader=bool($loader), install_dir='strata_kernels/plugins', jobs=int(sys.argv[1]))
print('built', sorted(res.built), 'skipped', res.skipped)
sys.exit(0 if 'sm_90' in res.built else 1)" "$MAX_JOBS" > "$OUT/build.txt" 2>&1
  rc=$?; status=$(( status | rc ))
  echo "build: exit $rc, $(( $(date +%s) - start )) s wall (MAX_JOBS=$MAX_JOBS, loader built: $loader)" | tee -a "$OUT/build.txt"
  [ $rc = 0 ] || { tail -30 "$OUT/build.txt"; echo "== exit $status (no sm_90 plugin) =="; exit $status; }
fi

# The plugin's own word on what it holds: geometries as "HDxG" and the variants (dispatched and test-only).
$PY - "$PLUGIN" > "$OUT/plugin.json" <<'EOF' || { echo "cannot read $PLUGIN's manifest"; exit 1; }
import json, os, sys
from strata_kernels import resolve
m = resolve.read_manifest(sys.argv[1])
json.dump({"plugin": sys.argv[1], "bytes": os.path.getsize(sys.argv[1]), "variants": m["variants"],
           "geometries": [f"{g['head_dim']}x{g['group']}" for g in m["geometries"]]}, sys.stdout)
EOF
GEOMETRIES=$($PY -c "import json; print(' '.join(json.load(open('$OUT/plugin.json'))['geometries']))")
VARIANTS=${VARIANTS:-$($PY -c "import json; print(','.join(json.load(open('$OUT/plugin.json'))['variants']))")}
echo "$(basename "$PLUGIN"): geometries $GEOMETRIES; variants $VARIANTS" | tee -a "$OUT/env.txt"
$PY -m strata_kernels explain 2>&1 | grep -E "sm_90|geometr|chosen" | head -8 | tee -a "$OUT/env.txt"

if has parity; then
  for g in $GEOMETRIES; do
    hd=${g%x*}; grp=${g#*x}
    step "parity HD $hd G $grp"
    timeout "$(cap ${PARITY_TIMEOUT:-120})" $PY -m strata_kernels parity --device "$DEVICE" --head-dim "$hd" --group "$grp" \
      --variant "$VARIANTS" $PARITY_ARGS --json "$OUT/parity_$g.json" > "$OUT/parity_$g.txt" 2>&1
    rc=$?; status=$(( status | rc ))
    echo "parity $g: exit $rc; $(tail -n 1 "$OUT/parity_$g.txt")"
  done
  # Every (geometry, variant) the plugin holds must have passed somewhere in the cases, and none may have failed.
  $PY ci/geometry_tables.py parity "$OUT" $GEOMETRIES > "$OUT/parity_summary.md"; rc=$?; status=$(( status | rc ))
  cat "$OUT/parity_summary.md"
fi

if has bench; then
  for g in $BENCH_GEOMETRIES; do
    hd=${g%x*}; grp=${g#*x}
    step "bench prompt HD $hd G $grp"
    timeout "$(cap ${BENCH_TIMEOUT:-90})" $PY -m strata_kernels bench --device "$DEVICE" --head-dim "$hd" --group "$grp" \
      --variant all --shapes "$BENCH_SHAPES" --reps 5 --methods plugin,torch-fp32-sdpa \
      --json "$OUT/bench_prompt_$g.json" > "$OUT/bench_prompt_$g.txt" 2>&1; rc=$?; status=$(( status | rc ))
    [ $rc = 0 ] || tail -n 15 "$OUT/bench_prompt_$g.txt"
    step "bench decode HD $hd G $grp"
    timeout "$(cap ${BENCH_TIMEOUT:-90})" $PY -m strata_kernels bench --device "$DEVICE" --op decode --head-dim "$hd" --group "$grp" \
      --variant all --shapes "$DECODE_SHAPES" --reps 5 --methods plugin \
      --json "$OUT/bench_decode_$g.json" > "$OUT/bench_decode_$g.txt" 2>&1; rc=$?; status=$(( status | rc ))
    [ $rc = 0 ] || tail -n 15 "$OUT/bench_decode_$g.txt"
  done
  $PY ci/geometry_tables.py bench "$OUT" $BENCH_GEOMETRIES > "$OUT/bench_summary.md"; status=$(( status | $? ))
  cat "$OUT/bench_summary.md"
fi
echo "== exit $status ($(( $(date +%s) - START )) s) =="
exit $(( status != 0 ))
