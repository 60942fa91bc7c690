"""The CPU plugin's fp32 against the FP64 oracle on the parity cases of QSA_SPEC §6, at reduced sizes.

Check (§6.5 item 7): err <= 1e-5 * ref_scale; plus check 3 (finite; width-0 and all-hole rows exactly 0).
"""
import re

import numpy as np
import pytest

from strata_kernels import reference, testing

TOL = 1e-5


def _check(sk, case, queries=None):
    out = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    assert out.dtype == np.float32 and out.shape == case.q.shape
    assert np.isfinite(out).all()
    w = case.width if case.width.ndim == 1 else case.width[:, 3]
    sample = np.arange(case.n_q) if queries is None else np.asarray(queries)
    ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, w, queries=sample)
    scale = np.abs(ref).max()
    err = np.abs(out[sample] - ref).max()
    assert err <= TOL * scale, f"{case.name}: err {err:.3e} > {TOL} x scale {scale:.3e}"
    zero = np.flatnonzero(w[sample] == 0)
    assert (out[sample][zero] == 0).all()
    return out, ref


@pytest.mark.parametrize("fmt", ["int8", "fp16", "q4_0", "k8v4"])
def test_every_format_matches_fp64(sk, fmt):
    _check(sk, testing.make_case(fmt, 3000, 12))


def test_int8_ctx_2100_identity_to_sparse_edge(sk):
    """int8, ctx 2100: the first queries select every cell (n_kv <= 2051), the rest are sparse."""
    case = testing.make_case("int8", 2100, 64)
    w = case.width
    assert (w[:15] == np.arange(2036, 2051) + 1).all() and (w[15:] == 2051).all()
    _check(sk, case, queries=np.arange(0, 64, 3))


def test_int8_and_q4_0_ctx_1500_every_cell(sk):
    for fmt in ("int8", "q4_0"):
        _check(sk, testing.make_case(fmt, 1500, 24), queries=np.arange(0, 24, 2))


def test_k8v4_real_scales(sk):
    _check(sk, testing.make_case("k8v4", 2100, 16, real_scales=True))


@pytest.mark.parametrize("fmt", ["fp16", "int8", "k8v4"])
def test_page_holes_are_masked(sk, fmt):
    case = testing.make_case(fmt, 1500, 16, holes=True)
    pt = case.kv.page_table
    assert (pt[6::7] == -1).all() and pt[-1] == -1
    _check(sk, case)


@pytest.mark.parametrize("fmt", ["fp16", "int8", "k8v4"])
def test_width_zero_queries_are_exact_zeros(sk, fmt):
    case = testing.make_case(fmt, 1500, 15, width0=True)
    out, _ = _check(sk, case)
    assert (case.width[2::5] == 0).all()
    assert (out[2::5] == 0).all()


def test_all_hole_query_is_exact_zero(sk):
    case = testing.make_case("int8", 600, 4)
    case.kv.page_table[:] = -1
    out = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    assert (out == 0).all()


def test_ids_past_the_width_are_ignored(sk):
    case = testing.make_case("int8", 3000, 8)
    a = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    ids = case.ids.copy()
    width = case.width.copy()
    width[:] = np.minimum(width, 700)
    ids2 = ids.copy()
    for i, w in enumerate(width):
        ids2[i, w:] = np.random.RandomState(i).randint(-10**9, 10**9, size=ids.shape[1] - w)
    b = sk.qsa_prompt_attn(case.q, case.kv, ids, width)
    c = sk.qsa_prompt_attn(case.q, case.kv, ids2, width)
    assert np.array_equal(b, c), "entries past the width changed the result"
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("n_head_kv", [1, 2, 3])
def test_any_number_of_kv_heads(sk, n_head_kv):
    _check(sk, testing.make_case("int8", 1200, 6, n_head_kv=n_head_kv))


@pytest.mark.parametrize("head_dim, group", [(128, 8), (128, 4), (64, 1)])
def test_other_instantiated_geometries(sk, head_dim, group):
    _check(sk, testing.make_case("q4_0", 900, 6, head_dim=head_dim, group=group))
    _check(sk, testing.make_case("int8", 900, 6, head_dim=head_dim, group=group))


def test_steps_form_reads_column_3(sk):
    case = testing.make_case("int8", 1500, 8)
    steps = testing.make_case("int8", 1500, 8, steps=True)
    assert steps.width.shape == (8, 4)
    a = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    b = sk.qsa_prompt_attn(steps.q, steps.kv, steps.ids, steps.width)
    assert np.array_equal(a, b)


def test_prompt_and_decode_share_the_algorithm_on_cpu(sk):
    case = testing.make_case("fp16", 2100, 8)
    a = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    b = sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width)
    assert np.array_equal(a, b)


def test_periodic_case_is_periodic(sk):
    case = testing.make_case("int8", 200, 600, periodic=True)
    out = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
    base = out[np.arange(600) % 251]
    assert np.array_equal(out, base)


def test_parity_output_prints_each_case_once_with_its_rule_and_a_legend(sk, capsys):
    """`strata-kernels parity`: one line per case (no second table), the pass rule in words, a legend, and no speed
    comparison on the CPU, where the variant and the fp32 reference are the same kernel."""
    from strata_kernels import cli
    assert cli.main(["parity", "--quick", "--cases", "1,6,12"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    case_lines = [l for l in lines if re.match(r"(PASS|FAIL|SKIP) +case ", l)]
    assert len([l for l in case_lines if " case 1 " in l]) == 1 and len([l for l in case_lines if " case 6 " in l]) == 1
    assert sum(" case 12" in l for l in case_lines) == 16, out    # its four shapes in each of the four formats, once
    assert all("must be <= 1e-05" in l for l in case_lines if l.startswith("PASS")), out
    assert "Each line:" in out and "SKIP fallback:" in out and "docs/verification.md" in out
    assert "x faster" not in out and "new vs old" not in out and "speed-up" not in out
    assert lines[-1].startswith("PASSED: 2 ") and "SKIPPED (not applicable): 16" in lines[-1]


def test_quick_is_small():
    from strata_kernels import parity
    q = parity.QUICK_SIZES
    assert q.ctx <= 2560 and q.queries <= 16 and q.reps == 1 and q.periodic_queries <= parity.PERIOD + 1


def test_readme_python_example_runs(sk, capsys):
    """The README's Python example, as written, on the CPU plugin."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    assert "Which(" in capsys.readouterr().out
