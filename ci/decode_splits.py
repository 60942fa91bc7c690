"""Decode GPU time (CUDA-graph replay) of one variant over STRATA_DECODE_FLASH_SPLITS values: run once per value,
since the plugin reads the switch once per process. Usage: python3 ci/decode_splits.py VARIANT CTXxQ[,CTXxQ...]"""
import sys

import torch

import strata_kernels as sk
from strata_kernels import bench, testing

variant, shapes = sys.argv[1], bench.parse_shapes(sys.argv[2])
fmt = sys.argv[3] if len(sys.argv) > 3 else "int8"
for ctx, n_q in shapes:
    case = testing.make_case(fmt, ctx, n_q)
    q, tkv, ids, w = testing.to_torch(case, "cuda")
    out = torch.empty_like(q)
    fn = lambda: sk.qsa_decode_attn(q, tkv, ids, w, variant=variant, out=out)  # noqa: E731
    ms = bench._graph_ms(fn, ("cuda", 0), calls=20, replays=10)
    gb = bench.read_bytes(case) / (ms * 1e6)
    print(f"{variant} {fmt} {ctx}x{n_q} splits={__import__('os').environ.get('STRATA_DECODE_FLASH_SPLITS', 'auto')}: "
          f"{ms * 1e3:.1f} us, {gb:.0f} GB/s", flush=True)
