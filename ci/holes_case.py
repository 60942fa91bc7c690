"""The sanitizer workload of the grouped-family device scripts: a variant's prompt and / or decode calls on the spec's
INT8 data with holes and a width-0 query, at 2100 x 300 and 4096 x 64 on cuda:0 (each shape's prompt call first).
Usage: `python3 ci/holes_case.py VARIANT [prompt|decode|both]` (default both); prints "sanitizer workload done", which
ci/sanitize.sh's summary looks for."""
import sys

import torch

import strata_kernels as sk
from strata_kernels import testing

variant = sys.argv[1]
which = sys.argv[2] if len(sys.argv) > 2 else "both"
if which not in ("prompt", "decode", "both"):
    sys.exit(f"ops: expected prompt, decode or both, got {which!r}")
ops = ("prompt", "decode") if which == "both" else (which,)
for ctx, n_q in [(2100, 300), (4096, 64)]:
    q, kv, ids, w = testing.to_torch(testing.make_case("int8", ctx, n_q, holes=True, width0=True), "cuda")
    for op in ops:
        getattr(sk, f"qsa_{op}_attn")(q, kv, ids, w, variant=variant)
torch.cuda.synchronize()
print("sanitizer workload done")
