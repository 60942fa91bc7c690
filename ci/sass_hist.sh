#!/usr/bin/env bash
# Opcode histogram of one kernel's SASS in a plugin (needs cuobjdump, i.e. a CUDA toolkit):
#   bash ci/sass_hist.sh strata_kernels/plugins/libstrata_sm_90.so 'flash_kernelILi1E'
lib=$1; pat=$2
cuobjdump -sass "$lib" | awk -v p="$pat" '/Function : /{f = ($0 ~ p)} f' > ${SASS_OUT:-${SASS_OUT:-/tmp/sass_$$.txt}}
echo "$(grep -cE '^ +/\*[0-9a-f]+\*/' ${SASS_OUT:-/tmp/sass_$$.txt}) instructions in $pat"
grep -E '^ +/\*[0-9a-f]+\*/' ${SASS_OUT:-/tmp/sass_$$.txt} | sed -E 's/^ +\/\*[0-9a-f]+\*\/ +(@!?U?P[0-9T] +)?([A-Z0-9_]+)[. ].*/\2/' | sort | uniq -c | sort -rn | head -40
