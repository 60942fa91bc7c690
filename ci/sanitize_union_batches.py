"""The union pre-pass's batched cluster form (MANY over more windows than its cluster, where a group's running union
outgrows shared memory: G 1-4) under compute-sanitizer: grouped forced at (128, 4) and (128, 2) on caches of two
batches, holes, width 0 and ids past the width holding garbage, prompt and decode, INT8. Needs the sm_90 plugin with
those geometries."""
import os
import sys

import numpy as np
import torch

import strata_kernels as sk
from strata_kernels.testing import to_torch

CASES = [(4, 262144, 16, "8"), (4, 262144, 20, ""), (2, 65536, 40, "4"), (2, 65536, 40, "2")]


def main() -> int:
    ran = 0
    for group, ctx, n_q, cb in CASES:
        os.environ["STRATA_GROUPED_UNION_CLUSTER"] = cb  # "": the launcher's rule
        case = sk.testing.make_case("int8", ctx, n_q, holes=True, width0=True, head_dim=128, group=group)
        for i, w in enumerate(case.width):
            case.ids[i, w:] = np.int32(2**31 - 1)  # never read
        q, kv, ids, width = to_torch(case, "cuda")
        for call in (sk.qsa_prompt_attn, sk.qsa_decode_attn):
            out = call(q, kv, ids, width, variant="grouped")
            torch.cuda.synchronize()
            assert torch.isfinite(out).all(), (group, ctx, n_q, cb)
            ran += 1
            print(f"ran (128, {group}) {ctx} x {n_q} clusters {cb or 'rule'} {call.__name__}", flush=True)
    print(f"sanitizer workload: {ran} calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
