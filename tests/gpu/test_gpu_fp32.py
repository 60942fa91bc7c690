"""The fp32 chunk + merge kernel on the GPU (QSA_SPEC §4.1) against FP64 and the CPU plugin; runs where a CUDA
device and torch exist (the H200 here)."""
import numpy as np
import pytest

import strata_kernels as sk
from strata_kernels import reference, testing


def _err(out, case, sample):
    w = case.width if case.width.ndim == 1 else case.width[:, 3]
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, w, queries=sample)
    return np.abs(out[sample] - ref).max(), np.abs(ref).max()


@pytest.mark.parametrize("fmt", ["int8", "fp16", "q4_0", "k8v4"])
@pytest.mark.parametrize("op", ["prompt", "decode"])
def test_fp32_matches_fp64_on_the_gpu(to_cuda, fmt, op):
    case = testing.make_case(fmt, 4096, 64)
    q, kv, ids, width = to_cuda(case)
    call = sk.qsa_prompt_attn if op == "prompt" else sk.qsa_decode_attn
    out = call(q, kv, ids, width, variant="fp32")
    assert out.is_cuda and out.dtype == q.dtype
    host = out.cpu().numpy()
    assert np.isfinite(host).all()
    err, scale = _err(host, case, np.arange(0, 64, 4))
    assert err <= 1e-5 * scale, f"{case.name}: {err:.3e} vs scale {scale:.3e}"
    cpu = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    # Not bitwise (fast exp on the GPU, host exp on the CPU), but the same algorithm and order.
    assert np.abs(host - cpu).max() <= 1e-5 * np.abs(cpu).max()


def test_fp32_is_deterministic_and_stream_ordered(to_cuda, torch_cuda):
    torch = torch_cuda
    case = testing.make_case("int8", 2100, 128)
    q, kv, ids, width = to_cuda(case)
    a = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        b = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32")
    s.synchronize()
    assert torch.equal(a, b)


@pytest.mark.parametrize("fmt", ["fp16", "int8", "k8v4"])
def test_holes_and_width_zero_on_the_gpu(to_cuda, fmt):
    for kw in ({"holes": True}, {"width0": True}):
        case = testing.make_case(fmt, 1500, 40, **kw)
        q, kv, ids, width = to_cuda(case)
        out = sk.qsa_decode_attn(q, kv, ids, width).cpu().numpy()
        err, scale = _err(out, case, np.arange(40))
        assert err <= 1e-5 * scale
        assert (out[case.width == 0] == 0).all()


def test_more_than_65535_queries_are_split(to_cuda):
    case = testing.make_case("int8", 200, 65541, periodic=True)
    q, kv, ids, width = to_cuda(case)
    out = sk.qsa_decode_attn(q, kv, ids, width).cpu().numpy()
    assert np.array_equal(out, out[np.arange(65541) % 251])
    err, scale = _err(out, case, np.arange(0, 65541, 4096))
    assert err <= 1e-5 * scale


def test_out_of_range_ids_raise_from_the_device(to_cuda, monkeypatch):
    # The immediate report of the debug setting; the default (lazy) report: test_callpath_gpu.py.
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    case = testing.make_case("int8", 2100, 8)
    case.ids[3, 5] = 10**8
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match="ids: query 3, position 5 holds cell 100000000"):
        sk.qsa_decode_attn(q, kv, ids, width)


def test_which_on_the_gpu(to_cuda):
    case = testing.make_case("int8", 2100, 8)
    q, kv, ids, width = to_cuda(case)
    w = sk.which(q, kv, ids, width)
    assert w.variant in sk.ops.plugin_variants(("cuda", 0))
    with pytest.raises(sk.Unsupported):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="rdna2")
