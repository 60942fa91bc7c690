"""The flash decode call the device profile scripts run: the spec's INT8 data at one shape on cuda:0, three calls.
Usage: `python3 ci/decode_case.py [CTXxNQ]` (default 32768x64), e.g. as ci/grouped_profile.sh's CASE."""
import sys

import torch

import strata_kernels as sk
from strata_kernels import testing

ctx, n_q = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "32768x64").split("x"))
case = testing.make_case("int8", ctx, n_q)
t = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
kv = sk.KVCache.int8(t(case.kv.k), t(case.kv.k_scale), t(case.kv.v), t(case.kv.v_scale), t(case.kv.page_table))
q, ids, w = t(case.q), t(case.ids), t(case.width)
for _ in range(3):
    sk.qsa_decode_attn(q, kv, ids, w, variant="flash")
torch.cuda.synchronize()
