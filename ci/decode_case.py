"""The flash decode call the device profile scripts run: the spec's INT8 data at one shape on cuda:0, three calls.
Usage: `python3 ci/decode_case.py [CTXxNQ]` (default 32768x64), as ci/grouped_profile.sh's CASE and in
ci/gpu_decode.sh's ncu stage."""
import sys

import torch

import strata_kernels as sk
from strata_kernels import testing

ctx, n_q = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "32768x64").split("x"))
q, kv, ids, width = testing.to_torch(testing.make_case("int8", ctx, n_q), "cuda")
for _ in range(3):
    sk.qsa_decode_attn(q, kv, ids, width, variant="flash")
torch.cuda.synchronize()
