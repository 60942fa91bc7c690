"""GPU time of each kernel of one grouped prompt call (union pre-pass, attention, merge of split units), by the
CUDA profiler (torch.profiler), at the spec's data: python3 ci/grouped_kernels.py [ctx x queries ...]."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from grouped_case import call, place  # ci/grouped_case.py (this script's directory is on sys.path)

shapes = sys.argv[1:] or ["32768x2048", "131072x2048", "1500x1500", "2100x256"]
for shape in shapes:
    args = place(shape)
    op = "decode" if shape.startswith("decode:") else ""
    for _ in range(3):
        call(args, op)
    torch.cuda.synchronize()
    reps = 10
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            call(args, op)
        torch.cuda.synchronize()
    tot = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            name = ev.name.replace("(anonymous namespace)::", "").replace("void ", "").split("(")[0]
            tot[name] = tot.get(name, 0.0) + ev.device_time_total / reps
    print(shape, " ".join(f"{k} {v:.1f}us" for k, v in sorted(tot.items(), key=lambda kv: -kv[1])), flush=True)
