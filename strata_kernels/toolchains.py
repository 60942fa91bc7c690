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
BUILDABLE_BACKENDS = ("cpu", "cuda", "hip")


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


def cuda_flags(tc: Toolchain) -> list[str]:
    """nvcc flags every CUDA plugin gets: the smallest fatbin the toolkit can write. CUDA >= 13 (drivers >= 580)
    reads ``--compress-mode=size`` fatbins; older toolkits compress every entry with the classic algorithm."""
    return ["--compress-mode=size"] if _version_tuple(tc.version) >= (13, 0) else ["-Xfatbin=-compress-all"]


def _clang_version(text: str) -> tuple[int, int]:
    m = re.search(r"clang version (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


@lru_cache(maxsize=None)
def hip_clang() -> Toolchain:
    """A clang >= 18 with the AMDGPU backend, the HIP headers, and (if any) the ROCm device libraries.

    extra: hip_root (has include/hip/hip_runtime.h), hip_version, device_libs (directory of ocml.bc, ockl.bc and
    oclc_isa_version_<N>.bc, or None), libamdhip64 (the runtime to link a plugin against, or None).
    """
    rocm = [Path(p) for p in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm") if p]
    names = [os.environ.get("HIP_CLANG")] + [str(r / "llvm" / "bin" / "clang++") for r in rocm] + [
        "clang++-19", "clang++-20", "clang++-18", "clang++"]
    clang, version, seen = None, (0, 0), []
    for n in filter(None, names):
        path = shutil.which(n) or (n if Path(n).is_file() else None)
        if not path:
            continue
        version = _clang_version(_run_version([path, "--version"]))
        seen.append(f"{path} ({version[0]}.{version[1]})")
        if version >= (18, 0) and "amdgcn" in _run_version([path, "-print-targets"]):
            clang = path
            break
    if clang is None:
        found = f"; found {', '.join(seen)}" if seen else ""
        return Toolchain("hip-clang", None, None, "no clang >= 18 with the AMDGPU backend" + found +
                         " (apt-get install clang-19 lld-19 libamdhip64-dev, or ROCm with ROCM_PATH)")
    roots = rocm + [Path("/usr")]
    hip_root = next((r for r in roots if (r / "include" / "hip" / "hip_runtime.h").is_file()), None)
    if hip_root is None:
        return Toolchain("hip-clang", clang, f"{version[0]}.{version[1]}",
                         f"no HIP headers (hip/hip_runtime.h) under {', '.join(map(str, roots))} "
                         "(apt-get install libamdhip64-dev, or set ROCM_PATH)")
    hv = hip_root / "include" / "hip" / "hip_version.h"
    hv_text = hv.read_text(errors="replace") if hv.is_file() else ""
    hip_version = ".".join(re.findall(r"#define HIP_VERSION_(?:MAJOR|MINOR) (\d+)", hv_text)) or "unknown"
    resource = _run_version([clang, "-print-resource-dir"]).strip()
    lib_dirs = [Path(os.environ["HIP_DEVICE_LIB_PATH"])] if os.environ.get("HIP_DEVICE_LIB_PATH") else []
    lib_dirs += [r / "amdgcn" / "bitcode" for r in roots]
    lib_dirs += sorted((hip_root / "lib").glob("*/amdgcn/bitcode"))  # Debian: /usr/lib/<multiarch>/amdgcn/bitcode
    if resource:
        lib_dirs.append(Path(resource) / "lib" / "amdgcn" / "bitcode")  # ROCm 6.2+: beside clang
    device_libs = next((d for d in lib_dirs if (d / "ocml.bc").is_file() and (d / "ockl.bc").is_file()), None)
    runtime = next((p for d in [hip_root / "lib", *sorted((hip_root / "lib").glob("*-linux-gnu"))]
                    for p in [d / "libamdhip64.so"] if p.is_file()), None)
    return Toolchain("hip-clang", clang, f"{version[0]}.{version[1]}", extra={
        "hip_root": str(hip_root), "hip_version": hip_version,
        "device_libs": str(device_libs) if device_libs else None,
        "libamdhip64": str(runtime) if runtime else None})


def hip_has_device_libs(tc: Toolchain, gfx: str) -> bool:
    """The ROCm device libraries cover ``gfx`` (clang refuses to link them otherwise)."""
    d = tc.extra.get("device_libs")
    return bool(d) and (Path(d) / f"oclc_isa_version_{gfx[3:]}.bc").is_file()


def hip_build_mode(tc: Toolchain, gfx: str) -> tuple[str, str]:
    """('plugin', '') when a loadable plugin can be built for gfx, else ('isa', why): device code to ISA only."""
    if not hip_has_device_libs(tc, gfx):
        where = tc.extra.get("device_libs") or "no device-library directory"
        return "isa", (f"no ROCm device libraries for {gfx} ({where}); its device code is compiled to ISA only "
                       f"(ROCm >= 6 provides them)")
    if not tc.extra.get("libamdhip64"):
        return "isa", "no libamdhip64.so to link a plugin against; device code compiled to ISA only"
    return "plugin", ""


def hip_flags(tc: Toolchain, gfx: str, mode: str) -> list[str]:
    """clang flags for one HIP source: an object with the code object embedded (plugin), or device ISA (isa)."""
    common = ["-x", "hip", f"--offload-arch={gfx}", "-std=c++17", "-fno-gpu-rdc", f"--hip-path={tc.extra['hip_root']}",
              "-O3", "-ffp-contract=off", "-fvisibility=hidden"]
    if mode == "plugin":
        return common + [f"--rocm-device-lib-path={tc.extra['device_libs']}", "-fPIC", "-c"]
    return common + ["-nogpulib", "--offload-device-only", "-S"]


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
