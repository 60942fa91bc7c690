"""GPU time of each kernel of one grouped prompt call (union pre-pass, attention, merge of split units), by the
CUDA profiler (torch.profiler), at the spec's data: python3 ci/grouped_kernels.py [ctx x queries ...]."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import strata_kernels as sk
from strata_kernels import parity, testing

shapes = sys.argv[1:] or ["32768x2048", "131072x2048", "1500x1500", "2100x256"]
for shape in shapes:
    ctx, n_q = (int(x) for x in shape.split("x"))
    case = testing.make_case("int8", ctx, n_q)
    q, kv, ids, width = parity._place(case, ("cuda", 0))
    for _ in range(3):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    torch.cuda.synchronize()
    reps = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
        torch.cuda.synchronize()
    tot = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            name = ev.name.replace("(anonymous namespace)::", "").replace("void ", "").split("(")[0]
            tot[name] = tot.get(name, 0.0) + ev.device_time_total / reps
    print(shape, " ".join(f"{k} {v:.1f}us" for k, v in sorted(tot.items(), key=lambda kv: -kv[1])), flush=True)
