#!/usr/bin/env bash
# Time template variants of one CUDA kernel in one call on the lent GPU (issues 10 and 12). Each file named in VARS
# (copies of KERNEL's template with an edit each, kept in the git-ignored ci/.var, so pass it with the run's `carry`)
# is installed as templates/cuda/$KERNEL.cu.j2, the sm_90 plugin is built at (256, 12) only (~10 s) and timed; the
# tree's own template is put back at the end. The first step builds the loader and the CPU and sm_90 plugins from
# the tree as it is, so nothing but ci/.var needs carrying.
#   KERNEL=grouped (default): ci/grouped_kernels.py, the GPU time of each kernel of a call at SHAPES
#                             (default 32768x2048)
#   KERNEL=flash:             ci/decode_splits.py flash SHAPES (default 32768x1,32768x8,32768x64,32768x256) for
#                             each format in FMTS (default int8), CUDA-graph GPU time per call
# CHECK: the variants (as named in VARS) that also get `strata-kernels parity --variant $KERNEL` (every format the
# variant takes), the kernel's GPU tests and, for grouped, ci/grouped_items_parity.py (more work items than
# multiprocessors), once each, at the variant's first occurrence. Alternate main's template with the candidates
# (VARS="a0 v1 a0 v1"): calls differ by ~1 %.
# Usage: KERNEL=flash VARS="ci/.var/f0.j2 ci/.var/f1.j2" CHECK="ci/.var/f1.j2" bash ci/gpu_try_variants.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
KERNEL=${KERNEL:-grouped}
case $KERNEL in
  grouped) TIME="python3 ci/grouped_kernels.py ${SHAPES:-32768x2048}"; TESTS=tests/gpu/test_grouped.py
           EXTRA="python3 ci/grouped_items_parity.py" ;;
  flash) TIME="eval for f in ${FMTS:-int8}; do python3 ci/decode_splits.py flash ${SHAPES:-32768x1,32768x8,32768x64,32768x256} \$f; done"
         TESTS=tests/gpu/test_flash_decode.py; EXTRA=true ;;
  *) echo "KERNEL must be grouped or flash, got $KERNEL"; exit 2 ;;
esac
LOG=${OUT:-/tmp}/try_variants
mkdir -p "$LOG"
TPL=templates/cuda/$KERNEL.cu.j2
[ "${SKIP_TREE:-0}" = 1 ] ||  # SKIP_TREE=1: the loader and plugins are built already (an earlier step of the call)
MAX_JOBS=${MAX_JOBS:-16} STRATA_KERNELS_BUILD_DIR=/tmp/b0 STRATA_TARGETS="cpu;sm_90" \
  python3 -c "from strata_kernels import build; build.build(with_loader=True, install_dir='strata_kernels/plugins')" \
  > "$LOG/build_tree.txt" 2>&1 || { echo "the tree's build failed"; tail -20 "$LOG/build_tree.txt"; exit 1; }
cp "$TPL" /tmp/try_variants.orig
for v in ${VARS:-ci/.var/v*.j2}; do
  name=$(basename "$v" .j2)
  cp "$v" "$TPL"
  MAX_JOBS=${MAX_JOBS:-16} STRATA_KERNELS_BUILD_DIR=/tmp/b STRATA_TARGETS="sm_90" STRATA_ONLY_GEOMETRIES=256x12 \
    python3 -c "from strata_kernels import build; build.build(with_loader=False, install_dir='strata_kernels/plugins')" \
    > "$LOG/build_$name.txt" 2>&1 || { echo "== $v: build failed"; tail -5 "$LOG/build_$name.txt"; continue; }
  echo "== $v $(date +%T)"; $TIME 2>&1 | grep -v -i warn
  case " ${CHECK:-} " in *" $v "*)
    CHECK=${CHECK/$v/}  # checked once, at its first occurrence
    timeout 300 python3 -m strata_kernels parity --device cuda --variant "$KERNEL" --reps 1 > "$LOG/parity_$name.txt" 2>&1
    grep -E "PASSED|FAIL" "$LOG/parity_$name.txt" | tail -2
    timeout 300 $EXTRA 2>&1 | tail -6
    timeout 300 python3 -m pytest "$TESTS" -q 2>&1 | tail -1 ;;
  esac
done
cp /tmp/try_variants.orig "$TPL"
