#!/usr/bin/env bash
# One call on the lent H200 (device tool) for the cuda12 family (issue 13 part 2) and the PTX-JIT path:
#   probe   ci/cuda12_probe.py: one small call per variant of the carried cuda12 sm_90 plugin (clang + PyPI's ptxas
#           12.9, launched through the plugin's CUDA driver-API layer), each in its own process
#   parity  the parity test (--reps 1) of every variant that plugin holds, forced on the device (the variants whose
#           probe failed each in a process of its own)
#   ptx     the cuda13 sm_80 plugin (SASS sm_80 + PTX compute_80), built here with nvcc at 256x12 only (in the
#           background, from the start), forced on the sm_90 device, where only its PTX fits (the driver JIT-compiles
#           it); then its parity test (--reps 1)
# The H200 has no PyPI CUDA 12 packages, so the cuda12 plugin is built on the CPU machine (every variant, 256x12 only:
# ~30 s on 2 cores) and carried:
#   STRATA_ONLY_GEOMETRIES=256x12 python -m strata_kernels wheel --family cuda12 \
#       --targets sm_90 --out /tmp/w \
#     && mkdir -p dist-cuda12 && unzip -o -j /tmp/w/strata_kernels_cuda12-*.whl 'strata_kernels_cuda12/libstrata_sm_90.so' -d dist-cuda12
# carry: dist-cuda12 (git-ignored) and strata_kernels/_loader.abi3.so (built for the device's Python 3.12; without it
# the loader and the CPU plugin are built here first, ~1 min).
# Usage: [STAGES="probe parity ptx"] bash ci/gpu_cuda12.sh   -> under $OUT: env.txt, probe.txt/.json, parity_cuda12.*,
#   ptx_build.txt, ptx_env.txt, parity_ptx.*, *_table.md. Each stage has its own timeout and all end by DEADLINE_S
#   (default 500 s; the device tool stops a command at 600 s). On the H200 all three stages took 85 s in all
#   (docs/results/2026-12-01-h200-cuda12/run2).
# A parity run that ends without its JSON (a kernel that faults takes its process's CUDA context with it) is repeated
# one variant per process, so each variant gets its own verdict. Exit status: 0 when every stage run passed.
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
STAGES=${STAGES:-probe parity ptx}
PLUGIN=$PWD/dist-cuda12/libstrata_sm_90.so
P80=${P80:-/tmp/strata-p80}                     # where the ptx stage installs its cpu and sm_80 plugins
status=0
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-500}
# cap SECONDS -> SECONDS, or what is left before the deadline if less (at least 1)
cap() { local rem=$(( DEADLINE_S - ($(date +%s) - START) )); (( rem < $1 )) && echo $(( rem > 1 ? rem : 1 )) || echo "$1"; }
has() { [[ " $STAGES " == *" $1 "* ]]; }
step() { echo "== $* ($(( $(date +%s) - START )) s)"; }
# forced DIR TARGET CMD...: CMD with only DIR's plugin of TARGET serving the GPU
forced() { STRATA_KERNELS_PLUGIN_PATH=$1 STRATA_KERNELS_TARGET=$2 "${@:3}"; }
variants_of() { "$PY" -c "import sys; from strata_kernels import resolve; print(','.join(resolve.read_manifest(sys.argv[1])['variants']))" "$1"; }

# table JSON: the parity results as a markdown table
table() {
  "$PY" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | case | format | ctx x queries | status | err_new | err_old | ms |")
print("|---|---|---|---|---|---|---|---|")
for r in d["results"]:
    print(f"| {r['variant']} | {r['case']} {r['label']} | {r['fmt']} | {r['ctx']} x {r['n_q']} | {r['status']} "
          f"| {r['err_new']:.3g} | {r['err_old']:.3g} | {r['t_new_ms']:.3g} |")
PY
}

# parity1 NAME DIR TARGET VARIANTS: the parity test (--reps 1) of VARIANTS (comma-separated) of DIR's TARGET plugin,
# forced, in one process -> $OUT/parity_NAME.{txt,json} and _table.md; its exit status, 99 when it left no JSON (a
# kernel faulted and took the process's CUDA context, or the time ran out).
parity1() {
  local name=$1 dir=$2 target=$3 variants=$4 limit=$5 rc
  forced "$dir" "$target" timeout "$(cap "$limit")" "$PY" -m strata_kernels parity --device cuda --reps 1 \
    --variant "$variants" --json "$OUT/parity_$name.json" > "$OUT/parity_$name.txt" 2>&1
  rc=$?
  echo "parity $name ($variants): exit $rc; $(tail -n 1 "$OUT/parity_$name.txt")"
  [ -s "$OUT/parity_$name.json" ] || { grep -E "Error|error" "$OUT/parity_$name.txt" | tail -n 2; return 99; }
  table "$OUT/parity_$name.json" > "$OUT/parity_${name}_table.md" || return 4
  return $rc
}

# parity NAME DIR TARGET VARIANTS [FAULTED]: VARIANTS less FAULTED (those the probe saw fail) in one process, and each
# of FAULTED alone; if the one process leaves no JSON, each of its variants again in its own process.
parity() {
  local name=$1 dir=$2 target=$3 variants=$4 faulted=${5:-} rc=0 v good=()
  for v in ${variants//,/ }; do [[ ",$faulted," == *",$v,"* ]] || good+=("$v"); done
  step "parity $name: ${variants}${faulted:+ (alone: $faulted)}"
  if [ ${#good[@]} -gt 0 ]; then
    local joined; joined=$(IFS=,; echo "${good[*]}")
    parity1 "$name" "$dir" "$target" "$joined" "${PARITY_TIMEOUT:-200}"; rc=$?
    if [ $rc = 99 ] && [ ${#good[@]} -gt 1 ]; then
      for v in "${good[@]}"; do parity1 "${name}_$v" "$dir" "$target" "$v" "${PARITY_ONE_TIMEOUT:-60}" || rc=$(( rc | $? )); done
    fi
  fi
  for v in ${faulted//,/ }; do parity1 "${name}_$v" "$dir" "$target" "$v" "${PARITY_ONE_TIMEOUT:-60}" || rc=$(( rc | $? )); done
  [ $rc = 0 ] || status=$(( status | 1 ))
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  echo "commit ${STRATA_KERNELS_COMMIT:-unknown}; stages: $STAGES"
} 2>&1 | tee "$OUT/env.txt"

if ! ls strata_kernels/_loader*.so >/dev/null 2>&1; then
  step "build the loader and the CPU plugin (none carried)"
  STRATA_TARGETS=cpu timeout "$(cap 180)" "$PY" -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')" \
    > "$OUT/build_loader.txt" 2>&1 || { tail -n 30 "$OUT/build_loader.txt"; echo "== exit 2 (no loader) =="; exit 2; }
fi
# Only the forced plugin serves the GPU: the package keeps its CPU plugin alone, and no per-user plugin is searched.
rm -f strata_kernels/plugins/libstrata_sm_*.so
XDG_DATA_HOME=$(mktemp -d); export XDG_DATA_HOME

# The ptx stage's build runs in the background (niced, CPU only) while the cuda12 stages use the GPU.
if has ptx; then
  step "ptx: building cpu;sm_80 (SASS sm_80 + PTX compute_80, 256x12) with nvcc into $P80, in the background"
  (
    start=$(date +%s)
    STRATA_TARGETS="cpu;sm_80" STRATA_ONLY_GEOMETRIES=256x12 MAX_JOBS=${MAX_JOBS:-16} \
      STRATA_KERNELS_BUILD_DIR=${STRATA_KERNELS_BUILD_DIR:-/tmp/b80} timeout "$(cap "${BUILD_TIMEOUT:-300}")" \
      nice -n 10 "$PY" -c "
import sys
from strata_kernels import build
res = build.build(install_dir=sys.argv[1])
print('built', sorted(res.built), 'skipped', res.skipped)
sys.exit(0 if 'sm_80' in res.built else 1)" "$P80"
    rc=$?
    echo "ptx build: exit $rc, $(( $(date +%s) - start )) s wall"
    exit $rc
  ) > "$OUT/ptx_build.txt" 2>&1 &
  BUILD_PID=$!
fi

if has probe || has parity; then
  if [ ! -f "$PLUGIN" ]; then
    echo "missing $PLUGIN: build it on the CPU machine and carry dist-cuda12 (see the header); probe and parity skipped"
    status=$(( status | 2 ))
  else
    {
      echo "--- cuda12: $PLUGIN"
      "$PY" -c "import sys, strata_kernels.resolve as r; m = r.read_manifest(sys.argv[1]); print('manifest:', m['target'], m['toolchain'], 'min_driver_version', m['min_driver_version'], 'geometries', m['geometries'], 'variants', m['variants'])" "$PLUGIN"
      readelf -d "$PLUGIN" | grep NEEDED
      forced "$PWD/dist-cuda12" sm_90 "$PY" -m strata_kernels explain
    } 2>&1 | tee -a "$OUT/env.txt"
    if ! grep -q "chosen: sm_90 .*dist-cuda12/libstrata_sm_90.so" "$OUT/env.txt"; then
      echo "the carried cuda12 sm_90 plugin was not chosen for cuda:0 (see $OUT/env.txt); probe and parity skipped"
      status=$(( status | 3 ))
    else
      faulted=""
      if has probe; then
        step "probe: every variant of the cuda12 plugin, one process per call"
        forced "$PWD/dist-cuda12" sm_90 timeout "$(cap "${PROBE_TIMEOUT:-150}")" "$PY" ci/cuda12_probe.py "$PLUGIN" \
          --json "$OUT/probe.json" --jobs 4 --timeout 100 > "$OUT/probe.txt" 2>&1
        rc=$?; cat "$OUT/probe.txt"; echo "probe: exit $rc"; [ $rc = 0 ] || status=$(( status | 1 ))
        faulted=$("$PY" -c "import json, sys; print(','.join(json.load(open(sys.argv[1]))['failed_variants']))" \
                  "$OUT/probe.json" 2>/dev/null)
      fi
      has parity && parity cuda12 "$PWD/dist-cuda12" sm_90 "$(variants_of "$PLUGIN")" "$faulted"
    fi
  fi
fi

if has ptx; then
  step "ptx: waiting for the build"
  wait "$BUILD_PID"; rc=$?
  tail -n 1 "$OUT/ptx_build.txt"
  if [ $rc != 0 ]; then
    tail -n 30 "$OUT/ptx_build.txt"; status=$(( status | 2 ))
  else
    # The driver's JIT cache of this run only: what it holds afterwards shows the PTX was compiled here.
    CUDA_CACHE_PATH=$(mktemp -d); export CUDA_CACHE_PATH
    {
      "$PY" -c "import sys, strata_kernels.resolve as r; m = r.read_manifest(sys.argv[1]); print('manifest:', m['target'], m['toolchain'], 'sass', m['sass'], 'ptx', m['ptx'], 'geometries', m['geometries'], 'variants', m['variants'])" "$P80/libstrata_sm_80.so"
      forced "$P80" sm_80 "$PY" -m strata_kernels explain
    } 2>&1 | tee "$OUT/ptx_env.txt"
    if ! grep -q "chosen: sm_80 by PTX JIT compute_80" "$OUT/ptx_env.txt"; then
      echo "the sm_80 plugin was not chosen through its PTX for cuda:0 (see $OUT/ptx_env.txt); ptx parity skipped"
      status=$(( status | 3 ))
    else
      parity ptx "$P80" sm_80 "$(variants_of "$P80/libstrata_sm_80.so")"
      echo "JIT cache after the ptx parity: $(find "$CUDA_CACHE_PATH" -type f | wc -l) files, $(du -sk "$CUDA_CACHE_PATH" | cut -f1) KiB" \
        | tee -a "$OUT/ptx_env.txt"
    fi
  fi
fi
echo "== exit $status ($(( $(date +%s) - START )) s) =="
exit $status
