"""The templates at a geometry no table ships: `strata-kernels build --geometries` compiles and links sm_90's plugin
of (128, 6) (Qwen2.5-1.5B; every variant, SASS) and the HIP targets' of (64, 4) (Llama-3.2-1B, a head_dim no GPU table
ships; gfx1030 a plugin, gfx1100 ISA), each beside the table's plugin name and with only that pair in its manifest.
(The prebuilt pairs themselves are compiled by test_cuda_compile.py and test_hip_compile.py on a target of each
feature set.) About 35 CPU seconds for sm_90, 10 for HIP."""
import pytest

from strata_kernels import build, resolve, targets, toolchains

TABLE = targets.all_targets()

pytestmark = pytest.mark.toolchain


@pytest.mark.parametrize("spec, pair, plugins, isa", [
    ("sm_90", (128, 6), ["sm_90-128x6"], []),
    ("gfx1030;gfx1100", (64, 4), ["gfx1030-64x4"], ["gfx1100-64x4"]),
])
def test_another_geometry_compiles_for_gpu_targets(tmp_path, spec, pair, plugins, isa):
    for name in spec.split(";"):
        tc = toolchains.for_target(TABLE[name])
        if not tc.available:
            pytest.skip(f"{name}: {tc.reason}")
    for name in spec.split(";"):
        assert targets.Geometry(*pair) not in TABLE[name].geometries, f"{name}'s table ships {pair}: pick another"
    res = build.build(spec, geometries=f"{pair[0]}x{pair[1]}", table_plugins=False, build_dir=tmp_path / "b",
                      install_dir=tmp_path / "plugins", jobs=2, log=lambda m: None)
    assert sorted(res.built) == plugins and sorted(res.isa_only) == isa
    for name in plugins:
        path = tmp_path / "plugins" / f"libstrata_{name}.so"
        m = resolve.read_manifest(path)
        assert m["target"] == name.split("-")[0] and m["geometries"] == [{"head_dim": pair[0], "group": pair[1]}]
        assert m["variants"] == list(TABLE[m["target"]].all_variants)
