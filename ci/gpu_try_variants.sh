#!/usr/bin/env bash
# Time template variants of the grouped kernel in one call on the lent GPU: for each file named in VARS (default
# ci/.var/v*.j2, copies of templates/cuda/grouped.cu.j2 with an edit each; ci/.var is git-ignored, so pass it with the
# run's `carry`), install it as templates/cuda/grouped.cu.j2, build the sm_90 plugin at (256, 12) only (~10 s) and
# print the GPU time of each kernel of a call (ci/grouped_kernels.py, SHAPES, default 32768x2048). The tree's own
# template is put back at the end. Usage: VARS="ci/.var/v0.j2 ci/.var/v1.j2" bash ci/gpu_try_variants.sh
set -u
export PYTHONPATH=$PWD
cp templates/cuda/grouped.cu.j2 /tmp/grouped.cu.j2.orig
for v in ${VARS:-ci/.var/v*.j2}; do
  cp "$v" templates/cuda/grouped.cu.j2
  MAX_JOBS=${MAX_JOBS:-16} STRATA_KERNELS_BUILD_DIR=/tmp/b STRATA_TARGETS="sm_90" STRATA_ONLY_GEOMETRIES=256x12 \
    python3 -c "from strata_kernels import build; build.build(with_loader=False, install_dir='strata_kernels/plugins')" \
    > /tmp/build.log 2>&1 || { echo "== $v: build failed"; tail -5 /tmp/build.log; continue; }
  echo "== $v"; python3 ci/grouped_kernels.py ${SHAPES:-32768x2048} 2>&1 | grep -v -i warn
done
cp /tmp/grouped.cu.j2.orig templates/cuda/grouped.cu.j2
