#!/usr/bin/env bash
# One call on the lent H200 for the decode operation's grouped rule (issue 12): builds the loader and the CPU and
# sm_90 plugins ((256, 12) and (128, 8)), then the stages in STAGES (default all), results under $OUT:
#   tests:  the decode, dispatch-model and grouped GPU tests
#   bench:  `strata-kernels bench --op decode`: the default (auto) beside flash and split, the copy floor and torch,
#           at 1-256 queries and three contexts (GB/s and CUDA-graph time); FORMATS (comma-separated, default int8)
#   probe:  ci/decode_grouped_probe.py, flash against grouped forced, INT8 / FP16 / K8V4 / Q4_0 at (256, 12) and
#           INT8 at (128, 8)
#   prompt: the prompt bench of grouped at the four shapes (the piece model changes its split at 1500 x 1500)
#   sanitize: memcheck and racecheck of grouped in decode calls whose units all run in pieces (holes, width 0)
# Usage: STAGES="tests bench" bash ci/gpu_decode_grouped.sh
STAGES=${STAGES:-tests bench probe prompt sanitize}
. ci/device_prelude.sh
device_env
GEOMS=256x12,128x8 build_plugins /tmp/b0 "$OUT/build.txt"
if has tests; then
  timeout 300 python3 -m pytest tests/gpu/test_flash_decode.py tests/gpu/test_dispatch_model_gpu.py \
    tests/gpu/test_grouped.py -q -rs -p no:cacheprovider 2>&1 | tee "$OUT/tests.txt" | tail -n 12
  status=$(( status | ${PIPESTATUS[0]} ))
fi
if has bench; then
  timeout 300 python3 -m strata_kernels bench --op decode --device cuda --variant auto,flash,split --format ${FORMATS:-int8} \
    --shapes ${SHAPES:-4096x1,4096x8,4096x64,4096x256,32768x1,32768x8,32768x64,32768x128,32768x192,32768x256,131072x1,131072x64,131072x256} \
    --reps 20 --methods plugin,copy-floor,torch-fp32-sdpa --json "$OUT/bench_decode.json" > "$OUT/bench_decode.txt" 2>&1
  rc=$?; status=$(( status | rc )); sed -n '/^context/,$p' "$OUT/bench_decode.txt"; [ $rc = 0 ] || tail -n 20 "$OUT/bench_decode.txt"
fi
if has probe; then
  { python3 ci/decode_grouped_probe.py 32768x48,32768x64,32768x96,32768x128,32768x192,32768x256 int8,fp16,k8v4,q4_0
    python3 ci/decode_grouped_probe.py 32768x32,32768x64,32768x128,32768x256 int8 128x8; } 2>&1 | grep -v -i warn \
    | tee "$OUT/probe.txt"
fi
if has prompt; then
  timeout 200 python3 -m strata_kernels bench --device cuda --variant auto --reps 10 \
    --shapes 32768x2048,131072x2048,1500x1500,2100x256 --methods plugin --json "$OUT/bench_prompt.json" \
    > "$OUT/bench_prompt.txt" 2>&1; status=$(( status | $? )); sed -n '/^context/,$p' "$OUT/bench_prompt.txt" | head -8
fi
if has sanitize; then
  . ci/sanitize.sh
  run_sanitizers 300 python3 -c "
import numpy as np, torch, strata_kernels as sk
from strata_kernels import parity, testing
for fmt, ctx, n_q in (('int8', 2100, 192), ('fp16', 1500, 64), ('k8v4', 2100, 40)):
    case = testing.make_case(fmt, ctx, n_q, holes=True, width0=True)
    for i, w in enumerate(case.width):
        case.ids[i, w:] = np.int32(2**31 - 1)  # never read
    q, kv, ids, w = parity._place(case, ('cuda', 0))
    print(fmt, ctx, n_q, sk.which(q, kv, ids, w, path='decode').variant, flush=True)
    sk.qsa_decode_attn(q, kv, ids, w)
torch.cuda.synchronize()
print('sanitizer workload done')"; status=$(( status | $? ))
fi
exit $status
