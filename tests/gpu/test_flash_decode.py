"""The flash decode kernel (issue 12) on the GPU: every format against the FP64 oracle and the chunk + merge decode
(QSA_SPEC §6.5 checks 1-2), one split and many, masked cells (holes, width 0, garbage past the width), out-of-range
ids and page entries, bitwise repeatability, and that it is the decode default on sm_80+ (grouped where a call's
queries fill at least 16 of its blocks), and that its one- and two-warp-group blocks agree."""
import os
import subprocess
import sys

import numpy as np
import pytest

import strata_kernels as sk
from strata_kernels import dispatch_model, reference, testing


def _decode(to_cuda, case, variant):
    q, kv, ids, width = to_cuda(case)
    return sk.qsa_decode_attn(q, kv, ids, width, variant=variant).cpu().numpy()


@pytest.mark.parametrize("fmt", ["int8", "fp16", "q4_0", "k8v4"])
@pytest.mark.parametrize("ctx,n_q,kw", [
    (4096, 1, {}),                        # one query: many splits and the merge
    (32768, 64, {}),
    (2100, 300, {}),                      # enough queries for one split per (query, KV head): no merge
    (1500, 9, {"holes": True}),
    (1500, 9, {"width0": True}),
    (200, 3, {}),
])
def test_flash_matches_fp64_and_fp32(to_cuda, fmt, ctx, n_q, kw):
    if fmt == "q4_0" and kw:
        pytest.skip("the parity cases take holes and width 0 for fp16, int8 and k8v4 (docs/verification.md)")
    case = testing.make_case(fmt, ctx, n_q, **kw)
    out = _decode(to_cuda, case, "flash")
    f32 = _decode(to_cuda, case, "fp32")
    w = case.width if case.width.ndim == 1 else case.width[:, 3]
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, w)
    scale = max(float(np.abs(ref).max()), 1e-30)
    err, err32 = float(np.abs(out - ref).max()), float(np.abs(f32 - ref).max())
    assert np.isfinite(out).all()
    assert err <= max(4 * err32, 1e-6 * scale), f"{case.name}: flash {err:.3e}, fp32 {err32:.3e}, scale {scale:.3e}"
    assert float(np.abs(out - f32).max()) <= 1e-4 * scale
    if kw.get("width0"):
        assert (out[w == 0] == 0).all()


def test_flash_ignores_garbage_past_the_width_and_is_repeatable(to_cuda, torch_cuda):
    case = testing.make_case("int8", 8192, 16)
    for qi in range(case.n_q):
        case.ids[qi, case.width[qi]:] = np.int32(2**31 - 1)  # never read
    q, kv, ids, width = to_cuda(case)
    a = sk.qsa_decode_attn(q, kv, ids, width, variant="flash")
    b = sk.qsa_decode_attn(q, kv, ids, width, variant="flash")
    assert torch_cuda.equal(a, b)  # a fixed split and merge order: the same bits every call
    assert torch_cuda.isfinite(a).all()


@pytest.mark.parametrize("what", ["id", "page"])
def test_flash_flags_out_of_range_ids_and_pages(to_cuda, monkeypatch, what):
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")  # the immediate sentence (default: at the next call)
    case = testing.make_case("k8v4", 2100, 5)
    match = testing.corrupt(case, "ids", 3, 17) if what == "id" else testing.corrupt(case, "page_table", 2, 40)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_decode_attn(q, kv, ids, width, variant="flash")


def test_flash_is_the_decode_default_on_sm80_and_newer(to_cuda, torch_cuda):
    if torch_cuda.cuda.get_device_capability() < (8, 0):
        pytest.skip("flash needs sm_80+")
    for fmt in ("int8", "fp16", "q4_0", "k8v4"):
        q, kv, ids, width = to_cuda(testing.make_case(fmt, 300, 2))
        w = sk.which(q, kv, ids, width, path="decode")
        assert w.variant == "flash" and "flash" in w.reason, (fmt, w)


@pytest.mark.parametrize("fmt,n_q,want", [("int8", 64, "grouped"), ("fp16", 64, "grouped"), ("k8v4", 64, "grouped"),
                                          ("q4_0", 64, "flash"), ("q4_0", 96, "grouped")])
def test_a_decode_call_of_many_queries_runs_grouped_and_matches_fp64(to_cuda, torch_cuda, fmt, n_q, want):
    # (256, 12), two KV heads, 32768 cells (one union window): 64 queries are 128 (query, KV head) pairs (>= 72),
    # 96 are 192 (>= 152, Q4_0's bar), so the decode default is grouped there on a device with the shared memory for
    # it (sm_90, sm_100+); the result is FP32-level against the FP64 oracle, agrees with flash, and is the same bits
    # every call.
    if torch_cuda.cuda.get_device_capability() < (8, 0):
        pytest.skip("flash and grouped need sm_80+")
    case = testing.make_case(fmt, 32768, n_q)
    q, kv, ids, width = to_cuda(case)
    w = sk.which(q, kv, ids, width, path="decode")
    props = torch_cuda.cuda.get_device_properties(0)
    big = getattr(props, "shared_memory_per_block_optin", 0) >= dispatch_model.grouped_smem_bytes()
    assert w.variant == (want if big else "flash"), w
    a = sk.qsa_decode_attn(q, kv, ids, width)
    b = sk.qsa_decode_attn(q, kv, ids, width)
    assert torch_cuda.equal(a, b)
    out = a.cpu().numpy()
    f32 = _decode(to_cuda, case, "fp32")
    fl = _decode(to_cuda, case, "flash")
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, case.width)
    scale = max(float(np.abs(ref).max()), 1e-30)
    err, err32 = float(np.abs(out - ref).max()), float(np.abs(f32 - ref).max())
    assert err <= max(4 * err32, 1e-6 * scale), f"{fmt}: {w.variant} {err:.3e}, fp32 {err32:.3e}, scale {scale:.3e}"
    assert float(np.abs(out - fl).max()) <= 1e-4 * scale


_GROUPS = """
import sys, numpy as np, strata_kernels as sk
from strata_kernels import testing
outs = []
for fmt in ("int8", "fp16", "q4_0", "k8v4"):
    for ctx, n_q in ((4096, 1), (2100, 2), (200, 3)):  # 33 splits of 2 tiles; 2 queries; splits of 2 and 1 tiles
        q, kv, ids, width = testing.to_torch(testing.make_case(fmt, ctx, n_q), "cuda")
        a = sk.qsa_decode_attn(q, kv, ids, width, variant="flash")
        assert (a == sk.qsa_decode_attn(q, kv, ids, width, variant="flash")).all(), (fmt, ctx, n_q)
        outs.append(a.cpu().numpy().ravel())
np.save(sys.argv[1], np.concatenate(outs))
"""


def test_flash_one_and_two_warp_groups_a_block_agree(tmp_path, torch_cuda):
    """Where a decode grid fills at most half the multiprocessors (one query), flash's blocks on sm_90 take a split's
    tiles in two warp groups and join them at the end (not FP16); STRATA_DECODE_FLASH_GROUPS (read once a process)
    forces one form or the other, every format. Both are repeatable bit for bit and agree to FP32 level (the default
    form of each call is checked against FP64 by the tests above)."""
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the two-group blocks are built for sm_90 only (backends/cuda.toml's smem_160k)")
    outs = {}
    for groups in ("1", "2"):
        path = tmp_path / f"groups{groups}.npy"
        r = subprocess.run([sys.executable, "-c", _GROUPS, str(path)], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "STRATA_DECODE_FLASH_GROUPS": groups})
        assert r.returncode == 0, r.stdout + r.stderr
        outs[groups] = np.load(path)
    scale = float(np.abs(outs["1"]).max())
    assert np.isfinite(outs["2"]).all()
    assert float(np.abs(outs["1"] - outs["2"]).max()) <= 1e-5 * scale
