"""The build driver: one CMake project, a no-op rebuild does nothing, an edit rebuilds only what uses it,
missing toolchains are skipped with one line (an error when named), plugins installed atomically."""
import os
import re
import shutil
from pathlib import Path

import pytest

from strata_kernels import build, targets, toolchains
from strata_kernels.errors import BuildError, ToolchainError


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


@pytest.fixture()
def one_pair(data_env):
    """The HIP and SYCL tables at their first (head_dim, G) pair: these tests are about how a build runs, not about
    the pairs (tests/toolchain compiles those); the eight shipped pairs would add ~2 minutes here on 2 cores."""
    shipped = {}
    for name in ("hip.toml", "sycl.toml"):
        table = data_env / "backends" / name
        shipped[table] = text = table.read_text()
        first, n = re.subn(r"(?ms)^geometries = \[\n.*?^\]\n", "geometries = [{ head_dim = 256, group = 12 }]\n", text)
        assert n == 1, f"backends/{name}: expected one multi-line [defaults] geometries list"
        table.write_text(first)
    targets.all_targets.cache_clear()
    yield data_env
    for table, text in shipped.items():
        table.write_text(text)
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


def test_missing_toolchain_is_one_line_or_an_error(tmp_path, one_pair, monkeypatch):
    monkeypatch.setattr(toolchains, "nvcc", lambda: toolchains.Toolchain("nvcc", None, None, "no nvcc found (test)"))
    logs = []
    r = build.build("all", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert "sm_90" in r.skipped and "cpu" in r.built
    skip_lines = [l for l in logs if "skipping sm_90" in l]
    assert len(skip_lines) == 1 and "no nvcc found" in skip_lines[0]
    with pytest.raises(ToolchainError, match="sm_90 was asked for but cannot be built: no nvcc found"):
        build.build("cpu;sm_90", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)


def test_hip_targets_build_a_plugin_or_isa_and_say_which(tmp_path, one_pair):
    """gfx1030 has device libraries on Debian's ROCm 5.2: a loadable plugin where clang also finds the tools the
    plugin link runs (lld, clang-offload-bundler); gfx11/gfx12 have none: ISA only. An ISA-only target says why."""
    tc = toolchains.hip_clang()
    if not tc.available:
        pytest.skip(f"no HIP toolchain: {tc.reason}")
    logs = []
    r = build.build("gfx1030;gfx1201", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    for gfx in ("gfx1030", "gfx1201"):
        mode, why = toolchains.hip_build_mode(tc, gfx)
        if mode == "plugin":
            assert f'"gfx":["{gfx}"]'.encode() in r.built[gfx].read_bytes()
            continue
        assert gfx in r.isa_only and gfx not in r.built
        isa = "\n".join(p.read_text() for p in r.isa_only[gfx].glob("*.s"))
        assert ".amdgcn_target" in isa and gfx in isa
        assert any(f"{gfx}: ISA only" in l and why in l for l in logs), logs


FAKE_DPCPP = """#!/bin/sh
# A stand-in for icpx: answers --version like Intel's DPC++, records every other call, writes what -o names.
case " $* " in *" --version "*) echo "Intel(R) oneAPI DPC++/C++ Compiler 2025.0.4 (2025.0.4.20241205)"; exit 0;; esac
echo "$*" >> "$(dirname "$0")/calls.log"
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then printf 'fake %s\\n' "$a" > "$a"; fi
  prev="$a"
done
"""


@pytest.fixture()
def fresh_toolchains():
    """Finders see this test's PATH and replacements; later tests see the machine again."""
    toolchains.clear_cache()
    yield
    toolchains.clear_cache()


def _fake_dpcpp(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fake-oneapi" / "bin"
    bin_dir.mkdir(parents=True)
    icpx = bin_dir / "icpx"
    icpx.write_text(FAKE_DPCPP)
    icpx.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for var in ("SYCL_CXX", "CMPLR_ROOT"):
        monkeypatch.delenv(var, raising=False)
    toolchains.clear_cache()
    return bin_dir


def test_sycl_without_dpcpp_is_checked_against_the_headers(tmp_path, one_pair, monkeypatch, fresh_toolchains):
    """No DPC++ compiler: every generated source is compiled against the SYCL headers, no plugin; a no-op rebuild
    does nothing; an error in a source fails the build; a DPC++ compiler appearing switches to a plugin build."""
    real_dpcpp = toolchains.dpcpp
    monkeypatch.setattr(toolchains, "dpcpp", lambda: toolchains.Toolchain("dpcpp", None, None, toolchains.NO_DPCPP))
    tc = toolchains.sycl()
    if not tc.available:
        pytest.skip(f"no SYCL headers or host compiler here: {tc.reason}")
    logs = []
    r = build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert r.checked_only == {"sycl": tmp_path / "b" / "gen" / "sycl"} and not r.built and not r.skipped
    assert not (tmp_path / "p").exists() or not list((tmp_path / "p").iterdir()), "a plugin was installed"
    headers = tc.extra["headers"]
    lines = [l for l in logs if "sycl: checked against the SYCL headers of" in l]
    assert len(lines) == 1, logs
    assert f"{headers.origin} ({headers.include})" in lines[0]
    assert "no plugin: no DPC++ compiler (install Intel oneAPI DPC++: icpx -fsycl)" in lines[0]
    assert any(re.fullmatch(r"strata-kernels: compiled in \d+\.\d s", l) for l in logs), logs
    assert sum("SYCL header check:" in l for l in logs) == 2, logs  # the kernel source and the plugin entry
    assert r.seconds > 0

    logs.clear()
    r = build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert r.up_to_date and "sycl" in r.checked_only and not any("compiling" in l for l in logs), logs

    # The check has teeth: a source that does not compile against the headers fails the build, naming it.
    tpl = one_pair / "templates" / "sycl" / "fp32.cpp.j2"
    original = tpl.read_text()
    tpl.write_text(original + '\nstatic_assert(sizeof(sycl::nd_item<1>) == 0, "strata: check-mode probe");\n')
    try:
        with pytest.raises(BuildError, match=r"(?s)fp32_256_12\.cpp.*check-mode probe"):
            build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    finally:
        tpl.write_text(original)

    # Switching to a DPC++ compiler changes the build key: the same build directory now builds a plugin.
    monkeypatch.setattr(toolchains, "dpcpp", real_dpcpp)
    _fake_dpcpp(tmp_path, monkeypatch)
    logs.clear()
    r = build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert not r.up_to_date and set(r.built) == {"sycl"} and not r.checked_only, logs


def test_sycl_with_dpcpp_compiles_with_fsycl_and_links_a_plugin(tmp_path, data_env, monkeypatch, fresh_toolchains):
    """With a DPC++ compiler (a recording stand-in here) each source is compiled with -fsycl and DPC++ links the
    plugin with the flags every plugin gets (only strata_plugin_entry exported, no static symbol table)."""
    bin_dir = _fake_dpcpp(tmp_path, monkeypatch)
    tc = toolchains.sycl()
    assert (tc.extra.get("mode"), tc.path, tc.version) == ("plugin", str(bin_dir / "icpx"), "2025.0.4")
    logs = []
    r = build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert r.built == {"sycl": tmp_path / "p" / "libstrata_sycl.so"} and not r.checked_only, logs
    assert not any("checked against" in l for l in logs), logs

    calls = (bin_dir / "calls.log").read_text().splitlines()
    compiles = [c.split() for c in calls if " -c " in f" {c} "]
    links = [c.split() for c in calls if "-shared" in c.split()]
    pairs = targets.all_targets()["sycl"].geometries
    sources = sorted([f"fp32_{g.head_dim}_{g.group}.cpp" for g in pairs] + ["plugin.cpp"])  # one per shipped pair
    assert sorted(Path(c[-3]).name for c in compiles) == sources, calls
    for c in compiles:
        assert {"-fsycl", "-fPIC", "-O3", "-std=c++17", "-ffp-contract=off", "-c"} <= set(c), c
        assert any(a.startswith("-I") and a.endswith("/include") for a in c), c
    assert len(links) == 1, calls
    link = links[0]
    assert "-fsycl" in link and link[link.index("-o") + 1].endswith("/plugins/libstrata_sycl.so")
    assert sorted(Path(a).name for a in link if a.endswith(".o")) == [f"sycl_{s}.o" for s in sources]
    assert {"-Wl,--strip-all", "-Wl,--exclude-libs,ALL", "-Wl,-z,noexecstack"} <= set(link), link
    assert any(a.startswith("-Wl,--version-script=") for a in link), link
    ninja = (tmp_path / "b" / "cmake" / "build.ninja").read_text()
    assert "-fsycl" in ninja and "libstrata_sycl.so" in ninja

    logs.clear()
    r = build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=logs.append)
    assert r.up_to_date and r.built == {"sycl": tmp_path / "p" / "libstrata_sycl.so"}, logs
