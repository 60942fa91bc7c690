#!/usr/bin/env bash
# One call on the lent H200 for grouped_ws's packed form (issues 10 and 12),
# results under $OUT. Builds the loader and the CPU and sm_90 plugins ((256, 12) and (128, 8)), then the stages in
# STAGES (default all):
#   pack:   each kernel's GPU time (ci/grouped_kernels.py) of grouped on decode calls of 64-256 queries and the prompt's
#           shapes, with STRATA_GROUPED_PACK=0 and =1
#   tests:  the grouped, decode and dispatch-model GPU tests (the packed form forced, the Q4_0 decode bar)
#   bench:  `strata-kernels bench --op decode` of FORMATS (default int8) at SHAPES, METHODS
#   prompt: the prompt bench (auto) at the four shapes
#   sanitize: compute-sanitizer memcheck and racecheck of the packed form (decode and prompt calls at SAN_CASES,
#           default "2100x192 1500x40": ctx x queries)
#   profile: ncu (source level) of the kernels in KERNELS (default the union pre-pass) on the decode call PROFILE_SHAPE
#           (default 32768x256, grouped), all summaries in one file (profile.txt)
#   main:   each kernel's GPU time (ci/grouped_kernels.py) at MAIN_SHAPES, the tree's kernels against the committed
#           HEAD's (built in a git worktree at /tmp/mainwt), alternated ROUNDS times (default 2)
#   patches: for each patch in PATCHES (default the grouped_ws probes in docs/notes: each alone (ws-k-double on
#           ws-early-release) and all six; an entry A+B applies A, then B), a git worktree of HEAD with the tree's
#           tracked changes and then it applied (/tmp/pw_NAME), its loader and sm_90 plugins built (GEOMS), each
#           kernel's GPU time at MAIN_SHAPES, alternated with the tree's ROUNDS times (patches.txt); with PARITY=1 also
#           `strata-kernels parity --variant grouped` and tests/gpu/test_grouped.py in each worktree (~90 s each:
#           with PARITY=1 name at most three patches a call), with PARITY="NAME ..." only in those patches' worktrees
#   benchab: the decode (AB_DECODE) and prompt (AB_PROMPT) benches, INT8, auto, of the tree, of the committed HEAD
#           (a worktree, as main) and of the tree with each patch in AB_PATCHES applied, alternated ROUNDS times
#           (benchab.txt: events and CUDA-graph ms a call); AB_ENVS (e.g. "STRATA_X=1 STRATA_X=8,STRATA_Y=0"): the tree
#           again under each entry's variables (comma-separated), named by them
#   envk:   each kernel's GPU time (ci/grouped_kernels.py) at MAIN_SHAPES under each entry of ENVK_ENVS (default
#           AB_ENVS; entries as benchab's), alternated ROUNDS times (envk.txt)
#   ab:     grouped.cu.j2 variants in VARS (default: main's, its grouped_ws inlined, against the tree's; carry
#           ci/.var), unpacked; last, as it leaves the last variant's sm_90 plugin installed
# main and benchab: MAIN_BASE_DIFF (an absolute path) is applied to HEAD's worktree first, where the device's checkout
# shows an older HEAD than the commit to compare against (git diff OLD NEW -- templates > FILE, untracked, in the tree).
# Usage: STAGES="pack tests" bash ci/gpu_pack.sh; the next grouped_ws probes: STAGES=patches MAIN_SHAPES="32768x2048
# 1500x1500 decode:32768x256" bash ci/gpu_pack.sh (~6 min, timing only), then the faster ones applied in the tree
# with STAGES="tests sanitize prompt bench". The device's checkout may show an older HEAD than this machine's: the
# patches stage's worktrees start from it with the tree's tracked changes applied, i.e. from the tree's sources.
STAGES=${STAGES:-pack tests bench prompt sanitize}
. ci/device_prelude.sh
device_env
build_plugins /tmp/b0 "$OUT/build.txt"
if has pack; then
  for pk in ${PACKS:-0 1}; do
    echo "== STRATA_GROUPED_PACK=$pk"
    STRATA_GROUPED_PACK=$pk CASE_VARIANT=grouped python3 ci/grouped_kernels.py ${PACK_SHAPES:-decode:32768x64 \
      decode:32768x128 decode:32768x192 decode:32768x256 decode:131072x256 decode:4096x256 32768x2048 2100x256} 2>&1 \
      | grep -v -i warn
  done 2>&1 | tee "$OUT/pack.txt"
fi
if has tests; then
  timeout 300 python3 -m pytest ${TESTS:-tests/gpu/test_grouped.py tests/gpu/test_flash_decode.py \
    tests/gpu/test_dispatch_model_gpu.py} -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -n 12
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if has bench; then
  timeout ${BENCH_TIMEOUT:-240} python3 -m strata_kernels bench --op decode --device cuda --variant ${VARIANTS:-auto,flash,split} \
    --format ${FORMATS:-int8} \
    --shapes ${SHAPES:-4096x1,32768x1,32768x8,32768x64,32768x128,32768x192,32768x256,4096x256,131072x256} \
    --reps 20 --methods ${METHODS:-plugin,copy-floor,torch-fp32-sdpa} --json "$OUT/bench_decode.json" \
    > "$OUT/bench_decode.txt" 2>&1
  rc=$?; status=$(( status | rc )); [ $rc = 0 ] || tail -n 20 "$OUT/bench_decode.txt"
fi
if has prompt; then
  timeout 150 python3 -m strata_kernels bench --device cuda --variant auto --reps 10 \
    --shapes 32768x2048,131072x2048,1500x1500,2100x256 --methods plugin --json "$OUT/bench_prompt.json" \
    > "$OUT/bench_prompt.txt" 2>&1; status=$(( status | $? ))
fi
if has sanitize; then  # memcheck and racecheck of the packed form (holes, width 0, garbage past the width)
  . ci/sanitize.sh
  run_tools() { if [ "${TOOLS:-both}" = memcheck ]; then
      timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$@" > /tmp/memcheck.txt 2>&1; local rc=$?
      echo "compute-sanitizer memcheck: exit $rc; $(grep -E 'ERROR SUMMARY|workload' /tmp/memcheck.txt | tr '\n' ' ')" \
        | tee "$OUT/sanitizer.txt"; return $rc
    else run_sanitizers 200 "$@"; fi; }
  STRATA_GROUPED_PACK=1 run_tools python3 -c "
import numpy as np, torch, strata_kernels as sk
from strata_kernels import parity, testing
import os
for ctx, n_q in [tuple(map(int, c.split('x'))) for c in os.environ.get('SAN_CASES', '2100x192 1500x40').split()]:
    case = testing.make_case('int8', ctx, n_q, holes=True, width0=True)
    case.width[:5] = 0
    for i, w in enumerate(case.width):
        case.ids[i, w:] = np.int32(2**31 - 1)  # never read
    q, kv, ids, w = parity._place(case, ('cuda', 0))
    sk.qsa_decode_attn(q, kv, ids, w, variant='grouped')
    sk.qsa_prompt_attn(q, kv, ids, w, variant='grouped')
torch.cuda.synchronize()
print('sanitizer workload done')"; status=$(( status | $? ))
fi
if has profile; then  # ci/grouped_profile.sh's files kept here, its summaries in one file (the device returns few)
  OUT=/tmp/profile KERNELS=${KERNELS:-grouped_union_kernel} CASE="env CASE_OP=decode CASE_VARIANT=grouped python3 \
    ci/grouped_case.py ${PROFILE_SHAPE:-32768x256}" bash ci/grouped_profile.sh 2>&1 | tee "$OUT/profile.txt"
fi
# tree_at DIR [PATCH[+PATCH...]]: a git worktree of HEAD at DIR, BASE_DIFF (a diff file, if set and not empty) and
# then the patches applied in order, with its loader and plugins built (GEOMS; the log in /tmp, its tail printed if
# the build fails: the device returns few files).
tree_at() {
  git worktree add -f "$1" HEAD > /dev/null 2>&1
  if [ -s "${BASE_DIFF:-}" ] && ! (cd "$1" && git apply "$BASE_DIFF"); then
    echo "== $BASE_DIFF does not apply in $1"; return 1
  fi
  local pt
  for pt in ${2:+${2//+/ }}; do
    if ! (cd "$1" && git apply "$OLDPWD/$pt"); then echo "== $pt does not apply"; return 1; fi
  done
  (cd "$1" && build_plugins "/tmp/b_$(basename "$1")" "/tmp/build_$(basename "$1").txt") || { echo "== $1: build failed"; return 1; }
}
# time_trees NAME=DIR ...: each kernel's GPU time at MAIN_SHAPES with each tree's plugins, alternated ROUNDS times
# (the decode calls' variant CASE_VARIANT, default grouped), each tree's run cut at TREE_TIMEOUT seconds (default 120:
# a probe that hangs costs that, not the call).
time_trees() {
  for r in $(seq "${ROUNDS:-2}"); do
    for nd in "$@"; do
      echo "== ${nd%%=*}"
      (cd "${nd#*=}" && PYTHONPATH=${nd#*=} CASE_VARIANT=${CASE_VARIANT:-grouped} timeout "${TREE_TIMEOUT:-120}" \
        python3 ci/grouped_kernels.py ${MAIN_SHAPES:-32768x2048 1500x1500 2100x256 decode:32768x64 decode:32768x256} \
        2>&1 | grep -v -i warn)
    done
  done
}
if has main; then
  BASE_DIFF=${MAIN_BASE_DIFF:-} tree_at /tmp/mainwt && time_trees "tree=$PWD" "main $(git log -1 --format=%h)=/tmp/mainwt" 2>&1 | tee "$OUT/main_ab.txt"
fi
if has patches; then
  # the patches' worktrees start from the tree's sources: its tracked changes against the checkout's HEAD first (the
  # device's checkout may show an older HEAD than the tree it was given); the main stage's worktree stays HEAD's
  git diff --binary HEAD > /tmp/tree.diff
  BASE_DIFF=/tmp/tree.diff
  trees=("tree=$PWD")
  n=docs/notes
  er=$n/ws-early-release.patch
  all=$n/ws-arrive-exchange.patch+$n/ws-softmax-before-v.patch+$n/ws-uniform-consumer.patch+$n/ws-fold-early.patch
  for pt in ${PATCHES:-${all//+/ } $er $er+$n/ws-k-double.patch $all+$er+$n/ws-k-double.patch}; do
    name=$(for x in ${pt//+/ }; do basename "$x" .patch; done | paste -sd+)
    tree_at "/tmp/pw_$name" "$pt" && trees+=("$name=/tmp/pw_$name")
  done
  time_trees "${trees[@]}" 2>&1 | tee "$OUT/patches.txt"
  if [ "${PARITY:-0}" != 0 ]; then
    for nd in "${trees[@]:1}"; do
      [ "$PARITY" = 1 ] || [[ " $PARITY " == *" ${nd%%=*} "* ]] || continue
      echo "== ${nd%%=*}"
      (cd "${nd#*=}" && PYTHONPATH=${nd#*=} timeout 120 python3 -m strata_kernels parity --device cuda --variant grouped \
        --reps 1 2>&1 | grep -E "PASSED|FAIL" | tail -3
       PYTHONPATH=${nd#*=} timeout 200 python3 -m pytest tests/gpu/test_grouped.py -q -x -p no:cacheprovider 2>&1 | tail -1)
    done 2>&1 | tee "$OUT/patches_parity.txt"
  fi
fi
if has benchab; then  # whole calls' bench times (events, CUDA graph) of several trees, alternated
  # trees: this one, HEAD (with MAIN_BASE_DIFF) and, for each patch in AB_PATCHES, the tree with it applied
  git diff --binary HEAD > /tmp/tree.diff
  abt=("tree=$PWD")
  BASE_DIFF=${MAIN_BASE_DIFF:-} tree_at /tmp/abwt && abt+=("main $(git log -1 --format=%h)=/tmp/abwt")
  for pt in ${AB_PATCHES:-}; do
    nm=$(basename "$pt" .patch)
    BASE_DIFF=/tmp/tree.diff tree_at "/tmp/abw_$nm" "$pt" && abt+=("$nm=/tmp/abw_$nm")
  done
  for ev in ${AB_ENVS:-}; do abt+=("tree ${ev}=$PWD"); done
  for r in $(seq "${ROUNDS:-2}"); do
    for nd in "${abt[@]}"; do
      echo "== ${nd%=*}"
      # a name "tree A=1,B=2": the tree under those variables
      ev=$(echo "${nd%=*}" | sed -n 's/^tree //p' | tr ',' ' ')
      nd="${nd%%=*}=${nd##*=}"
      (cd "${nd#*=}" && { [ -z "$ev" ] || export $ev; } && PYTHONPATH=${nd#*=} timeout 120 python3 -m strata_kernels bench --op decode --device cuda \
        --variant auto --format int8 --shapes ${AB_DECODE:-4096x1,32768x64,32768x128,32768x256} --reps 20 \
        --methods plugin 2>&1 | grep -E "^[0-9]+x[0-9]+ " | awk '{print $1, "decode events", $5, "graph", $6}'
       PYTHONPATH=${nd#*=} timeout 120 python3 -m strata_kernels bench --device cuda --variant auto --reps 10 \
        --shapes ${AB_PROMPT:-32768x2048,1500x1500,2100x256} --methods plugin 2>&1 | grep -E "^[0-9]+x[0-9]+ " \
        | awk '{print $1, "prompt events", $5, "graph", $6}')
    done
  done 2>&1 | tee "$OUT/benchab.txt"
fi
if has envk; then  # each kernel's GPU time under each entry of AB_ENVS, alternated
  for r in $(seq "${ROUNDS:-2}"); do
    for ev in ${ENVK_ENVS:-${AB_ENVS:-}}; do
      echo "== $ev"
      (export ${ev//,/ } && CASE_VARIANT=${CASE_VARIANT:-grouped} python3 ci/grouped_kernels.py ${MAIN_SHAPES:-32768x2048 \
        decode:32768x64 decode:32768x128 decode:32768x256} 2>&1 | grep -v -i warn)
    done
  done 2>&1 | tee "$OUT/envk.txt"
fi
if has ab; then  # template variants in VARS (ci/gpu_try_variants.sh; carry ci/.var), unpacked
  STRATA_GROUPED_PACK=0 SKIP_TREE=1 KERNEL=grouped CASE_VARIANT=grouped OUT=$OUT \
    SHAPES="${AB_SHAPES:-decode:32768x256 32768x2048}" VARS="${VARS:-ci/.var/m0.j2 ci/.var/p1.j2}" \
    bash ci/gpu_try_variants.sh 2>&1 | tee "$OUT/ab.txt"
fi
exit $status
