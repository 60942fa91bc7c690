#!/usr/bin/env bash
# Issue 12, one query: flash as landed (two warp groups a block where the grid fills at most half the multiprocessors,
# not FP16; the row table's skip in both forms) on the lent GPU, in one call of ~8 minutes. Builds the loader and the
# CPU and sm_90 plugins at (256, 12) and (128, 4); then, in order:
# - flash's GPU tests (tests.txt; one test forces one and two groups and compares them);
# - the flash variant's parity test at both geometries (parity.txt);
# - the decode bench at 1, 8, 64 and 256 queries (ctx 4096, 32768, 131072), INT8 and FP16 at one query, beside the
#   copy of the same bytes, by default and with one group forced (STRATA_DECODE_FLASH_GROUPS=1, read once a process)
#   (bench_decode*.txt / .json);
# - compute-sanitizer memcheck and racecheck of flash's one-query (two groups) and three-query calls (sanitizer*.txt);
# - RACE=1 (default): racecheck of main's `grouped` under the workload whose gpair racecheck showed hazards
#   (grouped_race*.txt), to tell gpair's hazards from the tool's reading of the warp-specialized hand-offs.
# Usage (the device's run): bash ci/gpu_flash_groups.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12,128x4 build_plugins /tmp/b0 "$OUT/build.txt"
timeout 300 python3 -m pytest tests/gpu/test_flash_decode.py -q -p no:cacheprovider > "$OUT/tests.txt" 2>&1
tail -1 "$OUT/tests.txt"
parity_at flash 256x12 128x4
bench() {  # bench NAME ARGS...: the decode bench into $OUT/NAME.txt / .json, its rows shown
  local name=$1
  shift
  timeout 200 python3 -m strata_kernels bench --op decode --device cuda --reps 20 --methods plugin,copy-floor \
    --json "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1
  echo "== $name"
  grep -E "^[0-9]+x[0-9]+ " "$OUT/$name.txt"
}
SHAPES=4096x1,32768x1,131072x1,4096x8,32768x8,131072x8,32768x64,131072x64,32768x256
bench bench_decode --variant auto,flash --format int8 --shapes "$SHAPES"
STRATA_DECODE_FLASH_GROUPS=1 bench bench_decode_one_group --variant flash --format int8 \
  --shapes 4096x1,32768x1,131072x1
for fmt in fp16 k8v4 q4_0; do
  bench "bench_decode_$fmt" --variant flash --format $fmt --shapes 4096x1,32768x1
  STRATA_DECODE_FLASH_GROUPS=1 bench "bench_decode_${fmt}_one_group" --variant flash --format $fmt \
    --shapes 4096x1,32768x1
done
# shellcheck disable=SC1091
. ci/sanitize.sh
run_sanitizers 150 python3 ci/decode_case.py 4096x1,200x3
if [ "${RACE:-1}" = 1 ]; then
  mkdir -p "$OUT/grouped_race"
  (OUT="$OUT/grouped_race"; run_sanitizers 120 python3 ci/holes_case.py grouped)
fi
