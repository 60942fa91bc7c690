"""The parity data recipe (QSA_SPEC §6.3) and the Q4_0 writer rule (§2.6)."""
from __future__ import annotations

import numpy as np
import pytest

from strata_kernels import reference as R
from strata_kernels import testing as T

FORMATS = ("fp16", "int8", "q4_0", "k8v4")
SMALL = dict(n_head_kv=2, group=3, head_dim=64)      # keeps the cases tiny; the recipe does not depend on it


def _ascending_unique(row: np.ndarray) -> bool:
    return bool(np.all(np.diff(row.astype(np.int64)) > 0))


# -- shapes, dtypes, seeds ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_case_shapes_and_dtypes(fmt):
    c = T.make_case(fmt, 2100, 32)
    pages = -(-2100 // 4)
    assert c.q.dtype == np.float32 and c.q.shape == (32, 24, 256)
    assert c.ids.dtype == np.int32 and c.ids.shape == (32, 2051)
    assert c.width.dtype == np.int32 and c.width.shape == (32,)
    assert c.kv.format == fmt and c.kv.n_head_kv == 2 and c.kv.head_dim == 256
    assert c.kv.page_table.dtype == np.int32 and c.kv.page_table.shape == (pages,)
    assert c.kv.n_phys_pages == pages
    row = {"fp16": 256, "int8": 256, "q4_0": 144, "k8v4": 256}[fmt]
    assert c.kv.k.shape == (pages, 2, 4, row)
    assert c.kv.v.shape == (pages, 2, 4, 144 if fmt in ("q4_0", "k8v4") else 256)
    if fmt in ("int8", "k8v4"):
        assert c.kv.k.dtype == np.int8 and c.kv.k_scale.dtype == np.float16 and c.kv.k_scale.shape[-1] == 4
    assert c.seed == 1234 + FORMATS.index(fmt)
    assert c.name == f"{fmt}, ctx 2100, 32 queries"


def test_format_codes_and_names_give_the_same_case():
    a = T.make_case(1, 300, 8, **SMALL)
    b = T.make_case("int8", 300, 8, **SMALL)
    np.testing.assert_array_equal(a.kv.k, b.kv.k)
    assert a.fmt == "int8" and a.seed == 1235
    with pytest.raises(ValueError):
        T.make_case(4, 300, 8)
    with pytest.raises(ValueError):
        T.make_case("bf16", 300, 8)


def test_same_seed_same_data_other_seed_other_data():
    a = T.make_case("q4_0", 3000, 16, **SMALL)
    b = T.make_case("q4_0", 3000, 16, **SMALL)
    c = T.make_case("q4_0", 3000, 16, seed=99, **SMALL)
    for x, y in ((a.q, b.q), (a.kv.k, b.kv.k), (a.kv.v, b.kv.v), (a.ids, b.ids), (a.kv.page_table, b.kv.page_table)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.kv.k, c.kv.k) and not np.array_equal(a.ids, c.ids)


def test_int8_draw_order_is_k_codes_scales_v_codes_scales_shuffle_queries():
    """§6.3: K pool (codes, then scales), V pool, page-table shuffle, queries, selections - from one MT19937."""
    c = T.make_case("int8", 40, 5, **SMALL)
    rs = np.random.RandomState(1235)
    lead, D = (10, 2, 4), 64
    k = rs.randint(-127, 128, size=lead + (D,), dtype=np.int8)
    ks = rs.uniform(0.005, 0.03, size=lead + (1,)).astype(np.float16)
    v = rs.randint(-127, 128, size=lead + (D,), dtype=np.int8)
    vs = rs.uniform(0.005, 0.03, size=lead + (1,)).astype(np.float16)
    pt = np.arange(10, dtype=np.int32)
    rs.shuffle(pt)
    q = (rs.standard_normal((5, 6, D)) * 2.0).astype(np.float32)
    for got, want in ((c.kv.k, k), (c.kv.k_scale, ks), (c.kv.v, v), (c.kv.v_scale, vs), (c.kv.page_table, pt),
                      (c.q, q)):
        np.testing.assert_array_equal(got, want)


def test_selection_draws_follow_the_queries_first_shuffle_then_replacements():
    """§6.3: the first sparse query takes the first (w - 512) cells of a shuffle of [0, n_kv - 512); the next one
    replaces (w - 512) / 32 random members by random cells, skipping cells already present."""
    c = T.make_case("int8", 3000, 2, **SMALL)
    rs = np.random.RandomState(1235)
    lead, D = (750, 2, 4), 64
    for _ in range(2):
        rs.randint(-127, 128, size=lead + (D,), dtype=np.int8)
        rs.uniform(0.005, 0.03, size=lead + (1,))
    rs.shuffle(np.arange(750, dtype=np.int32))
    rs.standard_normal((2, 6, D))
    older = 2051 - 512
    members = rs.permutation(2999 - 512)[:older]
    np.testing.assert_array_equal(c.ids[0, :older], np.sort(members))
    slot, cell = rs.randint(0, older, size=older // 32), rs.randint(0, 3000 - 512, size=older // 32)
    for s_, c_ in zip(slot, cell):
        if c_ not in members:
            members[s_] = c_
    np.testing.assert_array_equal(c.ids[1, :older], np.sort(members))


def test_int8_codes_and_scales_ranges():
    c = T.make_case("int8", 4000, 4, **SMALL)
    assert c.kv.k.min() == -127 and c.kv.k.max() == 127
    s = c.kv.v_scale.astype(np.float64)
    assert s.min() >= 0.0049 and s.max() <= 0.0301


def test_page_table_is_a_shuffled_permutation():
    c = T.make_case("fp16", 4000, 4, **SMALL)
    pt = c.kv.page_table
    assert sorted(pt.tolist()) == list(range(1000)) and not np.array_equal(pt, np.arange(1000))


# -- selections ---------------------------------------------------------------------------------------------------
def test_int8_ctx_2100_256_queries_identity_to_sparse_edge():
    """§1.5: positions 1844..2099; the first 207 queries are identity, the last 49 sparse."""
    c = T.make_case("int8", 2100, 256, **SMALL)
    assert c.cap == 2051
    n_kv = np.arange(1844, 2100) + 1
    np.testing.assert_array_equal(c.width, np.minimum(n_kv, 2051))
    identity = [np.array_equal(c.ids[i, :c.width[i]], np.arange(c.width[i])) for i in range(256)]
    assert identity == [True] * 207 + [False] * 49
    for i in range(207, 256):
        row = c.ids[i, :2051]
        assert _ascending_unique(row) and row[0] >= 0 and row[-1] == n_kv[i] - 1
        np.testing.assert_array_equal(row[-512:], np.arange(n_kv[i] - 512, n_kv[i]))   # the 512 newest cells
        assert row[-513] < n_kv[i] - 512


def test_ids_ascending_unique_within_the_width_and_zero_past_it():
    c = T.make_case("int8", 6000, 64, **SMALL)
    for i in range(64):
        w = c.width[i]
        assert w == 2051 and _ascending_unique(c.ids[i, :w]) and c.ids[i, w - 1] == 6000 - 64 + i
    assert c.cap == 2051 and np.all(c.ids[:, 2051:] == 0)


@pytest.mark.parametrize("full_width", [False, True])
def test_random_rows_ascending_unique_over_the_cache_and_repeatable(full_width):
    # the grouped kernels' large-union inputs: random ascending rows over every cell, random or full widths, the same
    # rows for the same seed
    a = T.random_rows(T.make_case("int8", 8192, 12, **SMALL), 3, full_width=full_width)
    b = T.random_rows(T.make_case("int8", 8192, 12, **SMALL), 3, full_width=full_width)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.width, b.width)
    assert ((a.width == a.cap) if full_width else (a.width >= 0) & (a.width <= a.cap)).all()
    for qi in range(a.n_q):
        row = a.ids[qi, :a.width[qi]]
        assert _ascending_unique(row) and (row >= 0).all() and (row < 8192).all()
    if not full_width:
        assert len(set(a.width.tolist())) > 1  # random widths, not one


def test_sparse_selections_drift_by_at_most_older_over_32_cells_per_query():
    c = T.make_case("int8", 8000, 40, **SMALL)
    older = 2051 - 512
    changed = []
    for i in range(1, 40):
        prev_new_cutoff = 8000 - 40 + i - 512          # n_kv(i-1) - 512
        a = set(c.ids[i - 1, :older].tolist())
        b = set(c.ids[i, :older].tolist())
        assert all(x < prev_new_cutoff + 1 for x in b)
        changed.append(len(b - a))
    assert max(changed) <= older // 32
    assert np.mean(changed) > older // 32 / 2          # most replacements happen (~3 % drift per query)


def test_short_context_selects_every_cell():
    c = T.make_case("int8", 1500, 1500, **SMALL)
    for i in (0, 700, 1499):
        np.testing.assert_array_equal(c.ids[i, :i + 1], np.arange(i + 1))
    np.testing.assert_array_equal(c.width, np.arange(1, 1501))


def test_queries_are_clamped_to_the_context():
    c = T.make_case("fp16", 100, 500, **SMALL)
    assert c.n_q == 100 and c.q.shape[0] == 100 and c.width[0] == 1
    with pytest.raises(ValueError):
        T.make_case("fp16", 100, 0)


# -- holes, width 0, steps, periodic ------------------------------------------------------------------------------
def test_page_holes_every_7th_page_and_the_last():
    c = T.make_case("int8", 1500, 64, holes=True, **SMALL)
    pt = c.kv.page_table
    pages = np.arange(375)
    hole = (pages % 7 == 6) | (pages == 374)
    assert np.all(pt[hole] == -1) and np.all(pt[~hole] >= 0)
    assert len(set(pt[~hole].tolist())) == int((~hole).sum())
    plain = T.make_case("int8", 1500, 64, **SMALL)                  # holes draw nothing: same data otherwise
    np.testing.assert_array_equal(pt[~hole], plain.kv.page_table[~hole])
    np.testing.assert_array_equal(c.q, plain.q)
    assert c.label == "int8 holes" and c.name == "int8 holes, ctx 1500, 64 queries"


def test_width_0_queries_are_every_i_mod_5_eq_2():
    c = T.make_case("k8v4", 1500, 40, width0=True, **SMALL)
    plain = T.make_case("k8v4", 1500, 40, **SMALL)
    zero = np.arange(40) % 5 == 2
    assert np.all(c.width[zero] == 0) and np.all(c.width[~zero] == plain.width[~zero])
    np.testing.assert_array_equal(c.ids, plain.ids)
    assert np.all(R.qsa_attn_fp64(c.q, c.kv, c.ids, c.width, queries=np.flatnonzero(zero)) == 0)


def test_steps_form_has_width_in_column_3():
    c = T.make_case("int8", 2100, 16, steps=True, **SMALL)
    assert c.width.shape == (16, 4) and c.width.dtype == np.int32
    assert np.all(c.width[:, :3] == 0)
    np.testing.assert_array_equal(c.widths, T.make_case("int8", 2100, 16, **SMALL).width)


def test_fp16_ctx_200_65541_queries_periodic():
    c = T.make_case("fp16", 200, 65541, periodic=True, n_head_kv=1, group=1, head_dim=64)
    assert c.n_q == 65541 and c.seed == 777 and c.cap == 200
    base = np.arange(65541) % 251
    np.testing.assert_array_equal(c.width, 1 + (base % 200))
    np.testing.assert_array_equal(c.q, c.q[base])
    np.testing.assert_array_equal(c.ids, c.ids[base])
    assert not np.array_equal(c.q[0], c.q[1])
    for j in (0, 199, 200, 250):
        w = c.width[j]
        np.testing.assert_array_equal(c.ids[j, :w], np.arange(w))
    assert T.make_case("int8", 200, 300, periodic=True, **SMALL).seed == 778


# -- Q4_0 writer rule and the K8V4 V pools ------------------------------------------------------------------------
def test_q4_0_writer_rule_round_trip():
    rs = np.random.RandomState(5)
    x = (rs.standard_normal((64, 256)) * np.exp(rs.uniform(-3, 1, size=(64, 1)))).astype(np.float32)
    blocks = T.quantize_q4_0(x)
    assert blocks.dtype == np.uint8 and blocks.shape == (64, 8 * 18)
    y = R.dequant_q4_0(blocks)
    d = np.abs(np.ascontiguousarray(blocks.reshape(64, 8, 18)[..., :2]).view("<f2")[..., 0].astype(np.float64))
    err = np.abs(y - x).reshape(64, 8, 32)
    nib = np.concatenate([blocks.reshape(64, 8, 18)[..., 2:] & 15, blocks.reshape(64, 8, 18)[..., 2:] >> 4], -1)
    # round to nearest with the unrounded d (half a step), plus d's own fp16 rounding (|n - 8| <= 8 steps of
    # 2^-11 d); code 15 is also where the clamp lands values up to -mval, a full step away.
    step = d[..., None] * np.where(nib == 15, 1.0, 0.5)
    assert np.all(err <= step + d[..., None] * 8 * 2**-11 + 1e-7)
    # the codes, element by element, as §2.6 writes the rule (float32 scalars)
    for r, b in ((0, 0), (7, 3), (63, 7)):
        xs = [np.float32(v) for v in x[r, 32 * b: 32 * b + 32]]
        mval = max(xs, key=lambda v: (abs(v), v))
        dd = mval / np.float32(-8.0)
        inv = np.float32(1.0) / dd
        want = [min(15, max(0, int(np.float32(v * inv) + np.float32(8.5)))) for v in xs]
        assert nib[r, b].tolist() == want
    # the value of largest |x| lands exactly on nibble 0 (d = mval / -8), so every block uses code 0
    assert np.all((nib == 0).any(axis=-1))


def test_q4_0_writer_signed_scale_ties_and_zero_block():
    x = np.zeros((1, 64), np.float32)
    x[0, 3], x[0, 20] = -2.0, 2.0                    # tie on |x|: mval = +2.0, so d = -0.25
    x[0, 5] = 1.0
    blocks = T.quantize_q4_0(x)
    d = np.ascontiguousarray(blocks[0, 0:2]).view("<f2")[0]
    assert d == np.float16(-0.25)
    y = R.dequant_q4_0(blocks)[0]
    assert y[20] == 2.0 and y[3] == -1.75            # -2 * (1 / -0.25) + 8.5 = 16.5 -> clamped to 15 -> 7 * -0.25
    assert y[5] == 1.0 and y[0] == 0.0
    assert np.all(y[32:] == 0.0)                     # all-zero block: d = 0, id = 0, codes 8
    assert np.all(blocks[0, 20:36] == 0x88)          # second block's 16 code bytes (codes 8 | 8 << 4)


def test_pack_q4_0_nibble_layout():
    n = np.arange(32, dtype=np.uint8) % 16
    b = T.pack_q4_0(np.array([1.0], np.float16), n[None, :])
    assert b.shape == (18,)
    assert b[2] == (n[0] | (n[16] << 4)) and b[17] == (n[15] | (n[31] << 4))


def test_k8v4_exact_v_scales_are_k_over_1024_and_fp16_exact():
    c = T.make_case("k8v4", 2000, 8, **SMALL)
    d = np.ascontiguousarray(c.kv.v.reshape(-1, 2, 18)[..., :2]).view("<f2")[..., 0].astype(np.float64)
    k = d * 1024
    assert np.all(k == np.round(k)) and k.min() == 6 and k.max() == 31
    v = R.dequant_rows(c.kv, "v")
    np.testing.assert_array_equal(v.astype(np.float16).astype(np.float64), v)     # rounding V to fp16 is a no-op


def test_k8v4_real_v_scales_use_the_writer_rule():
    c = T.make_case("k8v4", 2000, 8, real_scales=True, **SMALL)
    assert c.seed == 1234 + 100 + 3 and c.label == "k8v4 real"
    blocks = c.kv.v.reshape(-1, 2, 18)
    d = np.ascontiguousarray(blocks[..., :2]).view("<f2")[..., 0].astype(np.float64)
    assert (d < 0).any() and (d > 0).any()           # signed scales
    nib = np.concatenate([blocks[..., 2:] & 15, blocks[..., 2:] >> 4], -1)
    assert np.all((nib == 0).any(axis=-1))           # writer rule: the largest |x| sits on code 0
    v = R.dequant_rows(c.kv, "v")
    assert not np.array_equal(v.astype(np.float16).astype(np.float64), v)   # here fp16 rounding of V matters
    with pytest.raises(ValueError):
        T.make_case("int8", 2000, 8, real_scales=True)


def test_q4_0_random_pool_scales_are_signed_and_in_range():
    c = T.make_case("q4_0", 2000, 8, **SMALL)
    d = np.ascontiguousarray(c.kv.k.reshape(-1, 2, 18)[..., :2]).view("<f2")[..., 0].astype(np.float64)
    assert (d < 0).any() and (d > 0).any()
    assert np.abs(d).min() >= 0.00999 and np.abs(d).max() <= 1.0


def test_fp16_pools_scale():
    c = T.make_case("fp16", 8000, 4, **SMALL)
    assert 1.4 < c.kv.k.astype(np.float64).std() < 1.6 and 0.95 < c.kv.v.astype(np.float64).std() < 1.05
    assert 1.9 < c.q.std() < 2.1


# -- the case as torch tensors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("steps", [False, True])
def test_to_torch_copies_every_array_into_its_formats_cache(fmt, steps):
    torch = pytest.importorskip("torch")
    c = T.make_case(fmt, 300, 6, holes=True, steps=steps, **SMALL)
    q, kv, ids, width = T.to_torch(c, "cpu")
    assert kv.format == fmt and (kv.n_head_kv, kv.head_dim, kv.n_phys_pages) == (2, 64, c.kv.n_phys_pages)
    assert set(kv.arrays) == set(c.kv.arrays)
    pairs = [(q, c.q), (ids, c.ids), (width, c.width)] + [(kv.arrays[n], a) for n, a in c.kv.arrays.items()]
    for t, a in pairs:
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_contiguous()
        assert t.numpy().dtype == a.dtype and np.array_equal(t.numpy(), a)
    ids[0, 0] += 1  # on the CPU the tensors share the case's memory (torch.from_numpy)
    assert ids[0, 0] == c.ids[0, 0]
