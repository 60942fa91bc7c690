"""The templates at a geometry no table ships: `strata-kernels build --geometries 128x4` compiles and links sm_90's
plugin of (128, 4) (every variant, SASS) and the HIP targets' (gfx1030 a plugin, gfx1100 ISA), each beside the
table's plugin name and with only that pair in its manifest. The GPU tables carry (256, 12) only, so nothing else
compiles the kernels at another HD or G (the grouped kernel's shared-memory bound failed exactly there). About 35 CPU
seconds for sm_90, 10 for HIP."""
import pytest

from strata_kernels import build, resolve, targets, toolchains

TABLE = targets.all_targets()

pytestmark = pytest.mark.toolchain


@pytest.mark.parametrize("spec, plugins, isa", [
    ("sm_90", ["sm_90-128x4"], []),
    ("gfx1030;gfx1100", ["gfx1030-128x4"], ["gfx1100-128x4"]),
])
def test_another_geometry_compiles_for_gpu_targets(tmp_path, spec, plugins, isa):
    for name in spec.split(";"):
        tc = toolchains.for_target(TABLE[name])
        if not tc.available:
            pytest.skip(f"{name}: {tc.reason}")
    res = build.build(spec, geometries="128x4", table_plugins=False, build_dir=tmp_path / "b",
                      install_dir=tmp_path / "plugins", jobs=2, log=lambda m: None)
    assert sorted(res.built) == plugins and sorted(res.isa_only) == isa
    for name in plugins:
        path = tmp_path / "plugins" / f"libstrata_{name}.so"
        m = resolve.read_manifest(path)
        assert m["target"] == name.split("-")[0] and m["geometries"] == [{"head_dim": 128, "group": 4}]
        assert m["variants"] == list(TABLE[m["target"]].all_variants)
