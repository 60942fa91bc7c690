"""Every variant of the GPU plugin (or those named on the command line), forced, on a reduced case of each format it takes (holes, width 0, and ids past
the width holding garbage): the workload for compute-sanitizer memcheck / racecheck in ci/gpu_h200.sh."""
import sys

import numpy as np
import torch

import strata_kernels as sk
from strata_kernels.targets import VARIANT_RULES

FORMATS = {0: "fp16", 1: "int8", 2: "q4_0", 3: "k8v4"}


def main() -> int:
    held = sk.ops.plugin_variants(("cuda", 0))
    variants = [v for v in held if v in sys.argv[1:]] if len(sys.argv) > 1 else held  # a subset by name
    ran = 0
    for v in variants:
        rule = VARIANT_RULES[v]
        for code in rule["formats"]:
            # The split decode shares the chunk + merge scratch and refuses where its partials do not fit it
            # (QSA_SPEC §4.9): give it a context long enough to run.
            ctx, n_q = (2100, 3) if v in ("split", "flash") else (300, 6)
            case = sk.testing.make_case(FORMATS[code], ctx, n_q, holes=True, width0=True)
            for i, w in enumerate(case.width):
                case.ids[i, w:] = np.int32(2**31 - 1)  # never read
            placed = sk.testing.to_torch(case, "cuda")
            for op in rule["ops"]:
                call = sk.qsa_prompt_attn if op == "prompt" else sk.qsa_decode_attn
                out = call(*placed, variant=v)
                torch.cuda.synchronize()
                assert torch.isfinite(out).all(), (v, case.fmt, op)
                ran += 1
                print(f"ran {v} {case.fmt} {op}", flush=True)
    print(f"sanitizer workload: {ran} calls over {len(variants)} variants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
