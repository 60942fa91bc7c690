"""Bad inputs, determinism, threads, frameworks, variants and `which` on the CPU plugin."""

import numpy as np
import pytest

from strata_kernels import testing


@pytest.fixture(scope="module")
def case():
    return testing.make_case("int8", 2100, 16)


def test_the_same_call_twice_gives_the_same_bits(sk, case):
    a = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    b = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    assert a.tobytes() == b.tobytes()


def test_thread_count_does_not_change_bits(sk, case, monkeypatch):
    a = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    # STRATA_NUM_THREADS is read per call by the plugin.
    monkeypatch.setenv("STRATA_NUM_THREADS", "1")
    b = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    monkeypatch.setenv("STRATA_NUM_THREADS", "3")
    c = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    assert a.tobytes() == b.tobytes() == c.tobytes()


def test_calls_from_four_threads_at_once(sk, case):
    expected = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    results = testing.in_threads(lambda i: sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width), 4)
    for r in results:
        assert r.tobytes() == expected.tobytes()


def test_out_argument_is_filled_in_place(sk, case):
    out = np.full(case.q.shape, np.nan, np.float32)
    got = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width, out=out)
    assert got is out and np.isfinite(out).all()


def test_variants_on_cpu(sk, case):
    ref = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    assert np.array_equal(sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width, variant="fp32"), ref)
    assert np.array_equal(sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width, variant="auto"), ref)
    with pytest.raises(sk.Unsupported, match="not in the cpu plugin"):
        sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width, variant="v2")
    f64 = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width, variant="fp64")
    assert np.abs(f64 - ref).max() <= 1e-5 * np.abs(f64).max()


def test_which_names_the_variant_and_why(sk, case):
    w = sk.which(case.q, case.kv, case.ids, case.width)
    assert w.variant == "fp32" and "CPU" in w.reason
    assert sk.which(case.q, case.kv, case.ids, case.width, path="decode").variant == "fp32"
    with pytest.raises(ValueError, match="path"):
        sk.which(case.q, case.kv, case.ids, case.width, path="sideways")


def test_no_queries_is_a_no_op(sk, case):
    out = sk.qsa_prompt_attn(case.q[:0], case.kv, case.ids[:0], case.width[:0])
    assert out.shape == (0, 24, 256)


# --- bad inputs: ValueError / TypeError naming the argument, expected and actual -------------------------------

def _call(sk, case, **kw):
    args = dict(q=case.q, kv=case.kv, ids=case.ids, width=case.width)
    args.update(kw)
    return sk.qsa_prompt_attn(args["q"], args["kv"], args["ids"], args["width"])


@pytest.mark.parametrize("kw, exc, needle", [
    (lambda c: {"q": c.q.astype(np.float64)}, TypeError, "q: expected float32, got numpy float64"),
    (lambda c: {"q": np.ascontiguousarray(c.q[:, :22])}, ValueError, "q: n_head 22"),
    (lambda c: {"q": np.ascontiguousarray(c.q[:, :, :128])}, ValueError, "q: head_dim 128 does not match"),
    (lambda c: {"q": c.q[:, :, ::2]}, ValueError, "head_dim"),
    (lambda c: {"q": np.asfortranarray(c.q)}, ValueError, "q: expected a C-contiguous"),
    (lambda c: {"ids": c.ids.astype(np.int64)}, TypeError, "ids: expected int32"),
    (lambda c: {"ids": c.ids[:-1]}, ValueError, r"ids: expected shape \[n_q=16, cap\]"),
    (lambda c: {"ids": c.ids[:, ::2]}, ValueError, "ids: expected a C-contiguous"),
    (lambda c: {"width": c.width[:-1]}, ValueError, r"width: expected shape \[n_q=16\]"),
    (lambda c: {"width": c.width.astype(np.float32)}, TypeError, "width: expected int32"),
    (lambda c: {"width": np.full(16, -1, np.int32)}, ValueError, "width: query 0 has width -1"),
    (lambda c: {"width": np.full(16, 3000, np.int32)}, ValueError, "width: query 0 has width 3000, expected 0 <= width <= cap = 2051"),
    (lambda c: {"kv": "cache"}, TypeError, "kv: expected a strata_kernels.KVCache"),
    (lambda c: {"q": [1.0]}, TypeError, "q: expected an array"),
])
def test_bad_inputs_name_the_argument(sk, case, kw, exc, needle):
    with pytest.raises(exc, match=needle):
        _call(sk, case, **kw(case))


def _misaligned(a):
    """A C-contiguous copy of a whose data starts 4 bytes past a 16-byte boundary."""
    buf = np.empty(a.size + 8, a.dtype)
    start = (-buf.ctypes.data % 16 + 4) // a.itemsize
    v = buf[start:start + a.size].reshape(a.shape)
    v[...] = a
    assert v.ctypes.data % 16 == 4 and v.flags.c_contiguous
    return v


def test_q_and_out_off_a_16_byte_boundary_are_refused_before_any_kernel(sk, case):
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        sk.qsa_prompt_attn(_misaligned(case.q), case.kv, case.ids, case.width)
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width, out=_misaligned(np.zeros_like(case.q)))
    out = np.zeros_like(case.q)  # a fresh array passes
    assert np.array_equal(sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width, out=out),
                          sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width))


def test_a_plan_refuses_q_or_out_off_a_16_byte_boundary(sk, case):
    torch = pytest.importorskip("torch")
    kv = case.kv
    q, tkv, ids, width = sk.testing.to_torch(case, "cpu")
    p = sk.plan(tkv, "decode", max_queries=16, cap=case.ids.shape[1], n_head=case.q.shape[1])
    flat = torch.zeros(q.numel() + 4)
    off = (-flat.data_ptr() % 16 + 4) // 4  # a view 4 bytes past a 16-byte boundary
    bad = flat[off:off + q.numel()].view(q.shape)
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        p.run(q, ids, width, out=bad)
    bad.copy_(q)
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        p.run(bad, ids, width)
    assert torch.equal(p.run(q, ids, width), torch.from_numpy(sk.qsa_decode_attn(case.q, kv, case.ids, case.width)))


def test_a_numpy_plan_refuses_q_or_out_off_a_16_byte_boundary(sk, case):
    """The numpy plan hands its arrays to the loader, which reads their addresses (run_arrays): the alignment is
    checked there, and the refusal names the argument and writes nothing."""
    p = sk.plan(case.kv, "decode", max_queries=16, cap=case.ids.shape[1], n_head=case.q.shape[1])
    bad_out = _misaligned(np.full_like(case.q, 7.0))
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        p.run(case.q, case.ids, case.width, out=bad_out)
    assert (bad_out == 7.0).all()
    out = np.full_like(case.q, 7.0)
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        p.run(_misaligned(case.q), case.ids, case.width, out=out)
    assert (out == 7.0).all()
    assert np.array_equal(p.run(case.q, case.ids, case.width, out=out),
                          sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width))


def test_ids_outside_the_cache_raise_and_nothing_crashes(sk, case):
    ids = case.ids.copy()
    ids[5, 17] = 10**9
    ids[9, 3] = -4
    with pytest.raises(ValueError, match=r"ids: query 5, position 17 holds cell 1000000000, outside the cache"):
        _call(sk, case, ids=ids)


def test_page_table_entries_outside_the_pools_raise(sk, case):
    kv = case.kv
    pt = kv.page_table.copy()
    pt[case.ids[3, 0] // 4] = 10**6
    kv2 = sk.KVCache.int8(kv.k, kv.k_scale, kv.v, kv.v_scale, pt)
    with pytest.raises(ValueError, match=r"page_table: entry \d+ .* is 1000000, expected -1 or a physical page"):
        _call(sk, case, kv=kv2)


def test_kvcache_constructors_check_their_arrays(sk, case):
    kv = case.kv
    with pytest.raises(TypeError, match="k: expected int8"):
        sk.KVCache.int8(kv.k.astype(np.int16), kv.k_scale, kv.v, kv.v_scale, kv.page_table)
    with pytest.raises(ValueError, match=r"v_scale: expected shape"):
        sk.KVCache.int8(kv.k, kv.k_scale, kv.v, kv.v_scale[:, :, :, :2], kv.page_table)
    with pytest.raises(ValueError, match=r"k: expected shape \[pages, n_head_kv, 4, row\]"):
        sk.KVCache.int8(kv.k[:, :, :2], kv.k_scale, kv.v, kv.v_scale, kv.page_table)
    with pytest.raises(TypeError, match="page_table: expected int32"):
        sk.KVCache.int8(kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table.astype(np.int64))
    with pytest.raises(ValueError, match="Q4_0 row"):
        sk.KVCache.q4_0(np.zeros((2, 1, 4, 100), np.uint8), np.zeros((2, 1, 4, 100), np.uint8),
                        np.zeros(2, np.int32))


# --- torch tensors in and out --------------------------------------------------------------------------------

def test_torch_tensors_in_and_out(sk, case):
    torch = pytest.importorskip("torch")
    kv = case.kv
    q, tkv, ids, width = sk.testing.to_torch(case, "cpu")
    out = sk.qsa_prompt_attn(q, tkv, ids, width)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    ref = sk.qsa_prompt_attn(case.q, kv, case.ids, case.width)
    assert np.array_equal(out.numpy(), ref)
    op = torch.ops.strata_kernels.qsa_prompt_attn(q, "int8", tkv.k, tkv.k_scale, tkv.v, tkv.v_scale, tkv.page_table,
                                                   ids, width)
    assert np.array_equal(op.numpy(), ref)
    with pytest.raises(ValueError, match="ids: expected the same device as q"):
        sk.qsa_prompt_attn(q.to("meta"), tkv, ids, width)


def test_portable_and_avx2_forms_give_the_same_bits(sk, tmp_path):
    """The CPU kernel is compiled twice (portable, AVX2+FMA); the choice must never change a bit."""
    import subprocess
    import sys
    code = ("import numpy as np, strata_kernels as sk\n"
            "for fmt in ('int8', 'fp16', 'q4_0', 'k8v4'):\n"
            "    c = sk.testing.make_case(fmt, 2100, 6, holes=True)\n"
            "    np.save(f'{out}/{fmt}.npy', sk.qsa_prompt_attn(c.q, c.kv, c.ids, c.width))\n")
    import os
    for isa in ("portable", "native"):
        d = tmp_path / isa
        d.mkdir()
        env = dict(os.environ, STRATA_CPU_ISA=isa)
        subprocess.run([sys.executable, "-c", f"out = {str(d)!r}\n" + code], check=True, env=env)
    for fmt in ("int8", "fp16", "q4_0", "k8v4"):
        a, b = np.load(tmp_path / "portable" / f"{fmt}.npy"), np.load(tmp_path / "native" / f"{fmt}.npy")
        assert a.tobytes() == b.tobytes(), fmt
