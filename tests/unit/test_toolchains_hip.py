"""Whether a HIP target builds a plugin or only ISA, decided without a real compiler: a stand-in clang answers the
driver's questions and finds its helper programs only where they are, so a machine without clang-offload-bundler
(Debian's clang-tools-19) compiles ISA and says why in one sentence instead of failing in the middle of the build."""
from pathlib import Path

import pytest

from strata_kernels import codegen, targets, toolchains

GFX1030 = targets.all_targets()["gfx1030"]

# Answers like clang++-19 with the AMDGPU backend; -print-prog-name=X prints the path of X beside this script when
# it is there, else the bare name, as clang's driver does when its lookup finds nothing.
FAKE_CLANG = """#!/bin/sh
here=$(dirname "$0")
case "$1" in
  --version) echo "Debian clang version 19.1.7 (3~deb12u1)";;
  -print-targets) echo "    amdgcn      - AMD GCN GPUs";;
  -print-resource-dir) echo "$here/../lib/clang/19";;
  -print-prog-name=*) tool=${1#-print-prog-name=}; if [ -x "$here/$tool" ]; then echo "$here/$tool"; else echo "$tool"; fi;;
  *) exit 1;;
esac
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture()
def rocm(tmp_path, monkeypatch):
    """A ROCm-like tree with clang, its helper programs, the HIP headers, the runtime and gfx1030's device libraries;
    returns its bin/ so a test can take a helper away. hip_clang() sees only this tree."""
    root = tmp_path / "rocm"
    bin_dir = root / "llvm" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "clang++", FAKE_CLANG)
    for tool in toolchains.HIP_PLUGIN_TOOLS:
        _executable(bin_dir / tool, "#!/bin/sh\nexit 0\n")
    (root / "include" / "hip").mkdir(parents=True)
    (root / "include" / "hip" / "hip_runtime.h").write_text("")
    (root / "lib").mkdir()
    (root / "lib" / "libamdhip64.so").write_text("")
    libs = root / "amdgcn" / "bitcode"
    libs.mkdir(parents=True)
    for name in ("ocml.bc", "ockl.bc", "oclc_isa_version_1030.bc"):
        (libs / name).write_text("")
    monkeypatch.setenv("ROCM_PATH", str(root))
    monkeypatch.setenv("HIP_CLANG", str(bin_dir / "clang++"))
    for var in ("HIP_PATH", "HIP_DEVICE_LIB_PATH"):
        monkeypatch.delenv(var, raising=False)
    toolchains.hip_clang.cache_clear()
    yield bin_dir
    toolchains.hip_clang.cache_clear()


def test_with_every_helper_gfx1030_builds_a_plugin(rocm):
    tc = toolchains.hip_clang()
    assert tc.available and tc.path == str(rocm / "clang++") and tc.version == "19.1"
    assert tc.extra["plugin_tools"] == {tool: str(rocm / tool) for tool in toolchains.HIP_PLUGIN_TOOLS}
    assert toolchains.hip_build_mode(tc, "gfx1030") == ("plugin", "")
    info = codegen.hip_cmake_info(GFX1030)
    assert info["mode"] == "plugin" and "-c" in info["flags"]


def test_without_the_bundler_gfx1030_is_isa_only_and_says_which_package(rocm):
    (rocm / "clang-offload-bundler").unlink()
    tc = toolchains.hip_clang()
    assert tc.available, "the ISA pass needs no bundler: the toolchain still compiles HIP"
    assert tc.extra["plugin_tools"]["clang-offload-bundler"] is None
    sentence = ("HIP plugin link needs clang-offload-bundler (Debian: clang-tools-19); "
                "device code compiled to ISA only")
    assert toolchains.hip_build_mode(tc, "gfx1030") == ("isa", sentence)
    assert toolchains.for_target(GFX1030).available
    info = codegen.hip_cmake_info(GFX1030)
    assert (info["mode"], info["why"]) == ("isa", sentence)
    assert "--offload-device-only" in info["flags"] and "-c" not in info["flags"]


def test_every_missing_helper_is_named(rocm):
    for tool in toolchains.HIP_PLUGIN_TOOLS:
        (rocm / tool).unlink()
    mode, why = toolchains.hip_build_mode(toolchains.hip_clang(), "gfx1030")
    assert mode == "isa"
    assert why.startswith("HIP plugin link needs ld.lld (Debian: lld-19) and clang-offload-bundler "
                          "(Debian: clang-tools-19);"), why


def test_a_rocm_wheel_of_isa_only_targets_is_refused_before_compiling(rocm, tmp_path, monkeypatch):
    """gfx11/gfx12 without their device libraries: the family wheel says so at once, not after compiling their ISA
    at every prebuilt geometry (minutes on the 2-core CI machine) to throw it away."""
    from strata_kernels import build, wheel
    from strata_kernels.errors import BuildError

    def no_build(*a, **k):
        raise AssertionError("the wheel compiled before refusing")
    monkeypatch.setattr(build, "build", no_build)
    with pytest.raises(BuildError, match=r"gfx1100, gfx1101, gfx1200, gfx1201 could only be compiled to ISA here.*"
                                         r"loadable plugins only.*--targets"):
        wheel.build_family_wheel("rocm", tmp_path / "dist", log=lambda m: None)
    assert not (tmp_path / "dist").exists()
