#!/usr/bin/env bash
# The closing call of a decode (issue 12) pass on the lent H200, in one go: build the CPU plugin (tests/gpu compares
# against it) and the sm_90 plugin at every prebuilt geometry, then ci/gpu_decode.sh (GPU tests, parity of flash and
# split in every format, the decode bench with the copy floor and torch, the other formats, the sanitizers), then
# flash's parity at the other prebuilt geometries.
# Everything lands in $OUT/results.tgz (the device returns few files).
# carry: strata_kernels/_loader.abi3.so
# Usage: STRATA_KERNELS_COMMIT=<hash> bash ci/gpu_decode_final.sh
set -uo pipefail
OUT=${OUT:-/tmp/strata-out}
R=$OUT/r
mkdir -p "$R"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
t0=$(date +%s)
# ONLY="256x12,128x8": build those geometries only (STRATA_ONLY_GEOMETRIES); GEOMETRIES: flash's parity beyond 256x12
MAX_JOBS=${MAX_JOBS:-16} STRATA_KERNELS_BUILD_DIR=/tmp/b STRATA_TARGETS="cpu;sm_90" STRATA_ONLY_GEOMETRIES=${ONLY:-} python3 -c \
  "from strata_kernels import build; build.build(with_loader=False, install_dir='strata_kernels/plugins')" \
  > "$R/build.txt" 2>&1 || tail -20 "$R/build.txt"
echo "build $(( $(date +%s) - t0 )) s"
OUT=$R TESTS=${TESTS:-"tests/gpu/test_flash_decode.py tests/gpu/test_callpath_gpu.py"} \
  SHAPES=${SHAPES:-4096x1,4096x8,4096x64,4096x256,32768x1,32768x8,32768x16,32768x32,32768x64,32768x256,131072x1,131072x8,131072x64,131072x256} \
  STAGES=${STAGES:-tests parity bench formats sanitize} bash ci/gpu_decode.sh
status=$?
for hg in ${GEOMETRIES:-128x4 128x8 128x7 128x5 128x2 128x1 256x2}; do
  timeout 60 python3 -m strata_kernels parity --device cuda --variant flash --reps 1 --head-dim ${hg%x*} \
    --group ${hg#*x} --json "$R/parity_flash_$hg.json" > "$R/parity_flash_$hg.txt" 2>&1; rc=$?
  status=$(( status | rc ))
  echo "$hg rc=$rc $(grep -E 'PASSED' "$R/parity_flash_$hg.txt" | tail -1)"
done
tar czf "$OUT/results.tgz" -C "$OUT" r
echo "== total $(( $(date +%s) - t0 )) s, exit $status =="
exit $status
