"""The FP64 oracle (QSA_SPEC §1.2, §4.10) against a plain loop written straight from the definition."""
from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from strata_kernels import reference as R
from strata_kernels.ops import KVCache

D, G, NKV = 64, 3, 2           # tiny geometry: head_dim 64 (one scale group, two Q4_0 blocks), 6 query heads
N_PAGES, N_PHYS = 7, 7         # logical pages, physical pages (28 cells)
FORMATS = ("fp16", "int8", "q4_0", "k8v4")


# -- a tiny KV cache with holes, built by hand -----------------------------------------------------------------
def _q4_bytes(rs: np.random.RandomState, lead: tuple[int, ...]) -> np.ndarray:
    nb = D // 32
    blocks = rs.randint(0, 256, size=lead + (nb, 18)).astype(np.uint8)
    d = (rs.standard_normal(lead + (nb,)) * 0.3).astype("<f2")
    blocks[..., 0:2] = d.view(np.uint8).reshape(lead + (nb, 2))
    return blocks.reshape(lead + (nb * 18,))


def _tiny_kv(fmt: str, seed: int = 0) -> KVCache:
    rs = np.random.RandomState(seed)
    lead = (N_PHYS, NKV, 4)
    page_table = np.array([3, 0, -1, 5, 1, 6, 2], dtype=np.int32)    # logical page 2 is not resident
    if fmt == "fp16":
        return KVCache.fp16(rs.standard_normal(lead + (D,)).astype(np.float16),
                            rs.standard_normal(lead + (D,)).astype(np.float16), page_table)
    codes = lambda: rs.randint(-128, 128, size=lead + (D,)).astype(np.int8)          # noqa: E731 (incl. -128)
    scales = lambda: rs.uniform(0.005, 0.03, size=lead + (D // 64,)).astype(np.float16)  # noqa: E731
    if fmt == "int8":
        return KVCache.int8(codes(), scales(), codes(), scales(), page_table)
    if fmt == "q4_0":
        return KVCache.q4_0(_q4_bytes(rs, lead), _q4_bytes(rs, lead), page_table)
    return KVCache.k8v4(codes(), scales(), _q4_bytes(rs, lead), page_table)


def _tiny_inputs(seed: int = 1):
    rs = np.random.RandomState(seed)
    n_q, cap = 6, 12
    q = (rs.standard_normal((n_q, G * NKV, D)) * 2.0).astype(np.float32)
    ids = rs.randint(0, 4 * N_PAGES, size=(n_q, cap)).astype(np.int32)
    ids.sort(axis=1)
    width = np.array([12, 7, 0, 3, 12, 5], dtype=np.int32)
    ids[3, :3] = [8, 9, 11]                       # all three cells in logical page 2 (a hole): nothing valid
    ids[4, 5] = ids[4, 4]                         # a duplicate id counts twice
    ids[5, :5] = [-3, 0, 4 * N_PAGES, 6, 27]      # out-of-range ids are masked
    ids[1, 7:] = 10**6                            # garbage past the width is never read
    return q, ids, width


# -- the definition, one element at a time ---------------------------------------------------------------------
def _half(b0: int, b1: int) -> float:
    return struct.unpack("<e", bytes([b0, b1]))[0]


def _naive_row(kv: KVCache, which: str, r: int) -> list[float]:
    fmt = kv.format
    kind = {"fp16": "fp16", "int8": "int8", "q4_0": "q4", "k8v4": "int8" if which == "k" else "q4"}[fmt]
    pool = (kv.k if which == "k" else kv.v).reshape(-1, kv.k.shape[-1] if which == "k" else kv.v.shape[-1])
    row = pool[r]
    if kind == "fp16":
        return [float(x) for x in row]
    if kind == "int8":
        sc = (kv.k_scale if which == "k" else kv.v_scale).reshape(-1, D // 64)[r]
        return [int(row[d]) * float(sc[d // 64]) for d in range(D)]
    vals = []
    for b in range(D // 32):
        blk = [int(x) for x in row[18 * b: 18 * b + 18]]
        d = _half(blk[0], blk[1])
        vals += [((blk[2 + j] & 15) - 8) * d for j in range(16)]
        vals += [((blk[2 + j] >> 4) - 8) * d for j in range(16)]
    return vals


def _naive_attn(q, kv: KVCache, ids, width, budget: bool = False) -> np.ndarray:
    n_q, n_head, _ = q.shape
    group = n_head // kv.n_head_kv
    out = np.zeros((n_q, n_head, D))
    for qi in range(n_q):
        for h in range(n_head):
            kvh = h // group
            s, vs = [], []
            for j in range(int(width[qi])):
                c = int(ids[qi][j])
                if c < 0 or c >= 4 * kv.page_table.shape[0]:
                    continue
                p = int(kv.page_table[c // 4])
                if p < 0 or p >= kv.n_phys_pages:
                    continue
                r = (p * kv.n_head_kv + kvh) * 4 + c % 4
                k = _naive_row(kv, "k", r)
                s.append(sum(float(q[qi, h, d]) * k[d] for d in range(D)) / math.sqrt(D))
                vs.append(_naive_row(kv, "v", r))
            if not s:
                continue
            m = max(s)
            e = [math.exp(x - m) for x in s]
            l = sum(e)
            for d in range(D):
                if budget:
                    out[qi, h, d] = sum(ej * (2**-11 * abs(v[d]) + 2**-25) for ej, v in zip(e, vs)) / l
                else:
                    out[qi, h, d] = sum(ej * v[d] for ej, v in zip(e, vs)) / l
    return out


# -- tests -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_fp64_oracle_matches_the_definition_loop(fmt):
    kv = _tiny_kv(fmt)
    q, ids, width = _tiny_inputs()
    ref = R.qsa_attn_fp64(q, kv, ids, width)
    naive = _naive_attn(q, kv, ids, width)
    assert ref.dtype == np.float64 and ref.shape == q.shape
    assert np.abs(naive).max() > 0.1
    np.testing.assert_allclose(ref, naive, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("fmt", FORMATS)
def test_width_0_and_all_hole_queries_are_exactly_zero(fmt):
    kv = _tiny_kv(fmt)
    q, ids, width = _tiny_inputs()
    ref = R.qsa_attn_fp64(q, kv, ids, width)
    assert np.all(ref[2] == 0.0)          # width 0
    assert np.all(ref[3] == 0.0)          # every selected cell in a non-resident page
    assert np.all(np.abs(ref[[0, 1, 4, 5]]).max(axis=(1, 2)) > 0)
    want = [sum(1 for c in ids[i, :width[i]] if 0 <= c < 4 * N_PAGES and kv.page_table[c // 4] >= 0)
            for i in range(len(width))]
    assert list(R.count_valid(kv, ids, width)) == want
    assert want[2] == want[3] == 0 and want[5] == 3


def test_cells_in_non_resident_pages_are_absent_not_zero_scored():
    """§1.3 masking: a hole cell is removed from the softmax; upstream's dilution (score 0, value 0) is not used."""
    kv = _tiny_kv("int8")
    q, _, _ = _tiny_inputs()
    with_holes = np.array([[0, 4, 8, 9, 10, 13, 20]], dtype=np.int32)      # 8, 9, 10 lie in logical page 2
    without = np.array([[0, 4, 13, 20, 0, 0, 0]], dtype=np.int32)
    a = R.qsa_attn_fp64(q[:1], kv, with_holes, np.array([7], np.int32))
    b = R.qsa_attn_fp64(q[:1], kv, without, np.array([4], np.int32))
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=0)


def test_out_of_range_ids_and_page_entries_are_masked():
    kv = _tiny_kv("fp16")
    pt = kv.page_table.copy()
    pt[6] = N_PHYS + 5                                                   # a page that does not exist
    kv_bad = KVCache.fp16(kv.k, kv.v, pt)
    q, _, _ = _tiny_inputs()
    ids = np.array([[-1, 1, 5, 25, 26, 28, 2**31 - 1]], dtype=np.int32)  # 25, 26 in logical page 6; 28 = 4 * 7
    a = R.qsa_attn_fp64(q[:1], kv_bad, ids, np.array([7], np.int32))
    b = R.qsa_attn_fp64(q[:1], kv_bad, np.array([[1, 5]], np.int32), np.array([2], np.int32))
    np.testing.assert_allclose(a, b, rtol=1e-14, atol=0)
    assert np.abs(a).max() > 0


def test_ids_past_the_width_are_ignored():
    kv = _tiny_kv("q4_0")
    q, ids, width = _tiny_inputs()
    other = ids.copy()
    for i in range(ids.shape[0]):
        other[i, width[i]:] = 17
    np.testing.assert_array_equal(R.qsa_attn_fp64(q, kv, ids, width), R.qsa_attn_fp64(q, kv, other, width))


def test_query_head_h_reads_kv_head_h_div_G_not_h_mod_n_head_kv():
    lead = (N_PHYS, NKV, 4)
    k = np.zeros(lead + (D,), np.float16)
    v = np.empty(lead + (D,), np.float16)
    v[:, 0] = -1.0                      # KV head 0
    v[:, 1] = 5.0                       # KV head 1
    kv = KVCache.fp16(k, v, np.arange(N_PAGES, dtype=np.int32))
    q = np.ones((1, G * NKV, D), np.float32)
    out = R.qsa_attn_fp64(q, kv, np.array([[0, 1, 2, 3]], np.int32), np.array([4], np.int32))
    assert np.all(out[0, :G] == -1.0)   # heads 0..G-1: KV head 0
    assert np.all(out[0, G:] == 5.0)    # heads G..2G-1: KV head 1


def test_softmax_subtracts_the_maximum_before_exp():
    kv = _tiny_kv("fp16")
    q, ids, width = _tiny_inputs()
    big = q * 400.0                                        # scores of several thousand: exp would overflow
    out = R.qsa_attn_fp64(big, kv, ids, width)
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, _naive_attn(big, kv, ids, width), rtol=1e-10, atol=1e-12)


def test_steps_form_reads_column_3():
    kv = _tiny_kv("int8")
    q, ids, width = _tiny_inputs()
    steps = np.zeros((len(width), 4), np.int32)
    steps[:, 0] = 99
    steps[:, 3] = width
    np.testing.assert_array_equal(R.qsa_attn_fp64(q, kv, ids, steps), R.qsa_attn_fp64(q, kv, ids, width))


def test_queries_selects_rows_in_the_given_order():
    kv = _tiny_kv("k8v4")
    q, ids, width = _tiny_inputs()
    full = R.qsa_attn_fp64(q, kv, ids, width)
    part = R.qsa_attn_fp64(q, kv, ids, width, queries=[4, 0])
    np.testing.assert_array_equal(part, full[[4, 0]])


def test_dequant_rows_int8_is_code_times_group_scale():
    kv = _tiny_kv("int8")
    got = R.dequant_rows(kv, "v")
    want = kv.v.astype(np.float64) * np.repeat(kv.v_scale.astype(np.float64), 64, axis=-1)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (N_PHYS, NKV, 4, D)
    assert (kv.v == -128).any()          # code -128 is handled exactly too


def test_dequant_rows_q4_0_nibble_order_and_signed_scale():
    lead = (1, 1, 4)
    k = np.zeros(lead + (D // 32 * 18,), np.uint8)
    blk = k[0, 0, 0]
    blk[0:2] = np.array([-0.5], "<f2").view(np.uint8)       # d = -0.5 (signed)
    blk[2] = 0x3A                                           # element 0 = low nibble 0xA, element 16 = high 0x3
    blk[17] = 0xF0                                          # element 15 = 0x0, element 31 = 0xF
    kv = KVCache.q4_0(k, k.copy(), np.zeros(1, np.int32))
    row = R.dequant_rows(kv, "k")[0, 0, 0]
    assert row[0] == (0xA - 8) * -0.5
    assert row[16] == (0x3 - 8) * -0.5
    assert row[15] == (0x0 - 8) * -0.5
    assert row[31] == (0xF - 8) * -0.5
    assert row[1] == (0 - 8) * -0.5                         # byte 0 -> both nibbles 0 -> value -8 d
    assert np.all(row[32:] == 0.0)                          # second block: d = 0


def test_dequant_rows_fp16_accepts_uint16_bit_patterns():
    kv = _tiny_kv("fp16")
    kv_bits = KVCache.fp16(kv.k.view(np.uint16), kv.v.view(np.uint16), kv.page_table)
    np.testing.assert_array_equal(R.dequant_rows(kv_bits, "k"), kv.k.astype(np.float64))


@pytest.mark.parametrize("fmt", FORMATS)
def test_v_abs_max_is_the_largest_dequantised_v(fmt):
    kv = _tiny_kv(fmt)
    assert R.v_abs_max(kv) == np.abs(R.dequant_rows(kv, "v")).max() > 0


def test_k8v4_budget_matches_the_definition_loop():
    kv = _tiny_kv("k8v4")
    q, ids, width = _tiny_inputs()
    b = R.k8v4_budget(q, kv, ids, width)
    np.testing.assert_allclose(b, _naive_attn(q, kv, ids, width, budget=True), rtol=1e-12, atol=0)
    ref, b2 = R.qsa_attn_fp64_with_budget(q, kv, ids, width)
    np.testing.assert_array_equal(b, b2)
    np.testing.assert_array_equal(ref, R.qsa_attn_fp64(q, kv, ids, width))
    assert np.all(b[[0, 1, 4, 5]] > 0) and np.all(b[[2, 3]] == 0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_numpy_fp32_form_is_close_to_fp64(fmt):
    kv = _tiny_kv(fmt)
    q, ids, width = _tiny_inputs()
    ref = R.qsa_attn_fp64(q, kv, ids, width)
    f32 = R.qsa_attn_numpy(q, kv, ids, width, dtype=np.float32)
    assert f32.dtype == np.float32
    err = np.abs(f32 - ref).max()
    assert 0 < err <= 1e-5 * np.abs(ref).max()


def test_torch_cpu_tensors_are_accepted():
    torch = pytest.importorskip("torch")
    kv = _tiny_kv("int8")
    q, ids, width = _tiny_inputs()
    kv_t = KVCache.int8(*(torch.from_numpy(a) for a in (kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table)))
    got = R.qsa_attn_fp64(torch.from_numpy(q), kv_t, torch.from_numpy(ids), torch.from_numpy(width))
    np.testing.assert_array_equal(got, R.qsa_attn_fp64(q, kv, ids, width))


def test_oracle_restores_the_blas_thread_count():
    api = R._openblas_threads()
    if api is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS this process can reach")
    get, put = api
    before = get()
    kv = _tiny_kv("int8")
    q, ids, width = _tiny_inputs()
    R.qsa_attn_fp64(q, kv, ids, width)
    assert get() == before
