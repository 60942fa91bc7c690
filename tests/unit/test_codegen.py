"""Code generation: deterministic, write-if-different, headers, every target renders without a compiler."""
import json
import os

import pytest

from strata_kernels import codegen, targets


@pytest.fixture(scope="module")
def table():
    return targets.all_targets()


@pytest.mark.parametrize("name", sorted(targets.all_targets()))
def test_every_target_renders_a_full_tree(tmp_path, table, name):
    r = codegen.generate([targets.Selection(table[name], table[name].ptx)], tmp_path)[0]
    files = sorted(p.name for p in r.directory.iterdir())
    ext = table[name].backend.source_ext
    assert f"plugin{ext}" in files and "manifest.json" in files
    for v in table[name].all_variants:
        for g in table[name].geometries:
            assert f"{v}_{g.head_dim}_{g.group}{ext}" in files
    m = json.loads((r.directory / "manifest.json").read_text())
    assert m["target"] == name and m["abi_version"] == codegen.ABI_VERSION
    assert m["variants"] == list(table[name].all_variants)
    assert (tmp_path / "CMakeLists.txt").is_file() and (tmp_path / "include" / "strata_plugin.h").is_file()


def test_generated_files_say_generated_do_not_edit(tmp_path, table):
    r = codegen.generate([targets.Selection(table["sm_90"], False)], tmp_path)[0]
    for src in r.sources:
        first = src.read_text().splitlines()[0]
        assert "generated — do not edit" in first and "target: sm_90" in first
    assert (tmp_path / "CMakeLists.txt").read_text().startswith("# generated — do not edit")


def test_rendering_is_deterministic(tmp_path, table):
    sels = targets.parse_target_list("all", table)
    a, b = tmp_path / "a", tmp_path / "b"
    codegen.generate(sels, a)
    codegen.generate(sels, b)
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert fa == fb
    for rel in fa:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_write_if_different_keeps_mtimes(tmp_path, table):
    sel = [targets.Selection(table["cpu"], False)]
    r = codegen.generate(sel, tmp_path)[0]
    src = r.sources[0]
    os.utime(src, (1, 1))
    codegen.generate(sel, tmp_path)
    assert src.stat().st_mtime == 1, "an unchanged file was rewritten (Ninja would rebuild it)"


def test_stale_sources_are_removed(tmp_path, table):
    r = codegen.generate([targets.Selection(table["cpu"], False)], tmp_path)[0]
    stray = r.directory / "v9_256_12.cpp"
    stray.write_text("old")
    codegen.generate([targets.Selection(table["cpu"], False)], tmp_path)
    assert not stray.exists()


def test_golden_snippets(tmp_path, table):
    """The numerics that must survive template edits (QSA_SPEC §4.1): fma chains, butterfly, exact constants."""
    cpu = codegen.generate([targets.Selection(table["cpu"], False)], tmp_path / "c")[0]
    src = (cpu.directory / "fp32_256_12.cpp").read_text()
    assert "constexpr int HD = 256;" in src and "constexpr int G = 12;" in src
    assert "constexpr float kInvSqrtHD = 0x1.0000000000000p-4f;" in src
    assert "std::fma(" in src and "-FLT_MAX" in src
    cu = codegen.generate([targets.Selection(table["sm_90"], False)], tmp_path / "g")[0]
    src = (cu.directory / "fp32_256_12.cu").read_text()
    assert "__fmaf_rn(" in src and "SHFL_XOR" in src and "__expf(" in src
    assert "for (int off = 16; off >= 1; off >>= 1)" in src
    plugin = (cu.directory / "plugin.cu").read_text()
    assert "STRATA_MANIFEST_BEGIN" in plugin and '"target":"sm_90"' in plugin


def test_manifest_records_ptx_and_driver_floor(tmp_path, table):
    r = codegen.render_target(targets.Selection(table["sm_120"], True), tmp_path,
                              toolchain={"name": "nvcc", "version": "13.0"})
    assert r.manifest["sass"] == ["sm_120"] and r.manifest["ptx"] == ["compute_120"]
    assert r.manifest["min_driver_version"] == 13000  # 13.x SASS runs on any 13.0+ driver
    r = codegen.render_target(targets.Selection(table["gfx1100"], False), tmp_path)
    assert r.manifest["gfx"] == ["gfx1100"] and r.manifest["sass"] == []


def test_cuda12_driver_plugins_carry_every_variant_of_their_table(tmp_path, table):
    # The clang-built sm_90 plugin passed parity with all nine variants on the H200
    # (docs/results/2026-12-01-h200-cuda12/run2).
    r = codegen.render_target(targets.Selection(table["sm_90"], False), tmp_path,
                              toolchain={"name": codegen.DRIVER_TOOLCHAIN, "version": "12.9"})
    assert r.manifest["variants"] == list(table["sm_90"].all_variants)
    assert {"v2", "v2t", "split", "grouped"} <= set(r.manifest["variants"])
    assert (r.directory / "v2_256_12.cu").is_file() and (r.directory / "driver_api.cpp").is_file()


def test_launch_attribute_features_stay_out_of_the_driver_api_form(tmp_path, table):
    # sm_90's nvcc plugin launches grouped's union pre-pass in thread block clusters and grouped_ws / the merges by
    # programmatic dependent launch (cudaLaunchKernelEx); the cuda12 driver-API layer launches by cuLaunchKernel
    # only, so its sources carry neither.
    nv = codegen.render_target(targets.Selection(table["sm_90"], False), tmp_path / "nvcc",
                               toolchain={"name": "nvcc", "version": "13.0"})
    drv = codegen.render_target(targets.Selection(table["sm_90"], False), tmp_path / "driver",
                                toolchain={"name": codegen.DRIVER_TOOLCHAIN, "version": "12.9"})
    g_nv = (nv.directory / "grouped_256_12.cu").read_text()
    g_drv = (drv.directory / "grouped_256_12.cu").read_text()
    for marker in ("cudaLaunchAttributeClusterDimension", "barrier.cluster.arrive", '"griddepcontrol.wait;',
                   "cudaLaunchAttributeProgrammaticStreamSerialization"):
        assert marker in g_nv, marker
        assert marker not in g_drv, marker
    assert "grouped_union_kernel<true, 1><<<" in g_drv


def test_warp_max_goes_through_the_one_helper(tmp_path, table):
    # clang 19/20 emit __reduce_max_sync with its mask and value swapped (the illegal instruction of v2, split and
    # grouped on the H200): only strata::warp_max_u32, whose clang branch shuffles instead, may call it.
    r = codegen.render_target(targets.Selection(table["sm_90"], False), tmp_path)
    users = set()
    for src in r.sources:
        text = src.read_text()
        assert text.count("__reduce_max_sync(") == text.count("uint32_t warp_max_u32(uint32_t v)"), src.name
        if "strata::warp_max_u32(" in text:
            users.add(src.name.split("_256_")[0])
    assert {"v2", "split", "grouped"} <= users
    assert "defined(__clang__) && defined(__CUDA__) && !defined(__NVCC__)" in r.directory.joinpath(
        "v2_256_12.cu").read_text()
