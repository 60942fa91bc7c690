"""Geometries on demand (no compiler): which (head_dim, G) the kernels allow, the extra-geometry plugin that
`strata-kernels build --geometries` renders beside a target's table plugin, and the refusal of what the kernels do
not take."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from strata_kernels import build, cli, codegen, dispatch_model, geometry, targets
from strata_kernels.geometry import Geometry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table():
    return targets.all_targets()


def test_parse_reads_pairs_in_order_without_duplicates():
    assert geometry.parse("128x4, 128x8;128x4 64X1") == (Geometry(128, 4), Geometry(128, 8), Geometry(64, 1))
    assert Geometry(128, 4).tag == "128x4"


@pytest.mark.parametrize("spec, said", [
    ("96x4", "head_dim 96 is not allowed"),       # the int8 scale groups and every kernel need a multiple of 64
    ("320x4", "head_dim 320 is not allowed"),
    ("128x17", "G 17 is not allowed"),
    ("128x0", "G 0 is not allowed"),
    ("128", "expected HEAD_DIMxG"),
    ("", "empty"),
])
def test_parse_refuses_what_the_kernels_do_not_take(spec, said):
    with pytest.raises(ValueError, match=said) as e:
        geometry.parse(spec)
    if "allowed" in said:
        assert "64, 128, 192, 256" in str(e.value) and "1..16" in str(e.value)


def test_tables_and_the_command_line_share_one_rule(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('[backend]\nname = "cpu"\ntoolchain = "host-cxx"\ntemplate_dirs = ["cpu"]\nsource_ext = ".cpp"\n'
                   '[targets.cpu]\nfamilies = ["core"]\nfeatures = []\nvariants = ["fp32"]\n'
                   'geometries = [{ head_dim = 96, group = 4 }]\n')
    with pytest.raises(targets.TargetError, match="head_dim 96 is not allowed"):
        targets.load_table(bad)


def test_extra_plugin_holds_only_what_the_table_lacks(table):
    sel = targets.Selection(table["sm_90"], False)
    wanted = geometry.parse("256x12,128x4,128x6,64x8")  # the table ships 256x12 and 128x4, not 128x6 or 64x8
    both = build.with_geometries([sel], wanted, table_plugins=True, log=lambda s: None)
    assert [s.plugin for s in both] == ["sm_90", "sm_90-128x6-64x8"]
    extra = both[1]
    assert extra.extra and extra.target.name == "sm_90"
    assert extra.target.geometries == (Geometry(128, 6), Geometry(64, 8))
    only = build.with_geometries([sel], wanted, table_plugins=False, log=lambda s: None)
    assert [s.plugin for s in only] == ["sm_90-128x6-64x8"]
    logs = []
    assert build.with_geometries([sel], geometry.parse("256x12"), table_plugins=False, log=logs.append) == []
    assert "already has 256x12" in logs[0] and "strata-kernels build --targets sm_90" in logs[0]


def test_only_geometries_keeps_only_those_of_each_table(table):
    # A quick build (STRATA_ONLY_GEOMETRIES=256x12): the table plugins keep their names and hold only the pairs asked
    # for.
    sels = [targets.Selection(table["cpu"], False), targets.Selection(table["sm_90"], False)]
    logs = []
    quick = build.only_geometries(sels, "256x12", log=logs.append)
    assert [s.plugin for s in quick] == ["cpu", "sm_90"] and not any(s.extra for s in quick)
    assert all(s.target.geometries == (Geometry(256, 12),) for s in quick)
    assert "strata-kernels: sm_90: only 256x12 (STRATA_ONLY_GEOMETRIES)" in logs
    assert build.only_geometries(sels, None) == sels and build.only_geometries(sels, "") == sels
    with pytest.raises(build.BuildError, match="names none of sm_90's geometries.*--geometries"):
        build.only_geometries(sels[1:], "128x6")
    with pytest.raises(build.BuildError, match="STRATA_ONLY_GEOMETRIES='96x4'.*head_dim 96 is not allowed"):
        build.only_geometries(sels, "96x4")


def test_extra_plugin_renders_beside_the_table_plugin(tmp_path, table):
    sel = targets.Selection(table["sm_90"], False)
    sels = build.with_geometries([sel], geometry.parse("128x6"), table_plugins=True, log=lambda s: None)
    base, extra = codegen.generate(sels, tmp_path)
    assert base.directory == tmp_path / "sm_90" and extra.directory == tmp_path / "sm_90-128x6"
    names = sorted(p.name for p in extra.directory.iterdir())
    assert "v2_128_6.cu" in names and not [n for n in names if "_256_12" in n or "_128_4" in n]
    m = json.loads((extra.directory / "manifest.json").read_text())
    assert m["target"] == "sm_90" and m["geometries"] == [{"head_dim": 128, "group": 6}]
    cmake = (tmp_path / "CMakeLists.txt").read_text()
    assert "add_library(strata_sm_90 " in cmake and "add_library(strata_sm_90-128x6 " in cmake


def test_generate_and_build_refuse_a_geometry_the_kernels_do_not_take(tmp_path, capsys):
    assert cli.main(["generate", "--target", "cpu", "--geometries", "96x4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "head_dim 96 is not allowed" in err and "64, 128, 192, 256" in err
    assert not (tmp_path / "cpu").exists()
    assert cli.main(["build", "--targets", "cpu", "--geometries", "128x20", "--out", str(tmp_path)]) == 2
    assert "G 20 is not allowed" in capsys.readouterr().err


def test_grouped_shared_memory_bound_is_one_formula():
    """cuda/grouped_smem.inc.j2 defines it once: cuda/dispatch.inc.j2 decides with it and cuda/grouped.cu.j2
    static_asserts that it bounds its Smem (both include it), and the Python model of the dispatch repeats it: the
    model must agree (a (128, 4) plugin once failed that assert with an older formula)."""
    tdir = ROOT / "templates" / "cuda"
    bound = (tdir / "grouped_smem.inc.j2").read_text()
    a, b = re.search(r"grouped_smem_bytes\(int hd\) \{ return (\d+) \* hd \+ (\d+); \}", bound).groups()
    for name in ("dispatch.inc.j2", "grouped.cu.j2"):
        text = (tdir / name).read_text()
        assert '{% include "cuda/grouped_smem.inc.j2" %}' in text, name
        assert "62720" not in text and "656 *" not in text, f"{name} restates the bound"
    assert "sizeof(Smem) + 1024 <= grouped_smem_bytes(HD)" in (tdir / "grouped.cu.j2").read_text()
    for hd in (64, 128, 192, 256):
        assert dispatch_model.grouped_smem_bytes(hd) == int(a) * hd + int(b)


def test_grouped_union_window_is_one_definition():
    """cuda/grouped_union.inc.j2 defines the union pre-pass's windows once: cuda/grouped.cu.j2 sizes them with it and
    cuda/dispatch.inc.j2 counts a cache's windows with it (both include it); the Python model repeats it."""
    tdir = ROOT / "templates" / "cuda"
    inc = (tdir / "grouped_union.inc.j2").read_text()
    words = int(re.search(r"GROUPED_UNION_WORDS = (\d+);", inc).group(1))
    windows = int(re.search(r"GROUPED_UNION_MAX_WINDOWS = (\d+);", inc).group(1))
    assert (words, windows) == (dispatch_model.GROUPED_UNION_WORDS, dispatch_model.GROUPED_UNION_MAX_WINDOWS)
    for name in ("dispatch.inc.j2", "grouped.cu.j2"):
        text = (tdir / name).read_text()
        assert '{% include "cuda/grouped_union.inc.j2" %}' in text, name
        assert not re.search(r"8192(?!\.f)", text), f"{name} restates the window"  # (8192.f: a V-scale constant)
    for nq, cells in ((1, 262144), (2, 131072), (5, 32768), (8, 32768), (12, 16384), (32, 8192)):
        bits = 32 // (cells // words)
        assert dispatch_model.grouped_union_window_cells(nq) == cells and bits >= nq
    # the ONE form's largest cluster (the decode rule's windows): a rank's words spread over 512 threads in whole
    # 4-cell pages, so 8 blocks except at 32 queries a group (one cell a word: 2 words a thread are half a page)
    assert int(re.search(r"GROUPED_UNION_THREADS = (\d+);", inc).group(1)) == dispatch_model.GROUPED_UNION_THREADS
    assert 1 << int(re.search(r"GROUPED_UNION_ONE_MAX_ENTRIES = 1LL << (\d+);", inc).group(1)) == \
        dispatch_model.GROUPED_UNION_ONE_MAX_ENTRIES
    assert "constexpr int union_cb_max() { return grouped_union_cb_max(NQ); }" in (tdir / "grouped.cu.j2").read_text()
    assert [dispatch_model.grouped_union_cb_max(nq) for nq in (1, 2, 5, 8, 12, 16, 32)] == [8] * 6 + [4]


def test_decode_rule_flat_windows_follow_the_cluster_feature(table):
    """The decode rule counts caches of up to DECODE_FLAT_WINDOWS windows as one where the union pre-pass runs in
    clusters, and longer caches (the search path's) need DECODE_LONG_PAIRS (query, KV head) pairs there:
    cuda/dispatch.inc.j2 decides that by the target's `cluster` feature, the model by CLUSTER_CCS, which must name
    exactly the CUDA targets whose table carries it. The one-window bars are the same numbers in both."""
    cluster = {int(t.arch) for t in table.values() if t.backend.name == "cuda" and "cluster" in t.features}
    assert cluster and cluster == set(dispatch_model.CLUSTER_CCS)
    text = (ROOT / "templates" / "cuda" / "dispatch.inc.j2").read_text()
    flat = re.search(r'\{% if "cluster" in features %\}.*?DECODE_FLAT_WINDOWS = (\d+);.*?\{% else %\}\s*'
                     r'constexpr int64_t DECODE_FLAT_WINDOWS = 1;', text, re.S)
    assert flat and int(flat.group(1)) == dispatch_model.DECODE_FLAT_WINDOWS
    long = re.search(r'\{% if "cluster" in features %\}.*?DECODE_LONG_PAIRS = (\d+);\s*'
                     r'constexpr int64_t DECODE_LONG_PAIRS_FP16 = (\d+);\s*'
                     r'constexpr int64_t DECODE_LONG_PAIRS_Q4 = (\d+);.*?'
                     r'\{% else %\}.*?constexpr int64_t DECODE_LONG_PAIRS = 0;', text, re.S)
    assert long and tuple(map(int, long.groups())) == (dispatch_model.DECODE_LONG_PAIRS,
                                                       dispatch_model.DECODE_LONG_PAIRS_FP16,
                                                       dispatch_model.DECODE_LONG_PAIRS_Q4)
    bars = re.search(r"DECODE_GROUPED_PAIRS = (\d+);\s*constexpr int64_t DECODE_GROUPED_PAIRS_Q4 = (\d+);", text)
    assert bars and tuple(map(int, bars.groups())) == (dispatch_model.DECODE_GROUPED_PAIRS,
                                                       dispatch_model.DECODE_GROUPED_PAIRS_Q4)


_ONE_CB_PROBE = r"""
#include <cstdio>
#include <initializer_list>
%s
int main() {
    for (long long nq : {1, 2, 5, 8, 12, 16, 32})
        for (long long cap : {64, 1024, 2051, 8192})
            for (long long nwin : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 16, 33, 128, 256, 257, 512, 513})
                for (long long groups : {1, 2, 13, 16, 17, 33, 66, 67, 128, 132, 133})
                    for (long long per_sm : {102400, 233472})
                        for (int fits : {0, 1})
                            std::printf("%%lld %%lld %%lld %%lld %%lld %%d %%d %%lld\n", nq, cap, nwin, groups,
                                        per_sm, fits, grouped_union_one_cb(nq, cap, nwin, groups, 132, per_sm, fits),
                                        grouped_union_one_smem(nq, cap, nwin, 2));
}
"""


def test_the_union_cluster_rule_is_one_definition(tmp_path):
    """grouped_union_one_cb (cuda/grouped_union.inc.j2) is the launcher's choice of the ONE form's cluster and the
    decode rule's check that the union has a fast path; the Python model repeats it: compiled on the host, the two
    must agree everywhere on a grid of geometries, caps, windows, groups and shared-memory sizes."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++-19") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a host C++ compiler")
    tdir = ROOT / "templates" / "cuda"
    inc = re.sub(r"\{#.*?#\}", "", (tdir / "grouped_union.inc.j2").read_text(), flags=re.S)
    assert "grouped_union_one_cb(NQ, p->cap, nwin, groups, sms, per_sm, smem_union)" in \
        (tdir / "grouped.cu.j2").read_text()
    assert "grouped_union_one_cb(per, a->cap, nwin, (a->n_q + per - 1) / per, f.sms, f.smem_sm, false)" in \
        (tdir / "dispatch.inc.j2").read_text()
    src = tmp_path / "probe.cpp"
    src.write_text(_ONE_CB_PROBE % inc)
    exe = tmp_path / "probe"
    subprocess.run([cxx, "-std=c++17", "-O1", str(src), "-o", str(exe)], check=True, capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    rows = [list(map(int, line.split())) for line in lines if line]
    assert len(rows) == 7 * 4 * 19 * 11 * 2 * 2
    for nq, cap, nwin, groups, per_sm, fits, cb, smem2 in rows:
        assert dispatch_model.grouped_union_one_cb(nq, cap, nwin, groups, 132, per_sm, bool(fits)) == cb, \
            (nq, cap, nwin, groups, fits)
        assert dispatch_model.grouped_union_one_smem(nq, cap, nwin, 2) == smem2
    for fits in (0, 1):  # the grid reaches every answer
        assert {r[6] for r in rows if r[5] == fits} == {1, 2, 4, 8}
    # where the union does not fit, any cache of at most grouped_union_cb_max windows gets a cluster, and longer ones
    # that largest cluster in batches, up to GROUPED_UNION_MAX_BATCHES of them
    assert all(r[6] > 1 for r in rows if r[5] == 0 and r[2] <= dispatch_model.grouped_union_cb_max(r[0]))
    mb = int(re.search(r"GROUPED_UNION_MAX_BATCHES = (\d+);", inc).group(1))
    assert mb == dispatch_model.GROUPED_UNION_MAX_BATCHES
    assert "constexpr bool grouped_union_batched(long long nq) { return nq >= 16; }" in inc
    assert [dispatch_model.grouped_union_batched(nq) for nq in (8, 12, 15, 16, 32)] == [False] * 3 + [True] * 2
    for nq, cap, nwin, groups, per_sm, fits, cb, smem2 in rows:
        cbm = dispatch_model.grouped_union_cb_max(nq)
        if nwin > cbm:  # batches of cb windows, within mb of them, where the union does not fit
            assert (cb > 1) == (not fits and nq >= 16 and -(-nwin // cbm) <= mb), (nq, nwin, fits, cb)
            assert cb == 1 or -(-nwin // cb) <= mb
    assert {r[2] for r in rows if r[6] > 1 and r[2] > 8} == {9, 10, 11, 12, 16, 33, 128, 256, 257, 512}
    # many groups take smaller clusters (more batches) so that they fit the multiprocessors: (128, 4)'s 128 groups of
    # a 2048-query prompt over 32 windows in clusters of 2, a decode call's 4 groups in clusters of 8
    assert dispatch_model.grouped_union_one_cb(16, 2051, 32, 128, 132, 233472, False) == 2
    assert dispatch_model.grouped_union_one_cb(16, 2051, 32, 4, 132, 233472, False) == 8
    assert dispatch_model.grouped_union_one_cb(32, 2051, 64, 64, 132, 233472, False) == 4
    # and a cache that MANY covers at CB 8, but in eight waves of 128 groups, takes CB 2 in four batches
    assert dispatch_model.grouped_union_one_cb(16, 2051, 8, 128, 132, 233472, False) == 2
    assert dispatch_model.grouped_union_one_cb(16, 2051, 8, 4, 132, 233472, False) == 8

