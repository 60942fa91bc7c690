"""A geometry the CPU table does not ship, built on demand: `strata-kernels build --targets cpu --geometries 128x7`
compiles a plugin of just that geometry into the per-user plugin directory (here a temporary one), the resolver
takes it for (128, 7) calls and keeps the package's plugin for its own geometries, and the call passes QSA_SPEC §6's
checks against the FP64 oracle through the public API (Qwen2.5-7B: head_dim 128, 28 heads over 4 KV heads)."""
import numpy as np
import pytest

from strata_kernels import cli, plans, reference, resolve, testing
from strata_kernels.errors import GeometryMissing
from strata_kernels.paths import user_plugin_dir

TOL = 1e-5


@pytest.fixture()
def user_dir(tmp_path, monkeypatch):
    """An empty per-user plugin directory of this test's own; nothing cached from other tests."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("STRATA_KERNELS_PLUGIN_PATH", raising=False)
    monkeypatch.delenv("STRATA_KERNELS_TARGET", raising=False)
    resolve.clear_cache()
    plans.clear()
    yield user_plugin_dir()
    resolve.clear_cache()
    plans.clear()


def test_cpu_128x7_built_on_demand_passes_parity(sk, user_dir, tmp_path, capsys):
    case = testing.make_case("int8", 2100, 16, n_head_kv=4, group=7, head_dim=128)
    with pytest.raises(GeometryMissing, match=r"`strata-kernels build --targets cpu --geometries 128x7`"):
        sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)

    assert cli.main(["build", "--targets", "cpu", "--geometries", "128x7",
                     "--build-dir", str(tmp_path / "build"), "-j", "2"]) == 0
    plugin = user_dir / "libstrata_cpu-128x7.so"
    assert plugin.is_file(), capsys.readouterr().out
    resolve.clear_cache()

    for fmt in ("int8", "q4_0"):
        case = testing.make_case(fmt, 2100, 16, n_head_kv=4, group=7, head_dim=128)
        out = sk.qsa_prompt_attn(case.q, case.kv, case.ids, case.width)
        ref = reference.qsa_attn_fp64(case.q, case.kv, case.ids, case.width)
        assert out.shape == (16, 28, 128) and np.isfinite(out).all()
        err, scale = np.abs(out - ref).max(), np.abs(ref).max()
        assert err <= TOL * scale, f"{fmt} 128x7: err {err:.3e} > {TOL} x scale {scale:.3e}"
        assert (out[case.width == 0] == 0).all()

    res = resolve.resolution_for("cpu")
    served = {g: c.plugin.path.name for g, c in resolve.geometry_plugins(res).items()}
    assert served[(128, 7)] == plugin.name
    assert served[(256, 12)] == "libstrata_cpu.so", "the user plugin must not shadow the package's geometries"
    assert "128x7 by libstrata_cpu-128x7.so [user]" in resolve.explain()
