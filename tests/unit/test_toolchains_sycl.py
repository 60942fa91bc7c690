"""How the sycl target is built, decided without any compiler: a DPC++ compiler gives a plugin ('plugin'); without
one, the SYCL headers and a host C++ compiler give a header check ('check'); with neither the target is skipped (an
error when named). The finders are replaced, so these run anywhere."""
from pathlib import Path

import pytest

from strata_kernels import build, codegen, targets, toolchains
from strata_kernels.errors import ToolchainError

SYCL = targets.all_targets()["sycl"]
HEADERS = toolchains.SyclHeaders(Path("/opt/sycl-rt/include"), "intel-sycl-rt 2026.2.0", "9.0.0 (20260930)")
ICPX = toolchains.Toolchain("dpcpp", "/opt/intel/bin/icpx", "2025.0.4")
NO_DPCPP = toolchains.Toolchain("dpcpp", None, None, toolchains.NO_DPCPP)


@pytest.fixture()
def finders(monkeypatch):
    """Set what the SYCL finders see: finders(dpcpp=..., headers=..., hosts=...)."""
    def set_(dpcpp=NO_DPCPP, headers=HEADERS, hosts=(("clang", "/usr/bin/clang++-19"), ("gcc", "/usr/bin/g++"))):
        monkeypatch.setattr(toolchains, "dpcpp", lambda: dpcpp)
        found = (headers, "") if headers else (None, "no SYCL headers: pip install intel-sycl-rt")
        monkeypatch.setattr(toolchains, "find_sycl_headers", lambda: found)
        monkeypatch.setattr(toolchains, "host_compilers", lambda: tuple(hosts))
        toolchains.sycl.cache_clear()
        return toolchains.sycl()
    yield set_
    toolchains.sycl.cache_clear()


def test_dpcpp_builds_a_plugin(finders):
    tc = finders(dpcpp=ICPX)
    assert tc.available and (tc.name, tc.path, tc.extra["mode"]) == ("dpcpp", ICPX.path, "plugin")
    assert toolchains.sycl_build_mode(tc) == ("plugin", "")
    flags = toolchains.sycl_flags(tc, "plugin")
    assert {"-fsycl", "-fPIC", "-O3", "-std=c++17", "-ffp-contract=off", "-c"} <= set(flags)
    assert toolchains.for_target(SYCL) is tc
    assert "plugin: DPC++ 2025.0.4 at /opt/intel/bin/icpx" == toolchains.describe_sycl(tc)


def test_without_dpcpp_the_headers_and_clang_check_the_sources(finders):
    tc = finders()
    assert tc.available and tc.extra["mode"] == "check" and tc.path == "/usr/bin/clang++-19"
    assert toolchains.sycl_build_mode(tc) == ("check", toolchains.NO_DPCPP)
    flags = toolchains.sycl_flags(tc, "check")
    assert flags[-1] == "-fsyntax-only" and "-fsycl" not in flags
    assert flags[flags.index("-isystem") + 1] == str(HEADERS.include) and "-Wno-unknown-attributes" in flags
    assert toolchains.for_target(SYCL).available  # no DPC++ floors apply to a header check
    line = toolchains.describe_sycl(tc)
    assert line.startswith("check only: the SYCL headers of intel-sycl-rt 2026.2.0") and "no DPC++ compiler" in line


def test_gcc_checks_when_there_is_no_clang(finders):
    tc = finders(hosts=[("gcc", "/usr/bin/g++")])
    assert tc.path == "/usr/bin/g++" and "-Wno-attributes" in toolchains.sycl_flags(tc, "check")


@pytest.mark.parametrize("headers, hosts, says", [
    (None, [("clang", "/usr/bin/clang++-19")], "pip install intel-sycl-rt"),
    (HEADERS, [], "no host C++ compiler"),
])
def test_neither_skips_with_one_reason_or_fails_when_named(finders, headers, hosts, says, tmp_path):
    tc = finders(headers=headers, hosts=hosts)
    assert not tc.available and toolchains.NO_DPCPP in tc.reason and says in tc.reason
    assert not toolchains.for_target(SYCL).available
    with pytest.raises(ToolchainError, match="target sycl was asked for but cannot be built: no DPC"):
        build.build("sycl", build_dir=tmp_path / "b", install_dir=tmp_path / "p", log=lambda m: None)
    assert "not available: " in toolchains.describe_sycl(tc)


def test_the_build_key_and_the_cmake_project_follow_the_mode(finders, tmp_path):
    """Switching between plugin and check (or to other headers) changes the key, so the next build redoes it."""
    plugin = (finders(dpcpp=ICPX), codegen.sycl_cmake_info(SYCL))
    check = (finders(), codegen.sycl_cmake_info(SYCL))
    newer = toolchains.SyclHeaders(HEADERS.include, "intel-sycl-rt 2026.3.0", "9.1.0 (20261130)")
    other = (finders(headers=newer), codegen.sycl_cmake_info(SYCL))
    sel = [targets.Selection(SYCL, False)]
    keys = {build._key(sel, {"sycl": tc}, {"sycl": {"sycl": info}}, codegen.templates_dir())
            for tc, info in (plugin, check, other)}
    assert len(keys) == 3

    rendered = [codegen.render_target(sel[0], tmp_path)]
    text = codegen.render_cmake(rendered, tmp_path, sycl={"sycl": plugin[1]}).read_text()
    assert '"/opt/intel/bin/icpx" "-fsycl"' in text and "${STRATA_LINK_FLAGS}" in text
    assert '-o "${STRATA_PLUGIN_sycl}"' in text and "add_custom_target(strata_sycl ALL" in text
    text = codegen.render_cmake(rendered, tmp_path, sycl={"sycl": check[1]}).read_text()
    assert '"/usr/bin/clang++-19"' in text and '"-fsyntax-only"' in text and "-fsycl" not in text
    assert "STRATA_PLUGIN_sycl" not in text and "sycl-check/sycl/sycl_plugin.cpp.ok" in text


@pytest.mark.parametrize("banner, is_dpcpp", [
    ("Intel(R) oneAPI DPC++/C++ Compiler 2025.0.4 (2025.0.4.20241205)", True),
    ("clang version 19.0.0git (https://github.com/intel/llvm 1a2b3c)", True),
    ("Debian clang version 19.1.7 (3)\nTarget: x86_64-pc-linux-gnu", False),
    ("g++ (Debian 12.2.0-14) 12.2.0", False),
])
def test_a_dpcpp_is_told_by_its_banner(banner, is_dpcpp):
    assert toolchains._is_dpcpp(banner) is is_dpcpp


def _script(path: Path, banner: str) -> Path:
    path.write_text(f"#!/bin/sh\necho '{banner}'\n")
    path.chmod(0o755)
    return path


def test_dpcpp_is_found_on_path_and_through_sycl_cxx(tmp_path, monkeypatch):
    if Path("/opt/intel/oneapi/compiler/latest/bin/icpx").exists():
        pytest.skip("a oneAPI install is here; the finder would take it first")
    for var in ("SYCL_CXX", "CMPLR_ROOT"):
        monkeypatch.delenv(var, raising=False)
    _script(tmp_path / "clang++", "Debian clang version 19.1.7 (3)")
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        toolchains.dpcpp.cache_clear()
        assert toolchains.dpcpp().reason == toolchains.NO_DPCPP  # a plain clang++ is no DPC++
        _script(tmp_path / "icpx", "Intel(R) oneAPI DPC++/C++ Compiler 2025.1.0 (2025.1.0.20250317)")
        toolchains.dpcpp.cache_clear()
        tc = toolchains.dpcpp()
        assert (tc.path, tc.version) == (str(tmp_path / "icpx"), "2025.1.0")
        monkeypatch.setenv("SYCL_CXX", str(tmp_path / "missing-icpx"))
        toolchains.dpcpp.cache_clear()
        assert "SYCL_CXX=" in toolchains.dpcpp().reason and "does not run" in toolchains.dpcpp().reason
    finally:  # monkeypatch restores PATH afterwards; the next call finds again
        toolchains.dpcpp.cache_clear()


def test_sycl_include_dir_names_the_headers(tmp_path, monkeypatch):
    (tmp_path / "include" / "sycl").mkdir(parents=True)
    (tmp_path / "include" / "sycl" / "sycl.hpp").write_text("")
    (tmp_path / "include" / "sycl" / "version.hpp").write_text(
        "#define __LIBSYCL_MAJOR_VERSION 9\n#define __LIBSYCL_MINOR_VERSION 0\n#define __LIBSYCL_PATCH_VERSION 0\n"
        "#define __SYCL_COMPILER_VERSION 20260930\n")
    monkeypatch.setenv("SYCL_INCLUDE_DIR", str(tmp_path / "include"))
    try:
        toolchains.find_sycl_headers.cache_clear()
        h, _ = toolchains.find_sycl_headers()
        assert (h.include, h.origin, h.version, h.lib) == (tmp_path / "include", "$SYCL_INCLUDE_DIR",
                                                           "9.0.0 (20260930)", None)
        monkeypatch.setenv("SYCL_INCLUDE_DIR", str(tmp_path))
        toolchains.find_sycl_headers.cache_clear()
        h, why = toolchains.find_sycl_headers()
        assert h is None and "has no sycl/sycl.hpp" in why
    finally:
        toolchains.find_sycl_headers.cache_clear()
