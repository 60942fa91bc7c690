#!/usr/bin/env bash
# Issue 10, prompt notes items 28-29: the `gpair` variant (docs/notes/gpair.patch: grouped_ws with two queries' groups
# a gathered tile, each consumer warpgroup the whole head for its own 64 of 128 rows; compiled for sm_90a, never run)
# on the lent GPU, in one call of ~10 minutes. Applies the patch to the tree and builds the loader and the CPU and sm_90
# plugins at (256, 12) and (128, 8); then, in order:
# - a quick check against `fp32` (prompt and decode calls, holes, both geometries; two calls' bits compared), which
#   shows a hang or a wrong answer first (quick.txt);
# - each kernel's GPU time (ci/grouped_kernels.py) of `grouped` and `gpair` (its union pre-pass also in clusters of
#   2 and 4) alternated at the prompt's shapes and two decode calls (kernels.txt);
# - the bench of both (and `auto`) with the grouped gather floor (bench_prompt.*, bench_decode.*);
# - the parity test of `gpair` at (256, 12) (parity.txt; (128, 8) had the quick check only);
# - compute-sanitizer memcheck and racecheck of gpair's prompt and decode calls (sanitizer*.txt);
# - gpair with the other register split (gpair-72.patch on top), at two shapes (kernels72.txt).
# RACE=1: instead of all that, gpair's racecheck hazards in detail (see that branch); RACE=2, probes of them.
# PROFILE=1: instead of all that, a
# source-level ncu profile of gpair's attention kernel and union pre-pass at
# 32768 x 2048 (ci/grouped_profile.sh; ~3 minutes), for the notes' "where its time goes".
# Usage (the device's run): bash ci/gpu_gpair.sh
set -uo pipefail
git apply docs/notes/gpair.patch || { echo "gpair.patch does not apply to this tree"; exit 1; }
# shellcheck disable=SC1091
. ci/device_prelude.sh
device_env > /dev/null
if [ "${RACE:-0}" = 2 ]; then
  # RACE=2 (~6 minutes; prompt notes item 31): RACE=1 found the hazards to be the producer's V-scale stores against
  # every consumer's V-scale loads (pv_operand_regs), the rows form no different, and the scratch's graph test failing
  # (a cudaMalloc refused inside a global-mode capture). Here: the graph tests with grow_alloc's relaxed capture mode;
  # racecheck's options; gpair's synccheck; then racecheck of two probes of the V hand-off, alone and together:
  # gpair-bar.patch (one barrier ID each for V-full and V-empty) and gpair-early.patch (the V-scale fold before the
  # V-empty wait), each after a check against fp32.
  GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
  timeout 150 python3 -m pytest tests/gpu/test_callpath_gpu.py -q -p no:cacheprovider -k "graph" \
    > "$OUT/tests.txt" 2>&1
  echo "graph tests: $(tail -1 "$OUT/tests.txt")"
  compute-sanitizer --help > "$OUT/sanitizer_help.txt" 2>&1
  grep -i -A3 "indirect\|racecheck-report\|detect-level" "$OUT/sanitizer_help.txt"
  # race2 NAME [options]: racecheck of gpair's prompt calls (ci/holes_case.py), its summary and first hazards
  race2() {
    local name=$1
    shift
    timeout 120 compute-sanitizer --tool racecheck --print-limit 12 "$@" python3 ci/holes_case.py gpair prompt \
      > "$OUT/$name.txt" 2>&1
    echo "$name: exit $?; $(grep -E 'RACECHECK SUMMARY' "$OUT/$name.txt")"
    grep -m 4 -A2 -E "hazard detected" "$OUT/$name.txt" | grep -E "hazard|Thread"
  }
  # quick NAME: gpair against fp32 at two prompt shapes and a decode call
  quick() {
    timeout 120 python3 - "$1" <<'PY' 2>&1 | grep -v -i warn | tee -a "$OUT/quick.txt"
import sys
import numpy as np
import strata_kernels as sk
from strata_kernels import testing
for ctx, n_q, op in [(4096, 64, "prompt"), (2100, 300, "prompt"), (4096, 64, "decode")]:
    q, kv, ids, w = testing.to_torch(testing.make_case("int8", ctx, n_q, holes=True), "cuda")
    fn = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    a = fn(q, kv, ids, w, variant="gpair").cpu().numpy()
    b = fn(q, kv, ids, w, variant="fp32").cpu().numpy()
    err = float(np.abs(a - b).max() / np.abs(b).max())
    print(f"{sys.argv[1]} {op} {ctx}x{n_q}: max |gpair - fp32| / scale {err:.2e}, "
          f"finite {bool(np.isfinite(a).all())}", flush=True)
PY
  }
  race2 race_gpair
  timeout 120 compute-sanitizer --tool synccheck python3 ci/holes_case.py gpair prompt > "$OUT/synccheck.txt" 2>&1
  echo "synccheck: exit $?; $(grep -E 'ERROR SUMMARY' "$OUT/synccheck.txt")"
  race2 race_gpair_indirect --racecheck-indirect-barrier-dependency
  for probe in bar early "bar early"; do
    name=${probe// /_}
    for p in $probe; do git apply "docs/notes/gpair-$p.patch" || { echo "gpair-$p.patch does not apply"; exit 1; }; done
    GEOMS=256x12 build_plugins "/tmp/b_$name" "$OUT/build_$name.txt"
    quick "$name"
    race2 "race_$name"
    for p in $probe; do git apply -R "docs/notes/gpair-$p.patch"; done
  done
  git apply -R docs/notes/gpair.patch
  exit 0
fi
if [ "${RACE:-0}" = 1 ]; then
  # RACE=1 (~6 minutes): gpair's racecheck hazards (46 at 2100 x 300 and 4096 x 64, none for grouped's kernel under
  # the same calls) in detail, prompt calls, with every hazard's threads and address; then the form of
  # docs/notes/gpair-rows.patch (consumer 1's MMA rows clear of the padding rows): a quick check against fp32, its
  # prompt calls' hazards, its kernel times beside grouped's, its CUDA-graph replay at 32768 x 2048 (failed before the
  # union scratch stopped freeing inside a capture), the call path's graph tests (the scratch change), decode calls'
  # hazards, and prompt calls' with racecheck's indirect barrier dependencies.
  GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
  # race NAME OP [racecheck options]: racecheck of gpair's OP calls at 2100 x 300 and 4096 x 64 (holes, a width-0
  # query), every hazard listed (threads, shared address), into $OUT/NAME.txt
  race() {
    local name=$1 op=$2
    shift 2
    timeout 120 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 40 "$@" \
      python3 ci/holes_case.py gpair "$op" > "$OUT/$name.txt" 2>&1
    echo "$name: exit $?; $(grep -E 'RACECHECK SUMMARY' "$OUT/$name.txt")"
    grep -m 12 -E "hazard detected at|Write Thread|Read Thread" "$OUT/$name.txt"
  }
  race race_prompt prompt
  # gpair-rows.patch: consumer 1's MMA rows end at row 119, so that no MMA reads the padding rows the per-tile arrays
  # live in (prompt notes item 31's candidate); correct, clean, as fast?
  git apply docs/notes/gpair-rows.patch || { echo "gpair-rows.patch does not apply"; exit 1; }
  GEOMS=256x12 build_plugins /tmp/b1 "$OUT/build_rows.txt"
  timeout 120 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/quick_rows.txt"
import numpy as np
import strata_kernels as sk
from strata_kernels import testing
for ctx, n_q, op in [(4096, 64, "prompt"), (2100, 300, "prompt"), (1500, 23, "prompt"), (4096, 64, "decode")]:
    q, kv, ids, w = testing.to_torch(testing.make_case("int8", ctx, n_q, holes=True), "cuda")
    fn = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    a = fn(q, kv, ids, w, variant="gpair").cpu().numpy()
    b = fn(q, kv, ids, w, variant="fp32").cpu().numpy()
    print(f"rows form {op} {ctx}x{n_q}: max |gpair - fp32| / scale {float(np.abs(a - b).max() / np.abs(b).max()):.2e}, "
          f"finite {bool(np.isfinite(a).all())}", flush=True)
PY
  race race_prompt_rows prompt
  for v in grouped gpair grouped gpair; do
    echo "== $v (rows form)"
    CASE_PROMPT_VARIANT=$v timeout 100 python3 ci/grouped_kernels.py 32768x2048 1500x1500 2>&1 | grep -v -i warn
  done | tee "$OUT/kernels_rows.txt"
  timeout 100 python3 -m strata_kernels bench --device cuda --variant grouped,gpair --reps 10 \
    --shapes 32768x2048 --methods plugin --json "$OUT/bench_prompt.json" > "$OUT/bench_prompt.txt" 2>&1
  grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_prompt.txt"
  timeout 150 python3 -m pytest tests/gpu/test_callpath_gpu.py -q -p no:cacheprovider -k "graph" \
    > "$OUT/tests.txt" 2>&1
  tail -1 "$OUT/tests.txt"
  race race_decode_rows decode
  race race_prompt_rows_indirect prompt --racecheck-indirect-barrier-dependency yes
  git apply -R docs/notes/gpair-rows.patch
  git apply -R docs/notes/gpair.patch
  exit 0
fi
if [ "${PROFILE:-0}" = 1 ]; then
  GEOMS=256x12 build_plugins /tmp/b0 "$OUT/build.txt"
  KERNELS="grouped_ws_kernel grouped_union_kernel" \
    CASE="env CASE_PROMPT_VARIANT=gpair python3 ci/grouped_case.py 32768x2048" bash ci/grouped_profile.sh
  git apply -R docs/notes/gpair.patch
  exit 0
fi
GEOMS=256x12,128x8 build_plugins /tmp/b0 "$OUT/build.txt"
timeout 180 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/quick.txt"
import numpy as np
import torch
import strata_kernels as sk
from strata_kernels import testing
for hd, g in [(256, 12), (128, 8)]:
    for ctx, n_q, op in [(4096, 64, "prompt"), (2100, 300, "prompt"), (1500, 23, "prompt"), (4096, 64, "decode"),
                         (32768, 256, "decode")]:
        case = testing.make_case("int8", ctx, n_q, holes=True, head_dim=hd, group=g)
        q, kv, ids, w = testing.to_torch(case, "cuda")
        fn = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
        a = fn(q, kv, ids, w, variant="gpair").cpu().numpy()
        a2 = fn(q, kv, ids, w, variant="gpair").cpu().numpy()
        b = fn(q, kv, ids, w, variant="fp32").cpu().numpy()
        s = float(np.abs(b).max())
        print(f"({hd}, {g}) {op} {ctx}x{n_q}: max |gpair - fp32| / scale {float(np.abs(a - b).max()) / s:.2e}, "
              f"finite {bool(np.isfinite(a).all())}, repeat identical {bool(np.array_equal(a, a2))}", flush=True)
PY
# gpair's union pre-pass groups 10 queries: its running union (164 KB at cap 2051) allows one block a multiprocessor,
# so it is also timed with the union in clusters of 2 and 4 (STRATA_GROUPED_UNION_CLUSTER), whose ONE form needs no
# running union
for v in grouped gpair gpair:2 gpair:4 grouped gpair; do
  echo "== $v"
  cl=${v#*:}; [ "$cl" = "$v" ] && cl=
  STRATA_GROUPED_UNION_CLUSTER=$cl CASE_PROMPT_VARIANT=${v%:*} CASE_VARIANT=${v%:*} timeout 120 python3 \
    ci/grouped_kernels.py 32768x2048 1500x1500 2100x256 decode:32768x64 decode:32768x256 2>&1 | grep -v -i warn
done | tee "$OUT/kernels.txt"
timeout 200 python3 -m strata_kernels bench --device cuda --variant grouped,gpair --reps 10 \
  --shapes 32768x2048,131072x2048,1500x1500,2100x256 --methods plugin,gather-floor-grouped \
  --json "$OUT/bench_prompt.json" > "$OUT/bench_prompt.txt" 2>&1
grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_prompt.txt" | head -20
timeout 150 python3 -m strata_kernels bench --op decode --device cuda --variant auto,grouped,gpair --format int8 \
  --shapes 32768x64,32768x128,32768x256 --reps 20 --methods plugin --json "$OUT/bench_decode.json" \
  > "$OUT/bench_decode.txt" 2>&1
grep -E "^[0-9]+x[0-9]+ " "$OUT/bench_decode.txt" | head -20
parity_at gpair 256x12
# shellcheck disable=SC1091
. ci/sanitize.sh
run_sanitizers 100 python3 ci/holes_case.py gpair
# Last (a call that runs out of time loses only this): the other register split, producer 72 / consumers 216
# (docs/notes/gpair-72.patch: no producer spills, 14 local operations in the consumers' loop against 22 and 6),
# gpair's kernels timed again beside the first split's (kernels.txt) at two shapes.
if git apply docs/notes/gpair-72.patch && GEOMS=256x12 build_plugins /tmp/b72 "$OUT/build72.txt"; then
  echo "== gpair, producer 72 / consumers 216"
  CASE_PROMPT_VARIANT=gpair CASE_VARIANT=gpair timeout 60 python3 ci/grouped_kernels.py 32768x2048 decode:32768x64 \
    2>&1 | grep -v -i warn | tee "$OUT/kernels72.txt"
  git apply -R docs/notes/gpair-72.patch
fi
git apply -R docs/notes/gpair.patch
