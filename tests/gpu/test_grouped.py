"""The grouped prompt kernel (INT8, and FP16, K8V4 and Q4_0 where noted) (one gathered tile serves a group of queries) on the GPU: QSA_SPEC §6.5 check 1
and 2 against the FP64 oracle and the fp32 variant, selections that the union must handle (unsorted rows,
duplicates, disjoint neighbours, garbage past the width, holes, width 0, partial last group), determinism."""
import subprocess
import sys

import numpy as np
import pytest

import strata_kernels as sk
from strata_kernels import reference, testing


def _check(case, out, fp32, queries=None):
    """§6.5 checks 1-2: error vs FP64 within 4x that of fp32 (or below 1e-6 of scale); agreement with fp32 to 1e-4."""
    w = case.width if case.width.ndim == 1 else case.width[:, 3]
    sample = np.arange(case.n_q) if queries is None else queries
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, w, queries=sample)
    scale = max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(out[sample] - ref).max())
    err32 = float(np.abs(fp32[sample] - ref).max())
    assert np.isfinite(out).all()
    assert err <= max(4 * err32, 1e-6 * scale), f"{case.name}: grouped {err:.3e}, fp32 {err32:.3e}, scale {scale:.3e}"
    assert float(np.abs(out - fp32).max()) <= 1e-4 * scale
    return err / scale


def _twice_checked(case, args, fp32, torch, label):
    """Two grouped prompt calls: the same bits, the checks of _check, zeros for queries of width 0."""
    a = sk.qsa_prompt_attn(*args, variant="grouped")
    b = sk.qsa_prompt_attn(*args, variant="grouped")
    assert torch.equal(a, b), f"{label}: two calls differ"
    g = a.cpu().numpy()
    _check(case, g, fp32)
    assert (g[case.width == 0] == 0).all()


def _check_k8v4(case, out, fp32):
    """§6.5 check 4: K8V4's V rounded to fp16 as gathered (as v1 does), so check 1 takes max(|out - ref| - B) with B
    the rounding budget, and check 2 widens by 2^-11 max|v| + 2^-25."""
    sample = np.arange(case.n_q)
    ref, budget = reference.qsa_attn_fp64_with_budget(case.q, case.kv, case.ids, case.width, sample)
    scale = max(float(np.abs(ref).max()), 1e-30)
    err = float(np.max(np.abs(out - ref) - budget))
    err32 = float(np.abs(fp32 - ref).max())
    assert np.isfinite(out).all()
    assert err <= max(4 * err32, 1e-6 * scale), f"{case.name}: grouped {err:.3e} over budget, fp32 {err32:.3e}"
    bound2 = 1e-4 * scale + 2.0 ** -11 * reference.v_abs_max(case.kv) + 2.0 ** -25
    assert float(np.abs(out - fp32).max()) <= bound2


def _run(to_cuda, case):
    q, kv, ids, width = to_cuda(case)
    g = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped").cpu().numpy()
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    return g, f


INT8_CASES = [
    (4096, 64, {}),
    (1500, 37, {}),                       # short context, 37 = 7 groups of 5 + a group of 2
    (2100, 256, {}),                      # the identity-to-sparse edge
    (1500, 40, {"holes": True}),
    (1500, 40, {"width0": True}),
    (200, 1, {}),
    (65536, 24, {}),                      # ids spanning two windows of membership bits (32768 cells each at G 12)
    (600000, 10, {}),                     # ids spanning more than the windows take (12 x 32768 cells at G 12): the
                                          # merge-path union
]
# FP16 K and V go straight into the fp16 tiles (no stage, no conversion), K of tile t + 1 copied while tile t's
# softmax and p·V run, V while the next q·k runs: the same checks
FP16_CASES = [c for c in INT8_CASES if c[:2] not in ((2100, 256), (600000, 10))]


# K8V4: INT8's K path; V Q4_0 rows (two 18-byte blocks a 64-dim group, 4-byte aligned) copied and dequantised to
# fp16 as gathered, with the writer's realistic V scales and the synthetic ones
K8V4_CASES = [(4096, 64, {}), (1500, 37, {"real_scales": True}), (1500, 40, {"holes": True}),
              (1500, 40, {"width0": True}), (65536, 24, {})]
# Q4_0: K and V rows of two 18-byte blocks a 64-dim group, nibbles exact in fp16, each block's K scale applied to its
# own q·k partial and each block's V scale folded into its own p·V operand (the checks of INT8, no budget)
Q4_CASES = [(4096, 64, {}), (1500, 37, {}), (1500, 40, {"holes": True}), (1500, 40, {"width0": True}),
            (65536, 24, {})]


@pytest.mark.parametrize("fmt,ctx,n_q,kw", [("int8", *c) for c in INT8_CASES] + [("fp16", *c) for c in FP16_CASES]
                         + [("k8v4", *c) for c in K8V4_CASES] + [("q4_0", *c) for c in Q4_CASES])
def test_grouped_parity(to_cuda, fmt, ctx, n_q, kw):
    case = testing.make_case(fmt, ctx, n_q, **kw)
    g, f = _run(to_cuda, case)
    if fmt == "k8v4":
        _check_k8v4(case, g, f)
    else:
        _check(case, g, f)
    if kw.get("width0"):
        assert (g[case.width == 0] == 0).all()


@pytest.mark.parametrize("ctx,n_q,kw", [(4096, 64, {}), (1500, 37, {}), (1500, 40, {"holes": True}),
                                        (1500, 40, {"width0": True}), (65536, 24, {}), (200, 1, {}),
                                        (2100, 700, {}), (2100, 256, {"holes": True})])
def test_grouped_int8_packed(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw):
    # grouped_ws (INT8, sm_90a) may pack its units' tiles end to end over one block a multiprocessor, a block's first
    # and last unit taken in segments that grouped_pack_merge joins (STRATA_GROUPED_PACK=1 wherever the form allows,
    # 0 never): both meet the checks and repeat their bits, on shapes with few units (blocks with empty segments),
    # many (several units a block), and a group whose queries selected nothing (its unit writes zeros).
    case = testing.make_case("int8", ctx, n_q, **kw)
    if n_q >= 10:
        case.width[:5] = 0  # the first group (5 queries at G 12) selects nothing
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    for pack in ("0", "1"):
        monkeypatch.setenv("STRATA_GROUPED_PACK", pack)
        _twice_checked(case, (q, kv, ids, width), f, torch_cuda, f"STRATA_GROUPED_PACK={pack}")
        d = sk.qsa_decode_attn(q, kv, ids, width, variant="grouped").cpu().numpy()
        _check(case, d, f)


@pytest.mark.parametrize("ctx,n_q,kw", [(4096, 64, {}), (1500, 37, {}), (1500, 40, {"holes": True}),
                                        (1500, 40, {"width0": True}), (65536, 24, {}), (200, 1, {}),
                                        (2100, 300, {"holes": True}), (2100, 700, {})])
def test_grouped_int8_pair_form(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw):
    # INT8 prompts at (256, 12) on sm_90 run grouped's pair form from 128 queries (10 queries' 120 rows a gathered
    # tile; cuda/dispatch.inc.j2, pair_form): forced at every size (STRATA_GROUPED_PAIR=1) and off (0), both meet the
    # checks and repeat their bits, packed and not, with a first group that selected nothing; which() says the form.
    case = testing.make_case("int8", ctx, n_q, **kw)
    if n_q >= 20:
        case.width[:10] = 0  # the first unit (10 queries) selects nothing
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    for pair in ("0", "1"):
        monkeypatch.setenv("STRATA_GROUPED_PAIR", pair)
        for pack in ("0", "1"):
            monkeypatch.setenv("STRATA_GROUPED_PACK", pack)
            _twice_checked(case, (q, kv, ids, width), f, torch_cuda, f"STRATA_GROUPED_PAIR={pair}, PACK={pack}")
    monkeypatch.delenv("STRATA_GROUPED_PAIR")
    why = sk.which(q, kv, ids, width).reason
    sm90 = torch_cuda.cuda.get_device_capability() == (9, 0)  # (make_case's geometry: (256, 12))
    assert ("pair form" in why) == (sm90 and n_q >= 128), why


@pytest.mark.parametrize("ctx", [196608, 200000, 524288])
def test_grouped_int8_pair_form_at_any_cache_length(to_cuda, torch_cuda, ctx):
    # Until 2026-12-05 the pair form's union pre-pass had no search path, and the rule kept the form to caches of at
    # most its twelve union windows (196608 cells); its search path now runs in bounded buffers, and the rule takes
    # the form at every cache length from 128 queries.
    case = testing.make_case("int8", ctx, 128)
    q, kv, ids, width = to_cuda(case)
    why = sk.which(q, kv, ids, width).reason
    sm90 = torch_cuda.cuda.get_device_capability() == (9, 0)
    assert ("pair form" in why) == sm90, why


@pytest.mark.parametrize("ctx,n_q,kw", [(4096, 64, {}), (1500, 37, {}), (1500, 40, {"holes": True}),
                                        (1500, 40, {"width0": True}), (65536, 24, {})])
def test_grouped_int8_without_the_warp_specialized_kernel(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw):
    # INT8 on sm_90a (head_dim 128 / 256) runs grouped_ws; STRATA_GROUPED_WS=0 gives the one-role kernel that every
    # other target and geometry runs: both meet the checks, and each repeats its bits.
    case = testing.make_case("int8", ctx, n_q, **kw)
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    outs = {}
    for ws in ("0", "1"):
        monkeypatch.setenv("STRATA_GROUPED_WS", ws)
        a = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
        b = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
        assert torch_cuda.equal(a, b), f"STRATA_GROUPED_WS={ws}: two calls differ"
        outs[ws] = a.cpu().numpy()
        _check(case, outs[ws], f)
        if kw.get("width0"):
            assert (outs[ws][case.width == 0] == 0).all()


def test_grouped_rows_that_are_not_ascending(to_cuda):
    # Unsorted rows, a duplicated cell (counted twice) and garbage past the width: the group falls back to the
    # concatenation of its rows, which keeps the semantics.
    case = testing.make_case("int8", 4096, 20)
    rng = np.random.default_rng(7)
    for qi in (1, 7):
        w = int(case.width[qi])
        rng.shuffle(case.ids[qi, :w])
    case.ids[12, 5] = case.ids[12, 4]
    for qi in range(case.n_q):
        case.ids[qi, case.width[qi]:] = np.int32(2**31 - 1)
    g, f = _run(to_cuda, case)
    _check(case, g, f)


def _disjoint(case):
    """Random ascending selections of random widths (0 .. cap)."""
    return testing.random_rows(case, 3)


def test_grouped_neighbours_with_disjoint_selections(to_cuda):
    # Random selections: the union of a group is much larger than one selection; still exact semantics.
    case = _disjoint(testing.make_case("int8", 8192, 15))
    g, f = _run(to_cuda, case)
    _check(case, g, f)


@pytest.mark.parametrize("ctx,n_q,pair", [(32768, 10, "0"), (16384, 20, "1")])
def test_grouped_union_window_past_its_stage(to_cuda, torch_cuda, monkeypatch, ctx, n_q, pair):
    # A cache within the windows' span gives the union's one-block form a window's bits and a stage of 8192 entries
    # (UNION_STAGE_MAX), not NQ cap: a window with more entries writes them straight out. Full-width random rows make
    # ~9,000 entries a window of 32768 cells for 5 queries (the five-query form) and ~12,000 of 16384 for 10 (the pair
    # form, forced): the same outputs and bits, staged or not, in one block a group (no clusters) and by the rule.
    case = testing.random_rows(testing.make_case("int8", ctx, n_q), 5, full_width=True)
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    monkeypatch.setenv("STRATA_GROUPED_PAIR", pair)
    outs = []
    for cb in ("1", None):
        if cb is None:
            monkeypatch.delenv("STRATA_GROUPED_UNION_CLUSTER", raising=False)
        else:
            monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", cb)
        _twice_checked(case, (q, kv, ids, width), f, torch_cuda, f"STRATA_GROUPED_UNION_CLUSTER={cb}, PAIR={pair}")
        outs.append(sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped"))
    assert torch_cuda.equal(outs[0], outs[1]), "the union's entries differ between one block a group and the rule"


def test_grouped_flags_out_of_range_ids(to_cuda, monkeypatch):
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")  # the immediate sentence (default: at the next call)
    case = testing.make_case("int8", 2100, 12)
    match = testing.corrupt(case, "ids", 6, 9)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")


@pytest.mark.parametrize("fmt,other", [("int8", "v2"), ("fp16", "v1"), ("k8v4", "v1"), ("q4_0", "v1")])
def test_grouped_is_deterministic_and_the_h200_default(to_cuda, torch_cuda, fmt, other):
    case = testing.make_case(fmt, 4096, 512)   # 103 groups x 2 KV heads: a grid that fills the H200
    q, kv, ids, width = to_cuda(case)
    a = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    b = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    assert torch_cuda.equal(a, b)
    if torch_cuda.cuda.get_device_capability() == (9, 0):
        w = sk.which(q, kv, ids, width)
        assert w.variant == "grouped", w
        assert "grouped" in w.reason
        # 64 queries: 13 groups x 2 KV heads = 26 blocks, under a quarter of the 132 multiprocessors: grouped all the
        # same, its units in pieces (its union pre-pass fits in shared memory; a quarter is the bar only where that
        # runs in global memory: 2100 x 64, grouped 46.4 us against v2's 112.9)
        small = [x[:64] for x in (q, ids, width)]
        w = sk.which(small[0], kv, small[1], small[2])
        assert w.variant == "grouped" and other not in w.reason, w


def test_grouped_flags_page_entries_out_of_range(to_cuda, monkeypatch):
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    case = testing.make_case("int8", 2100, 12)
    match = testing.corrupt(case, "page_table", 4, 100)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")


_LARGER_CAP = """
import numpy as np, torch
import strata_kernels as sk
from strata_kernels import testing
case = testing.make_case("int8", 4096, 64)
q, cache, _, width = testing.to_torch(case, "cuda")
t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()
cap0 = case.ids.shape[1]
outs = []
# the case's own cap, then one whose union needs more than 48 KB of shared memory (5 x cap x 8 bytes at G 12), then
# one needing about twice that; entries past the width are garbage (ignored)
for cap in (cap0, max(cap0, 1300), 2 * max(cap0, 1300) + 1):
    ids = np.full((case.n_q, cap), -7, dtype=case.ids.dtype)
    ids[:, :cap0] = case.ids
    out = sk.qsa_prompt_attn(q, cache, t(ids), width, variant="grouped")
    outs.append(out.cpu().numpy())
assert all(np.array_equal(outs[0], o) for o in outs[1:]), "outputs differ with cap"
print("ok")
"""


def test_grouped_takes_a_larger_cap_after_a_smaller_one(torch_cuda):
    """The union pre-pass's shared memory grows with cap (NQ x cap x 8 bytes): a call with a larger cap after a
    smaller one must launch and give the same bits (the kernel's opt-in was taken once, at the first call's size). In
    a fresh process, so that no earlier call has set the kernel's limit."""
    r = subprocess.run([sys.executable, "-c", _LARGER_CAP], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def _unsorted(case):
    rng = np.random.default_rng(7)
    rng.shuffle(case.ids[1, :int(case.width[1])])
    return case


@pytest.mark.parametrize("ctx,n_q,kw,edit", [
    (32768, 64, {}, None),                   # a decode call's 13 groups: the rule's clusters of 8
    (131072, 24, {}, None),                  # four windows of 32768 cells (the rows read once at CB 4 and 8)
    (70000, 24, {}, None),                   # three windows, the last one partly past the cache
    (262144, 10, {}, None),                  # eight windows (CB 8 takes them all at once)
    (100000, 12, {"holes": True, "width0": True}, None),  # four windows with pages not resident and empty rows
    (1500, 40, {"holes": True}, None),       # pages not resident
    (1500, 37, {"width0": True}, None),      # empty rows, a partial last group
    (8192, 15, {}, _disjoint),               # unions much larger than one selection
    (4096, 20, {}, _unsorted),               # a group that concatenates (rank 0 alone)
    (600000, 10, {}, None),                  # the merge path (rank 0 alone)
])
def test_grouped_union_in_clusters(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw, edit):
    # sm_90 (the target table's `cluster`): the union pre-pass may split each group's windows over a cluster of 2, 4
    # or 8 blocks (STRATA_GROUPED_UNION_CLUSTER forces a size; a cluster that cannot launch is then an error). Its
    # entries are those of one block a group, so every output's bits are too, prompt and decode alike.
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the union's clusters are built for sm_90 only")
    case = testing.make_case("int8", ctx, n_q, **kw)
    if edit:
        case = edit(case)
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    outs = {}
    for cb in ("1", "2", "4", "8"):
        monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", cb)
        outs[cb] = (sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped"),
                    sk.qsa_decode_attn(q, kv, ids, width, variant="grouped"))
    for cb in ("2", "4", "8"):
        for i, op in enumerate(("prompt", "decode")):
            assert torch_cuda.equal(outs[cb][i], outs["1"][i]), f"clusters of {cb}, {op}: the bits differ from one block"
    _check(case, outs["8"][0].cpu().numpy(), f)
    monkeypatch.delenv("STRATA_GROUPED_UNION_CLUSTER")
    assert torch_cuda.equal(sk.qsa_decode_attn(q, kv, ids, width, variant="grouped"), outs["1"][1])


@pytest.mark.parametrize("what", ["ids", "page_table"])
def test_grouped_union_in_clusters_flags_bad_entries(to_cuda, torch_cuda, monkeypatch, what):
    # the flags of a bad id or page entry come from the cluster's ranks as from one block (the smallest index)
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the union's clusters are built for sm_90 only")
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", "8")
    case = testing.make_case("int8", 32768, 12)
    at = (6, 9) if what == "ids" else (4, 1500)  # the bad page: in a later rank's part of the window
    match = testing.corrupt(case, what, *at)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_decode_attn(q, kv, ids, width, variant="grouped")


def test_grouped_union_cluster_switch_refuses_a_size_it_cannot_take(to_cuda, torch_cuda, monkeypatch):
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the union's clusters are built for sm_90 only")
    monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", "3")
    case = testing.make_case("int8", 4096, 20)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(Exception, match="STRATA_GROUPED_UNION_CLUSTER=3"):
        sk.qsa_decode_attn(q, kv, ids, width, variant="grouped")


@pytest.mark.parametrize("ctx,n_q,kw,edit", [
    (32768, 24, {}, None),                   # one window of ids: the windows against the search path (forced)
    (600000, 10, {}, None),                  # a span past the windows: the merge path against the search path
    (100000, 12, {"holes": True, "width0": True}, None),  # pages not resident and empty rows
    (1500, 37, {"width0": True}, None),      # empty rows, a partial last group
    (8192, 15, {}, _disjoint),               # unions much larger than one selection, random widths
    (4096, 20, {}, _unsorted),               # a group that concatenates (the search path is for ascending rows)
])
def test_grouped_union_search_path(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw, edit):
    # The union pre-pass's search path (the rows searched against each other in shared memory) gives the entries, in
    # the same order, of the windows and the merge path, so every output's bits are equal, prompt and decode alike.
    # STRATA_GROUPED_UNION_SEARCH=1 takes it for every ascending group, 0 never (windows, then the merge path); one
    # block a group, so that decode calls do not take the cluster forms that read the rows once.
    case = testing.make_case("int8", ctx, n_q, **kw)
    if edit:
        case = edit(case)
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", "1")
    outs = {}
    for s in ("0", "1"):
        monkeypatch.setenv("STRATA_GROUPED_UNION_SEARCH", s)
        outs[s] = (sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped"),
                   sk.qsa_decode_attn(q, kv, ids, width, variant="grouped"))
    for i, op in enumerate(("prompt", "decode")):
        assert torch_cuda.equal(outs["1"][i], outs["0"][i]), f"{op}: the search path's bits differ"
    _check(case, outs["1"][0].cpu().numpy(), f)
    monkeypatch.delenv("STRATA_GROUPED_UNION_SEARCH")  # the rule: spans past the windows searched
    assert torch_cuda.equal(sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped"), outs["1"][0])


def _full_width(case):
    """Random ascending selections of the full width: at 65536 cells a group of 10 holds ~19,000 union entries."""
    return testing.random_rows(case, 5, full_width=True)


@pytest.mark.parametrize("ctx,n_q,kw,edit,over", [
    (600000, 20, {}, None, False),           # a span past the windows: the merge path against the search path
    (100000, 30, {"holes": True, "width0": True}, None, False),  # pages not resident and empty rows
    (1500, 37, {"width0": True}, None, False),  # empty rows, a partial last group
    (8192, 20, {}, _disjoint, False),        # random widths: unions of ~7,000 entries, within the buffers
    (65536, 20, {}, _full_width, True),      # unions of ~19,000: past the buffers, the groups concatenated
    (4096, 20, {}, _unsorted, False),        # a group that concatenates (the search path is for ascending rows)
])
def test_grouped_pair_form_union_search_path(to_cuda, torch_cuda, monkeypatch, ctx, n_q, kw, edit, over):
    # The pair form's union pre-pass (10 queries a group) takes its search path in buffers of ~3.9 cap entries each
    # where the worst case (10 cap) would not fit in shared memory: the entries, in the same order, of the windows and
    # the merge path, so every output's bits are equal; a group whose union outgrows a buffer is concatenated (other
    # bits, the same checks). STRATA_GROUPED_UNION_SEARCH=1 takes the search path for every ascending group (an error
    # where it cannot launch), 0 never.
    case = testing.make_case("int8", ctx, n_q, **kw)
    if edit:
        case = edit(case)
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    monkeypatch.setenv("STRATA_GROUPED_PAIR", "1")
    monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", "1")
    outs = {}
    for s in ("0", "1"):
        monkeypatch.setenv("STRATA_GROUPED_UNION_SEARCH", s)
        _twice_checked(case, (q, kv, ids, width), f, torch_cuda, f"STRATA_GROUPED_UNION_SEARCH={s}")
        outs[s] = sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")
    if not over:
        assert torch_cuda.equal(outs["1"], outs["0"]), "the search path's bits differ"


@pytest.mark.parametrize("what", ["ids", "page_table"])
@pytest.mark.parametrize("over", [False, True])
def test_grouped_union_search_path_flags_bad_entries(to_cuda, monkeypatch, what, over):
    # an id or a page entry out of range is flagged at its (query, position) by the search path as by the others;
    # over: the pair form's, on a group whose union outgrows its buffers, the bad entry in a row the stopped rounds
    # had not reached (the group's last)
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    monkeypatch.setenv("STRATA_GROUPED_UNION_SEARCH", "1")
    if over:
        monkeypatch.setenv("STRATA_GROUPED_PAIR", "1")
        case, row_id, row_page = _full_width(testing.make_case("int8", 65536, 10)), 9, 9
    else:
        case, row_id, row_page = testing.make_case("int8", 2100, 12), 6, 4
    # the bad id: the row's last, so that the row stays ascending
    at = (row_id, int(case.width[row_id]) - 1) if what == "ids" else (row_page, 100)
    match = testing.corrupt(case, what, *at)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")


@pytest.mark.parametrize("what", ["ids", "page_table"])
def test_grouped_union_batches_flag_bad_entries(to_cuda, torch_cuda, monkeypatch, what):
    # the union's batched form (a (128, 4) group over 16 windows: two batches) flags an id or a page entry out of
    # range in the last batch at its (query, position), as the other paths do
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the union's clusters are built for sm_90 only")
    try:
        sk.ops.plugin_variants(("cuda", 0), (128, 4))
    except ValueError as e:
        pytest.skip(f"the plugin does not carry (128, 4): {e}")
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    case = testing.make_case("int8", 262144, 16, head_dim=128, group=4)
    at = (6, int(case.width[6]) - 1)  # the row's last id (so that the row stays ascending): the newest cells
    assert case.ids[at] >= 131072, "the bad entry must lie in the second batch"
    match = testing.corrupt(case, what, *at)
    q, kv, ids, width = to_cuda(case)
    with pytest.raises(ValueError, match=match):
        sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped")


@pytest.mark.parametrize("group,ctx,n_q,n_head_kv,kw,edit", [
    (4, 32768, 32, 8, {}, None),             # a decode call at (128, 4): two windows of 16384 cells, 2 groups of 16
    (4, 131072, 16, 2, {}, None),            # eight windows (MANY at CB 8)
    (4, 2100, 40, 2, {"holes": True, "width0": True}, None),  # one window, holes, empty rows, a partial last group
    (4, 4096, 20, 2, {}, _unsorted),         # a group that concatenates (rank 0 alone, into global memory)
    (4, 2100, 1500, 2, {}, None),            # 94 groups: clusters of 2 in more than one wave of one a multiprocessor
    (2, 32768, 64, 8, {}, None),             # (128, 2): 32 queries a group, four windows of 8192 cells (CB 4)
    (4, 262144, 16, 2, {}, None),            # 16 windows: MANY in two batches of 8
    (2, 65536, 40, 2, {"holes": True, "width0": True}, None),  # 8 windows at CB 4: two batches; a partial group
    (2, 524288, 32, 2, {}, None),            # 64 windows at CB 4: 16 batches
    (4, 262144, 20, 2, {}, _unsorted),       # batches, but a group that concatenates
    (4, 262144, 2048, 2, {}, None),          # 128 groups: the rule's clusters of 2 (eight batches) fit one wave
    (4, 131072, 2048, 2, {}, None),          # MANY would cover it at CB 8 in eight waves: CB 2, four batches
])
def test_grouped_union_one_form_where_the_union_outgrows_shared_memory(to_cuda, torch_cuda, monkeypatch, group, ctx,
                                                                        n_q, n_head_kv, kw, edit):
    # At G 1-4 a group has 16-32 queries, so its running union (NQ x cap x 8 bytes: 262 KB at G 4, cap 2051) does not
    # fit in shared memory and one block a group takes the global-memory path. The cluster forms that read the rows
    # once (ONE, MANY; past the cluster's windows MANY in batches) need no such buffer, so the launcher takes them
    # there too: their entries, and so every output's bits, are those of the global path
    # (STRATA_GROUPED_UNION_CLUSTER=1: one block a group).
    if torch_cuda.cuda.get_device_capability() != (9, 0):
        pytest.skip("the union's clusters are built for sm_90 only")
    try:
        sk.ops.plugin_variants(("cuda", 0), (128, group))
    except ValueError as e:
        pytest.skip(f"the plugin does not carry (128, {group}): {e}")
    case = testing.make_case("int8", ctx, n_q, head_dim=128, group=group, n_head_kv=n_head_kv, **kw)
    if edit:
        case = edit(case)
    assert min(64 // group, 32) * case.ids.shape[1] * 8 > 227 * 1024, "the running union must outgrow shared memory"
    q, kv, ids, width = to_cuda(case)
    f = sk.qsa_prompt_attn(q, kv, ids, width, variant="fp32").cpu().numpy()
    outs = {}
    big = "4" if group <= 2 else "8"  # the largest cluster this geometry's windows split into
    for cb in ("1", big, ""):  # big: the cluster form forced (a launch that fails is the call's error); "": the rule
        monkeypatch.setenv("STRATA_GROUPED_UNION_CLUSTER", cb)
        outs[cb] = (sk.qsa_prompt_attn(q, kv, ids, width, variant="grouped"),
                    sk.qsa_decode_attn(q, kv, ids, width, variant="grouped"))
    for cb in (big, ""):
        for i, op in enumerate(("prompt", "decode")):
            assert torch_cuda.equal(outs[cb][i], outs["1"][i]), f"{op}, clusters {cb!r}: bits differ from one block's"
    _check(case, outs[big][1].cpu().numpy(), f, queries=np.arange(0, n_q, max(1, n_q // 24)))
