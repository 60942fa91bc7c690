"""The grouped prompt call the device scripts profile: the spec's INT8 data at one shape, placed on cuda:0.
`python3 ci/grouped_case.py [CTXxNQ]` makes two calls (the workload of ncu in ci/gpu_grouped.sh and
ci/grouped_profile.sh); ci/grouped_kernels.py imports `place` and `call`. CASE_OP=decode: the flash decode call
instead (`CASE_OP=decode python3 ci/grouped_kernels.py 32768x1`: the GPU time of flash and its merge kernel).
CASE_FMT: the KV format (default int8). CASE_VARIANT: the decode call's variant (default flash; `grouped` forces
the prompt kernel onto the decode call). CASE_PROMPT_VARIANT: the prompt call's (default grouped). A shape written "decode:CTXxNQ" makes that shape's calls decode calls."""
import os
import sys

import torch

import strata_kernels as sk
from strata_kernels import testing


def place(shape: str):
    """(q, kv, ids, width) on cuda:0 for a shape "CTXxNQ" (or "decode:CTXxNQ")."""
    ctx, n_q = (int(x) for x in shape.removeprefix("decode:").split("x"))
    return testing.to_torch(testing.make_case(os.environ.get("CASE_FMT", "int8"), ctx, n_q), "cuda")


def call(args, op: str = "") -> None:
    if (op or os.environ.get("CASE_OP")) == "decode":
        sk.qsa_decode_attn(*args, variant=os.environ.get("CASE_VARIANT", "flash"))
    else:
        sk.qsa_prompt_attn(*args, variant=os.environ.get("CASE_PROMPT_VARIANT", "grouped"))


if __name__ == "__main__":
    args = place(sys.argv[1] if len(sys.argv) > 1 else "32768x2048")
    for _ in range(2):
        call(args)
    torch.cuda.synchronize()
