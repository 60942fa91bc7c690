"""Target tables and target-list parsing (ARCHITECTURE §3, §8)."""
from pathlib import Path

import pytest

from strata_kernels import targets
from strata_kernels.errors import TargetError

MISSION = {"cpu", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120",
           "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201", "sycl"}


@pytest.fixture(scope="module")
def table():
    return targets.all_targets()


def test_every_target_of_the_mission_is_in_the_tables(table):
    assert set(table) == MISSION


def test_cuda_toolkit_floors_and_ptx_policy(table):
    assert table["sm_70"].toolkit_max == "12.9", "CUDA 13 dropped Volta: sm_70 needs a 12.x toolkit"
    assert table["sm_70"].families == ("cuda12",)
    assert table["sm_120"].ptx and "cuda13" in table["sm_120"].families
    # the newest arch's PTX for later GPUs, and the portable sm_80 variants' PTX for a major without SASS
    assert table["sm_80"].ptx
    assert not any(table[t].ptx for t in ("sm_75", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110"))
    for t in ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90"):
        assert {"cuda13", "cuda12"} <= set(table[t].families)
    for t in ("sm_100", "sm_103", "sm_110"):
        assert table[t].families == ("cuda13",) and "grouped" in table[t].variants


def test_features_not_arch_numbers(table):
    assert "cp_async" in table["sm_80"].features and "cp_async" not in table["sm_75"].features
    assert "mma_m8n8k4" in table["sm_70"].features
    assert "wmma_gfx11" in table["gfx1100"].features and "wmma_gfx12" in table["gfx1201"].features


def test_engine_geometry_everywhere(table):
    for t in table.values():
        assert targets.Geometry(256, 12) in t.geometries, t.name


@pytest.mark.parametrize("spec, expected", [
    # sm_80 and sm_120 carry PTX by their tables; "+PTX" adds it to another target
    ("cpu;sm_80;sm_90+PTX;gfx1100", [("cpu", False), ("sm_80", True), ("sm_90", True), ("gfx1100", False)]),
    ("8.6;8.9+PTX", [("sm_86", False), ("sm_89", True)]),
    ("9.0 12.0", [("sm_90", False), ("sm_120", True)]),
    ("compute_90", [("sm_90", True)]),
    ("80,86", [("sm_80", True), ("sm_86", False)]),
    ("sycl;cpu", [("cpu", False), ("sycl", False)]),
])
def test_parse_target_list(spec, expected, table):
    got = [(s.target.name, s.ptx) for s in targets.parse_target_list(spec, table)]
    assert got == expected


def test_all_and_native(table):
    assert {s.target.name for s in targets.parse_target_list("all", table)} == MISSION
    got = targets.parse_target_list("native", table, native=["cpu", "sm_90"])
    assert [s.target.name for s in got] == ["cpu", "sm_90"]


@pytest.mark.parametrize("spec, needle", [
    ("sm_91", "unknown target 'sm_91'"),
    ("9.0a", "sm_90a"),
    ("gfx1100+PTX", "only applies to CUDA"),
    ("", "empty"),
])
def test_bad_target_lists(spec, needle, table):
    with pytest.raises(TargetError, match=needle):
        targets.parse_target_list(spec, table)


def _write(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "backends"
    d.mkdir()
    (d / "x.toml").write_text(body)
    return d


_GOOD = """
[backend]
name = "cpu"
toolchain = "host-cxx"
template_dirs = ["cpu"]
source_ext = ".cpp"

[targets.cpu]
families = ["core"]
features = []
variants = ["fp32"]
geometries = [{ head_dim = 256, group = 12 }]
"""


def test_a_valid_table_loads(tmp_path):
    got = targets.load_targets(_write(tmp_path, _GOOD))
    assert list(got) == ["cpu"]


@pytest.mark.parametrize("edit, needle", [
    (lambda s: s.replace('features = []', 'features = []\nspeed = "fast"'), "unknown key"),
    (lambda s: s.replace('families = ["core"]\n', ''), "missing field"),
    (lambda s: s.replace('variants = ["fp32"]', 'variants = ["fp32", "v9"]'), "unknown variant 'v9'"),
    (lambda s: s.replace('variants = ["fp32"]', 'variants = ["fp32", "v2"]'), "variant 'v2' has no template"),
    (lambda s: s.replace('variants = ["fp32"]', 'variants = []'), "must dispatch the 'fp32'"),
    (lambda s: s.replace('group = 12', 'group = 17'), "G 17 is not allowed"),
    (lambda s: s.replace('head_dim = 256', 'head_dim = 100'), "head_dim 100 is not allowed"),
    (lambda s: s.replace('source_ext = ".cpp"', 'source_ext = ".cpp"\ncolour = 1'), "unknown key"),
    (lambda s: s + "\n[oops]\n", "unknown section"),
    (lambda s: s.replace("[targets.cpu]", "[targets.cpu]\nptx = true"), "'ptx' applies to CUDA"),
    (lambda s: s.replace("= [", "= [["), "not valid TOML"),
])
def test_table_validation_errors_name_the_problem(tmp_path, edit, needle):
    with pytest.raises(TargetError, match=needle):
        targets.load_targets(_write(tmp_path, edit(_GOOD)))
