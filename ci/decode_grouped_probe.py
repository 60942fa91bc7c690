"""Issue 12 probe: GPU time (CUDA-graph replay) of the decode operation's `flash` beside `grouped` forced onto the
decode operation (one gather of the union of a group of queries' selections) on the same calls, and the largest
difference of their outputs. Usage: python3 ci/decode_grouped_probe.py CTXxQ[,CTXxQ...] [FORMATS] [HDxG]
(FORMATS comma-separated, default int8; HDxG the geometry, default 256x12, two KV heads)."""
import sys

import torch

import strata_kernels as sk
from strata_kernels import bench, testing

shapes = bench.parse_shapes(sys.argv[1])
fmts = (sys.argv[2] if len(sys.argv) > 2 else "int8").split(",")
hd, grp = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "256x12").split("x"))
for fmt, (ctx, n_q) in ((f, s) for f in fmts for s in shapes):
    case = testing.make_case(fmt, ctx, n_q, group=grp, head_dim=hd)
    q, tkv, ids, w = testing.to_torch(case, "cuda")
    res = {}
    for name, fn in (("flash", lambda o: sk.qsa_decode_attn(q, tkv, ids, w, variant="flash", out=o)),
                     ("grouped", lambda o: sk.qsa_decode_attn(q, tkv, ids, w, variant="grouped", out=o))):
        out = torch.empty_like(q)
        try:
            fn(out)
            torch.cuda.synchronize()
            ms = bench._graph_ms(lambda: fn(out), ("cuda", 0), calls=20, replays=10)
        except Exception as exc:  # noqa: BLE001
            print(f"{ctx}x{n_q} {name}: {type(exc).__name__}: {exc}", flush=True)
            continue
        res[name] = (ms, out.clone())
    line = f"{fmt} ({hd}, {grp}) {ctx}x{n_q}: " + ", ".join(f"{k} {v[0] * 1e3:.1f} us" for k, v in res.items())
    if len(res) == 2:
        a, b = res["flash"][1], res["grouped"][1]
        line += f", max |diff| / scale {float((a - b).abs().max() / a.abs().max()):.2e}"
    print(line, flush=True)
