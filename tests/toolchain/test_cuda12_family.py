"""The cuda12 family from PyPI's CUDA 12.9 (issue 13 part 2): `wheel --family cuda12` builds real plugins, sm_70
included, without a CUDA 12 toolkit; their device code is SASS for the target (PTX only beside it where the table
asks); they depend on no CUDA library at link time and load on a machine without a GPU, where they say why they
cannot run. CI builds sm_70 and sm_80 (+ compute_80 PTX) here at (256, 12); the whole family is `strata-kernels
wheel --family cuda12`, and ci/gpu_cuda12.sh runs the sm_90 plugin's parity on the H200."""
from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest

from strata_kernels import __version__, devcode, toolchains, wheel
from strata_kernels.resolve import read_manifest

sys.path.insert(0, str(Path(__file__).parent))
from nvrtc import cubin_arch  # noqa: E402

pytestmark = pytest.mark.toolchain

TARGETS = ("sm_70", "sm_80")


@pytest.fixture(scope="module")
def cuda12(tmp_path_factory):
    tc = toolchains.for_target(wheel.family_targets("cuda12")[0], "cuda12")
    if not tc.available:
        pytest.skip(f"no cuda12 toolchain here: {tc.reason}")
    if tc.name != "cuda12-driver":
        pytest.skip(f"a CUDA 12.x nvcc builds the family here ({tc.path}); this test is about the PyPI toolchain")
    lines: list[str] = []
    # One geometry, the engine's (256, 12): what is checked here (SASS of the target per kernel source, PTX where the
    # table asks, the links, the load) does not change with the geometry, and all 8 prebuilt pairs would compile 72
    # sources instead of 9 on the 2-core CI machine. `strata-kernels wheel --family cuda12` builds every pair.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STRATA_ONLY_GEOMETRIES", "256x12")
        res = wheel.build_family_wheel("cuda12", tmp_path_factory.mktemp("cuda12") / "dist",
                                       targets=";".join(TARGETS), build_dir=tmp_path_factory.mktemp("cuda12-build"),
                                       jobs=os.cpu_count(), log=lines.append)
    assert res.wheel is not None, "\n".join(lines[-30:])
    out = tmp_path_factory.mktemp("cuda12-plugins")
    with zipfile.ZipFile(res.wheel) as z:
        for t in TARGETS:
            (out / f"libstrata_{t}.so").write_bytes(z.read(f"strata_kernels_cuda12/libstrata_{t}.so"))
    return res, out


def _section(path: Path, name: str) -> bytes:
    """The bytes of one ELF64 section."""
    import struct
    data = path.read_bytes()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    for s in secs:
        if data[strtab + s[0]:data.index(b"\0", strtab + s[0])].decode() == name:
            return data[s[4]:s[4] + s[5]]
    raise AssertionError(f"{path.name} has no {name} section")


def _containers(so: Path) -> list[list[tuple[int, int, bytes]]]:
    blob = _section(so, ".nv_fatbin")
    return [devcode.unpack(blob[m.start():]) for m in re.finditer(re.escape(devcode.MAGIC), blob)]


def test_the_wheel_holds_a_volta_plugin_built_by_pypi_cuda_12_9(cuda12):
    res, _ = cuda12
    assert res.wheel.name.startswith(f"strata_kernels_cuda12-{__version__}-py3-none-manylinux_2_")
    with zipfile.ZipFile(res.wheel) as z:
        assert "[strata_kernels.plugins]\ncuda12 = strata_kernels_cuda12\n" in z.read(
            f"strata_kernels_cuda12-{__version__}.dist-info/entry_points.txt").decode()
        for t in TARGETS:
            m = json.loads(z.read(f"strata_kernels_cuda12/manifests/{t}.json"))
            assert m["sass"] == [t] and m["toolchain"]["name"] == "cuda12-driver", m
            assert m["toolchain"]["version"].startswith("12.") and m["min_driver_version"] == 12000, m
        assert json.loads(z.read("strata_kernels_cuda12/manifests/sm_70.json"))["variants"] == ["fp32", "v70"]
        sm_80 = json.loads(z.read("strata_kernels_cuda12/manifests/sm_80.json"))
        assert sm_80["ptx"] == ["compute_80"] and sm_80["geometries"] == [{"head_dim": 256, "group": 12}]
        assert {"v2", "split", "grouped"} <= set(sm_80["variants"])   # every variant of the table
    assert sum(r["plugin_bytes"] for r in res.sizes.values()) / 1e6 <= wheel.FAMILY_BUDGET_MB["cuda12"]


def test_device_code_is_sass_of_the_target_and_ptx_only_where_asked(cuda12):
    _, plugins = cuda12
    for t in TARGETS:
        sm = int(t[3:])
        containers = _containers(plugins / f"libstrata_{t}.so")
        manifest = read_manifest(plugins / f"libstrata_{t}.so")
        sources = len(manifest["variants"]) * len(manifest["geometries"])  # one per (variant, geometry)
        assert len(containers) == sources, f"{t}: one device-code container per kernel source"
        for entries in containers:
            cubins = [d for kind, s, d in entries if kind == devcode.CUBIN]
            assert len(cubins) == 1 and cubin_arch(cubins[0]) == sm, f"{t}: the cubin is not sm_{sm} SASS"
            assert re.search(rb"\.text\.[A-Za-z0-9_]+", cubins[0]), f"{t}: no kernel in the cubin"
            ptx = [d for kind, s, d in entries if kind == devcode.PTX]
            if t == "sm_80":
                assert len(ptx) == 1 and b".target sm_80" in ptx[0]
            else:
                assert not ptx


def test_plugins_link_no_cuda_library_and_export_only_the_entry(cuda12):
    _, plugins = cuda12
    for t in TARGETS:
        facts = wheel.elf_facts(plugins / f"libstrata_{t}.so")
        assert not [n for n in facts["needed"] if "cuda" in n or "nvrtc" in n], facts["needed"]
        dynstr = _section(plugins / f"libstrata_{t}.so", ".dynstr")
        assert b"strata_plugin_entry" in dynstr and b"cudaLaunchKernel" not in dynstr and b"cuInit" not in dynstr


def test_a_plugin_loads_without_a_gpu_and_says_there_is_no_driver(cuda12):
    _, plugins = cuda12
    import ctypes
    from strata_kernels import _loader
    info = _loader.load(str(plugins / "libstrata_sm_70.so")).probe(1, 0)   # kind 1: CUDA device 0
    try:
        ctypes.CDLL("libcuda.so.1")
        has_driver = True
    except OSError:
        has_driver = False
    if has_driver:
        assert info["status"] != 0 or info["arch"].startswith("sm_"), info
    else:
        assert info["status"] == 3, info    # STRATA_UNSUPPORTED
        assert "no usable CUDA driver" in info["error"] and "libcuda.so.1" in info["error"], info
        assert "CUDA 12.0 or newer" in info["error"], info
