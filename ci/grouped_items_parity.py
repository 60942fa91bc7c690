"""Parity of the grouped kernel at sizes with more work items than multiprocessors (a persistent loop, pieces, holes,
width 0): QSA_SPEC §6.5 checks 1-2 on a sample of queries against FP64, all queries against fp32; repeatability.
On a CUDA device with torch; used by ci/gpu_try_variants.sh."""
import sys
import numpy as np
import torch
import strata_kernels as sk
from strata_kernels import reference, testing, parity

ok = True
for ctx, n_q, kw in [(32768, 2048, {}), (4096, 1403, {}), (1500, 1500, {"holes": True}), (2100, 700, {"width0": True})]:
    case = testing.make_case("int8", ctx, n_q, **kw)
    q, kv, ids, width = parity._place(case, ("cuda", 0))
    g = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    g2 = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32")
    torch.cuda.synchronize()
    same = bool(torch.equal(g, g2))
    g, f = g.cpu().numpy(), f.cpu().numpy()
    w = case.width if case.width.ndim == 1 else case.width[:, 3]
    sample = np.unique(np.concatenate([np.arange(0, n_q, max(1, n_q // 24)), np.arange(max(0, n_q - 7), n_q)]))
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, w, queries=sample)
    scale = max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(g[sample] - ref).max()); err32 = float(np.abs(f[sample] - ref).max())
    agree = float(np.abs(g - f).max())
    good = np.isfinite(g).all() and err <= max(4 * err32, 1e-6 * scale) and agree <= 1e-4 * scale and same
    ok &= bool(good)
    print(f"{ctx}x{n_q} {kw}: err {err:.3e} fp32 {err32:.3e} agree {agree:.3e} scale {scale:.3e} repeat {same} {'PASS' if good else 'FAIL'}", flush=True)
print("ALL PASS" if ok else "SOME FAIL")
sys.exit(0 if ok else 1)
