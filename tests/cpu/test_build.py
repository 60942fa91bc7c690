"""The build driver: one CMake project, a no-op rebuild does nothing, an edit rebuilds only what uses it,
missing toolchains are skipped with one line (an error when named), plugins installed atomically."""
import shutil

import pytest

from strata_kernels import build, targets, toolchains
from strata_kernels.errors import ToolchainError


@pytest.fixture(scope="module")
def data_copy(tmp_path_factory):
    """A private copy of templates/ and backends/ so a test may edit a template."""
    d = tmp_path_factory.mktemp("data")
    root = targets.data_root()
    shutil.copytree(root / "templates", d / "templates")
    shutil.copytree(root / "backends", d / "backends")
    return d


@pytest.fixture()
def data_env(data_copy, monkeypatch):
    monkeypatch.setenv("STRATA_KERNELS_DATA", str(data_copy))
    targets.all_targets.cache_clear()
    yield data_copy
    targets.all_targets.cache_clear()


def _build(tmp_path, logs, spec="cpu"):
    return build.build(spec, build_dir=tmp_path / "b", install_dir=tmp_path / "plugins", log=logs.append)


def test_build_noop_and_incremental(tmp_path, data_env):
    logs = []
    r = _build(tmp_path, logs)
    plugin = tmp_path / "plugins" / "libstrata_cpu.so"
    assert r.built == {"cpu": plugin} and plugin.is_file()
    assert b"STRATA_MANIFEST_BEGIN" in plugin.read_bytes()
    assert not list((tmp_path / "plugins").glob(".*tmp*")), "a temporary file was left behind"

    logs.clear()
    r = _build(tmp_path, logs)
    assert r.up_to_date and not any("compiling" in l for l in logs), logs

    # Another backend's template changed: the key changes, but no CPU source does, so Ninja compiles nothing.
    cu = data_env / "templates" / "cuda" / "fp32.cu.j2"
    cu.write_text(cu.read_text() + "\n{# edited #}\n")
    logs.clear()
    r = _build(tmp_path, logs)
    assert not r.up_to_date
    assert not any("Building CXX object" in l for l in logs), logs

    # The CPU kernel template changed: its sources and the entry (manifest hash) recompile, the plugin is replaced.
    cpu = data_env / "templates" / "cpu" / "fp32.cpp.j2"
    cpu.write_text(cpu.read_text() + "\n// edited\n")
    logs.clear()
    _build(tmp_path, logs)
    compiled = [l for l in logs if "Building CXX object" in l]
    assert any("fp32_256_12.cpp" in l for l in compiled), logs


def test_missing_toolchain_is_one_line_or_an_error(tmp_path, data_env, monkeypatch):
    monkeypatch.setattr(toolchains, "nvcc", lambda: toolchains.Toolchain("nvcc", None, None, "no nvcc found (test)"))
    logs = []
    r = build.build("all", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert "sm_90" in r.skipped and "cpu" in r.built
    skip_lines = [l for l in logs if "skipping sm_90" in l]
    assert len(skip_lines) == 1 and "no nvcc found" in skip_lines[0]
    with pytest.raises(ToolchainError, match="sm_90 was asked for but cannot be built: no nvcc found"):
        build.build("cpu;sm_90", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)


def test_hip_targets_build_a_plugin_or_isa_and_say_which(tmp_path, data_env):
    """gfx1030 has device libraries on Debian's ROCm 5.2: a loadable plugin; gfx11/gfx12 do not: ISA only."""
    tc = toolchains.hip_clang()
    if not tc.available:
        pytest.skip(f"no HIP toolchain: {tc.reason}")
    logs = []
    r = build.build("gfx1030;gfx1201", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    mode_1030, _ = toolchains.hip_build_mode(tc, "gfx1030")
    mode_1201, why = toolchains.hip_build_mode(tc, "gfx1201")
    if mode_1030 == "plugin":
        plugin = r.built["gfx1030"]
        assert b'"gfx":["gfx1030"]' in plugin.read_bytes()
    if mode_1201 == "isa":
        assert "gfx1201" in r.isa_only and "gfx1201" not in r.built
        isa = "\n".join(p.read_text() for p in r.isa_only["gfx1201"].glob("*.s"))
        assert ".amdgcn_target" in isa and "gfx1201" in isa
        assert any("gfx1201: ISA only" in l and why in l for l in logs), logs
