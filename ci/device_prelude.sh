# Sourced by the device scripts ci/gpu_pack.sh and ci/gpu_decode_grouped.sh (after they set STAGES): results under
# $OUT, the tree on PYTHONPATH, has STAGE (is STAGE in $STAGES), `status` for the stages' exit codes, env.txt (date,
# GPU, commit), and build_plugins DIR LOG: the loader and the CPU and sm_90 plugins at the geometries in GEOMS
# (default (256, 12) and (128, 8)) built in DIR and installed into strata_kernels/plugins, the log in LOG (exits on
# failure); parity_at VARIANT HDxG...: the parity test of VARIANT at each geometry (spec sizes, one rep) into
# $OUT/parity.txt, its PASSED / FAIL lines shown; switch_patch (below) for scripts that time patches against the tree.
# At the exit of the script that sourced it first (not of scripts it runs), everything under $OUT is packed into
# $OUT/out.tgz: the device's run brings back at most 8 files (2026-12-05: a call's parity, sanitizer and test files
# were left on the device).
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
mkdir -p "$OUT"
export STRATA_PACK_OWNER=${STRATA_PACK_OWNER:-$$}
pack_out() {
  [ "$STRATA_PACK_OWNER" = "$$" ] && [ -d "$OUT" ] || return 0
  (cd "$OUT" && tar czf /tmp/strata-out.tgz --exclude=./out.tgz . && find . -mindepth 1 -delete \
    && mv /tmp/strata-out.tgz out.tgz)
}
# switch_patch P: the tree as the script found it plus the patch file P ("": none), the patch applied before reverted
# first; whatever is applied at the exit is reverted there, before the packing.
STRATA_APPLIED=""
switch_patch() {
  [ "$1" = "$STRATA_APPLIED" ] && return 0
  if [ -n "$STRATA_APPLIED" ]; then git apply -R "$STRATA_APPLIED" || exit 1; fi
  STRATA_APPLIED=""
  if [ -n "$1" ]; then git apply "$1" || { echo "$1 does not apply to this tree"; exit 1; }; fi
  STRATA_APPLIED=$1
}
trap 'switch_patch ""; pack_out' EXIT
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
has() { [[ " $STAGES " == *" $1 "* ]]; }
status=0
device_env() {
  { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format=%H 2>/dev/null; } \
    | tee "$OUT/env.txt"
}
build_plugins() {
  MAX_JOBS=16 STRATA_KERNELS_BUILD_DIR=$1 STRATA_TARGETS="cpu;sm_90" STRATA_ONLY_GEOMETRIES=${GEOMS:-256x12,128x8} \
    python3 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')" \
    > "$2" 2>&1 || { echo "build failed"; tail -30 "$2"; exit 1; }
}
parity_at() {
  local variant=$1 geo
  shift
  for geo in "$@"; do
    timeout 300 python3 -m strata_kernels parity --device cuda --variant "$variant" --head-dim "${geo%x*}" \
      --group "${geo#*x}" --reps 1 >> "$OUT/parity.txt" 2>&1
  done
  grep -E "PASSED|FAIL" "$OUT/parity.txt" | tail -$(( 2 * $# ))
}
