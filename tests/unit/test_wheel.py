"""Plugin-wheel packaging without a compiler: families from the tables, reproducible zip writing, the toolkit
rule of the family names, and the ELF reader behind the manylinux tag."""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from strata_kernels import cli, toolchains, wheel
from strata_kernels.errors import TargetError


def test_families_come_from_the_tables():
    assert wheel.families() == ["cuda12", "cuda13", "rocm", "sycl"]
    names = lambda f: [t.name for t in wheel.family_targets(f)]  # noqa: E731
    assert names("cuda13") == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120"]
    assert names("cuda12") == ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
    assert names("rocm") == ["gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201"]
    assert names("sycl") == ["sycl"]


def test_unknown_family_and_outside_targets_are_named(tmp_path):
    with pytest.raises(TargetError, match="unknown family 'cuda11'.*cuda12, cuda13, rocm, sycl"):
        wheel.family_targets("cuda11")
    with pytest.raises(TargetError, match="pip wheel"):
        wheel.family_targets("core")
    with pytest.raises(TargetError, match="sm_70 not in family cuda13"):
        wheel.build_family_wheel("cuda13", tmp_path, targets="sm_70;sm_89", log=lambda m: None)


def _fake_nvcc(monkeypatch, version: str):
    tc = toolchains.Toolchain("nvcc", "/opt/fake/bin/nvcc", version)
    monkeypatch.setattr(toolchains, "nvcc", lambda: tc)


def test_cuda_family_needs_its_toolkit_major(monkeypatch, tmp_path, capsys):
    _fake_nvcc(monkeypatch, "13.0")
    no_pypi = toolchains.Toolchain("cuda12-driver", None, None, "the PyPI CUDA 12.9 packages ... are not installed")
    monkeypatch.setattr(toolchains, "cuda12_driver", lambda: no_pypi)
    members = wheel.family_targets("cuda12")
    tc = wheel.family_toolchain("cuda12", members)
    assert not tc.available and "CUDA 12.x nvcc" in tc.reason and "13.0" in tc.reason and "PyPI" in tc.reason
    assert wheel.family_toolchain("cuda13", wheel.family_targets("cuda13")).available
    # The family says so and builds nothing; the CLI exits non-zero with the reason.
    res = wheel.build_family_wheel("cuda12", tmp_path / "dist", log=lambda m: None)
    assert res.wheel is None and "CUDA 12.x" in res.skipped
    assert not (tmp_path / "dist").exists()
    assert cli.main(["wheel", "--family", "cuda12", "--out", str(tmp_path / "dist")]) == 3
    assert "no wheel for family cuda12" in capsys.readouterr().err
    _fake_nvcc(monkeypatch, "12.4")
    assert wheel.family_toolchain("cuda12", members).name == "nvcc"
    # Beside CUDA 13, PyPI's CUDA 12.9 (clang + ptxas, driver-API launch) builds the family, sm_70 included.
    _fake_nvcc(monkeypatch, "13.0")
    pypi = toolchains.Toolchain("cuda12-driver", "/usr/bin/clang++", "12.9", extra={"root": str(tmp_path)})
    monkeypatch.setattr(toolchains, "cuda12_driver", lambda: pypi)
    assert wheel.family_toolchain("cuda12", members) == pypi
    assert toolchains.for_target(members[0]) == pypi and members[0].name == "sm_70"
    assert toolchains.for_target(wheel.family_targets("cuda13")[0]).name == "nvcc"


def test_sycl_family_without_a_plugin_build_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(toolchains, "sycl", lambda: toolchains.Toolchain("sycl", None, None, "no SYCL compiler"))
    res = wheel.build_family_wheel("sycl", tmp_path, log=lambda m: None)
    assert res.wheel is None and "SYCL" in res.skipped
    # headers but no DPC++: the sources could be checked, but there is no plugin to package
    monkeypatch.setattr(toolchains, "sycl", lambda: toolchains.Toolchain(
        "sycl", "/usr/bin/clang++", "9.0", extra={"mode": "check", "why": toolchains.NO_DPCPP}))
    res = wheel.build_family_wheel("sycl", tmp_path, log=lambda m: None)
    assert res.wheel is None and "needs a SYCL plugin" in res.skipped and "DPC++" in res.skipped


def _files() -> dict[str, bytes]:
    return {"pkg_x/__init__.py": b"", "pkg_x/libstrata_a.so": b"\x7fELF-ish",
            "pkg_x-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: py3-none-any\n",
            "pkg_x-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg-x\nVersion: 1.0\n"}


def test_write_wheel_is_byte_reproducible_and_valid(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    a, b = tmp_path / "a.whl", tmp_path / "b.whl"
    files = _files()
    wheel.write_wheel(a, files, executable={"pkg_x/libstrata_a.so"})
    wheel.write_wheel(b, dict(reversed(list(files.items()))), executable={"pkg_x/libstrata_a.so"})
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as z:
        names = z.namelist()
        assert names[-1] == "pkg_x-1.0.dist-info/RECORD" and names[:-1] == sorted(names[:-1])
        for info in z.infolist():
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            mode = info.external_attr >> 16
            assert mode == (0o100755 if info.filename.endswith(".so") else 0o100644)
        record = z.read("pkg_x-1.0.dist-info/RECORD").decode().splitlines()
        for line in record[:-1]:
            name, digest, size = line.split(",")
            data = z.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    wheel.write_wheel(b, files)
    with zipfile.ZipFile(b) as z:
        assert z.infolist()[0].date_time == (2023, 11, 14, 22, 13, 20)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(ValueError, match="SOURCE_DATE_EPOCH"):
        wheel.write_wheel(b, files)


def test_elf_reader_matches_the_python_extension():
    # The interpreter's own extension modules are ELF64 shared objects that reference GLIBC symbol versions.
    import _ctypes
    so = Path(_ctypes.__file__)
    facts = wheel.elf_facts(so)
    assert "libc.so.6" in facts["needed"] or facts["versions"]
    assert facts["versions"].get("GLIBC", "2.0") >= "2"
    tag = wheel.manylinux_tag([so], "x86_64")
    assert tag.startswith("manylinux_2_") and tag.endswith("_x86_64")
    with pytest.raises(Exception, match="not a 64-bit"):
        wheel.elf_facts(Path(__file__))
