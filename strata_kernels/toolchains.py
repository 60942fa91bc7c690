"""Find the compilers a target needs, their versions, and whether a target's toolkit floors are met."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .targets import Target

# Backends the generated CMake project can build into plugins today. The others are rendered and
# compile-checked by their own tests until their build lands.
BUILDABLE_BACKENDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Toolchain:
    name: str
    path: str | None
    version: str | None
    reason: str = ""              # why it is unavailable ("" when available)
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def available(self) -> bool:
        return self.path is not None and not self.reason

    def as_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "path": self.path}


def _run_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _version_tuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:2]) or (0,)


@lru_cache(maxsize=None)
def host_cxx() -> Toolchain:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        return Toolchain("host-cxx", None, None, "no C++ compiler found (set CXX or install g++)")
    out = _run_version([cxx, "--version"])
    m = re.search(r"(\d+\.\d+(\.\d+)?)", out)
    first = out.splitlines()[0] if out else cxx
    name = "clang++" if "clang" in first else "g++" if ("g++" in first or "GCC" in first or "gcc" in first) else "c++"
    return Toolchain("host-cxx", cxx, m.group(1) if m else None, extra={"compiler": name})


@lru_cache(maxsize=None)
def nvcc() -> Toolchain:
    candidates = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "bin" / "nvcc")
    w = shutil.which("nvcc")
    if w:
        candidates.append(Path(w))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            out = _run_version([str(c), "--version"])
            m = re.search(r"release (\d+\.\d+)", out)
            return Toolchain("nvcc", str(c), m.group(1) if m else None)
    return Toolchain("nvcc", None, None, "no nvcc found (set CUDA_HOME or put nvcc on PATH)")


@lru_cache(maxsize=None)
def hip_clang() -> Toolchain:
    rocm = os.environ.get("ROCM_PATH")
    cands = [Path(rocm) / "llvm" / "bin" / "clang++"] if rocm else []
    for n in ("clang++-19", "clang-19", "clang++"):
        w = shutil.which(n)
        if w:
            cands.append(Path(w))
    for c in cands:
        if c.is_file():
            out = _run_version([str(c), "--version"])
            m = re.search(r"clang version (\d+\.\d+)", out)
            return Toolchain("hip-clang", str(c), m.group(1) if m else None, extra={"rocm": rocm})
    return Toolchain("hip-clang", None, None, "no HIP-capable clang found (install clang-19 + libamdhip64-dev, "
                     "or ROCm and set ROCM_PATH)")


@lru_cache(maxsize=None)
def sycl() -> Toolchain:
    for n in ("icpx", "clang++"):
        w = shutil.which(n)
        if w:
            out = _run_version([w, "-fsycl", "--version"])
            if "oneAPI" in out or "DPC++" in out or "intel" in out.lower():
                m = re.search(r"(\d+\.\d+(\.\d+)?)", out)
                return Toolchain("sycl", w, m.group(1) if m else None)
    return Toolchain("sycl", None, None, "no SYCL compiler found (install Intel oneAPI DPC++: icpx -fsycl)")


# Looked up by name at call time (tests replace a finder to simulate a missing toolchain).
_FINDERS = {"host-cxx": "host_cxx", "nvcc": "nvcc", "hip-clang": "hip_clang", "sycl": "sycl"}


def for_target(target: Target) -> Toolchain:
    """The toolchain for ``target`` with its floors checked; ``reason`` says why it cannot build the target."""
    tc = globals()[_FINDERS[target.backend.toolchain]]()
    if not tc.available:
        return tc
    if target.backend.name not in BUILDABLE_BACKENDS:
        return Toolchain(tc.name, tc.path, tc.version,
                         f"plugin builds for the {target.backend.name} backend are not part of this version "
                         f"(its generated sources are compile-checked by tests/toolchain)")
    v = _version_tuple(tc.version)
    if target.toolkit_min and v < _version_tuple(target.toolkit_min):
        return Toolchain(tc.name, tc.path, tc.version,
                         f"{target.name} needs {tc.name} >= {target.toolkit_min}, found {tc.version} at {tc.path}")
    if target.toolkit_max and v > _version_tuple(target.toolkit_max):
        extra = " (CUDA 13 dropped Volta; point CUDA_HOME at a 12.x toolkit)" if target.backend.name == "cuda" else ""
        return Toolchain(tc.name, tc.path, tc.version,
                         f"{target.name} needs {tc.name} <= {target.toolkit_max}, found {tc.version} at {tc.path}"
                         + extra)
    return tc


def clear_cache() -> None:
    for name in _FINDERS.values():
        globals()[name].cache_clear()
