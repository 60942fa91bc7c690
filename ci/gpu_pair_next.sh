#!/usr/bin/env bash
# Issue 10, prompt notes item 33's open questions, in one call of ~6 minutes on the lent GPU: builds the loader and
# the CPU and sm_90 plugins at (256, 12); then
# - each kernel's GPU time of grouped with its pair form on and off (STRATA_GROUPED_PAIR=1 / 0), alternated, at query
#   counts between the 64 where it was slower and the 256 of its bar (kernels.txt): whether the bar may come down;
# - a source-level ncu profile of the landed pair kernel and its union pre-pass at 32768 x 2048
#   (ci/grouped_profile.sh): where its time goes now (ncu_*.txt).
# Usage (the device's run): bash ci/gpu_pair_next.sh
set -uo pipefail
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
for sw in 1 0 1 0; do
  echo "== STRATA_GROUPED_PAIR=$sw"
  STRATA_GROUPED_PAIR=$sw timeout 60 python3 ci/grouped_kernels.py 2100x96 2100x128 2100x160 2100x192 2100x224 \
    32768x128 32768x192 2>&1 | grep -v -i warn
done | tee "$OUT/kernels.txt"
KERNELS="grouped_ws_kernel grouped_union_kernel" CASE="python3 ci/grouped_case.py 32768x2048" NCU_TIMEOUT=150 \
  bash ci/grouped_profile.sh
