"""The flash decode call the device profile scripts run: the spec's INT8 data on cuda:0, three calls a shape.
Usage: `python3 ci/decode_case.py [CTXxNQ[,CTXxNQ...]]` (default 32768x64), as ci/grouped_profile.sh's CASE, in
ci/gpu_decode.sh's ncu stage and ci/gpu_flash_groups.sh's sanitizer workload."""
import sys

import torch

import strata_kernels as sk
from strata_kernels import testing

for shape in (sys.argv[1] if len(sys.argv) > 1 else "32768x64").split(","):
    ctx, n_q = (int(x) for x in shape.split("x"))
    q, kv, ids, width = testing.to_torch(testing.make_case("int8", ctx, n_q), "cuda")
    for _ in range(3):
        sk.qsa_decode_attn(q, kv, ids, width, variant="flash")
    torch.cuda.synchronize()
