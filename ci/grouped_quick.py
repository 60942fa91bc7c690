"""The grouped-family device scripts' quick check: grouped's calls against fp32 on the spec's INT8 data with holes,
each case with its own STRATA_GROUPED_PAIR (unset, 0 or 1), two calls' bits compared, and which()'s reason where the
switch is unset (prompt calls). Usage: `python3 ci/grouped_quick.py CASE...`, a case OP:CTXxNQ[:PAIR], e.g.
`prompt:2100x300 prompt:4096x64:1 decode:32768x256`; one line a case."""
import os
import sys

import numpy as np

import strata_kernels as sk
from strata_kernels import testing

for spec in sys.argv[1:]:
    op, shape, *pair = spec.split(":")
    if op not in ("prompt", "decode"):
        sys.exit(f"{spec}: expected prompt or decode, got {op!r}")
    ctx, n_q = (int(v) for v in shape.split("x"))
    sw = pair[0] if pair else ""
    os.environ["STRATA_GROUPED_PAIR"] = sw
    q, kv, ids, w = testing.to_torch(testing.make_case("int8", ctx, n_q, holes=True), "cuda")
    fn = getattr(sk, f"qsa_{op}_attn")
    a = fn(q, kv, ids, w, variant="grouped").cpu().numpy()
    a2 = fn(q, kv, ids, w, variant="grouped").cpu().numpy()
    b = fn(q, kv, ids, w, variant="fp32").cpu().numpy()
    why = sk.which(q, kv, ids, w).reason if sw == "" and op == "prompt" else ""
    err = float(np.abs(a - b).max() / np.abs(b).max())
    print(f"{op} {ctx}x{n_q} STRATA_GROUPED_PAIR={sw or 'unset'}: max |grouped - fp32| / scale {err:.2e}, finite "
          f"{bool(np.isfinite(a).all())}, repeat identical {bool(np.array_equal(a, a2))} {why}", flush=True)
