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

# Backends the generated CMake project can build. A backend outside it is rendered and compile-checked by its own
# tests until its build lands.
BUILDABLE_BACKENDS = ("cpu", "cuda", "hip", "sycl")


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


# The programs clang runs, besides itself, to compile a HIP source into a plugin object (-fno-gpu-rdc -c): lld links
# the device code object, clang-offload-bundler wraps it into the host object. The ISA-only pass runs neither.
# Value: the Debian package of clang <major> that ships the tool.
HIP_PLUGIN_TOOLS = {"ld.lld": "lld-{major}", "clang-offload-bundler": "clang-tools-{major}"}


def _clang_finds(clang: str, tool: str) -> str | None:
    """Where ``clang`` finds ``tool`` when it runs it: the driver's own lookup (-B dirs, beside the clang binary,
    then PATH), which answers the bare name when it finds nothing."""
    found = _run_version([clang, f"-print-prog-name={tool}"]).strip()
    return found if os.path.isabs(found) and os.access(found, os.X_OK) else None


def find_clang(names: list[str | None], backend: str) -> tuple[str | None, tuple[int, int], list[str]]:
    """The first of ``names`` that is a clang >= 18 with ``backend`` among its targets (amdgcn, nvptx64): its path,
    version and every clang looked at ("path (major.minor)")."""
    seen = []
    for n in filter(None, names):
        path = shutil.which(n) or (n if Path(n).is_file() else None)
        if not path:
            continue
        version = _clang_version(_run_version([path, "--version"]))
        seen.append(f"{path} ({version[0]}.{version[1]})")
        if version >= (18, 0) and backend in _run_version([path, "-print-targets"]):
            return path, version, seen
    return None, (0, 0), seen


@lru_cache(maxsize=None)
def hip_clang() -> Toolchain:
    """A clang >= 18 with the AMDGPU backend, the HIP headers, and (if any) the ROCm device libraries.

    extra: hip_root (has include/hip/hip_runtime.h), hip_version, device_libs (directory of ocml.bc, ockl.bc and
    oclc_isa_version_<N>.bc, or None), libamdhip64 (the runtime to link a plugin against, or None), plugin_tools
    (each tool of HIP_PLUGIN_TOOLS: where this clang finds it, or None).
    """
    rocm = [Path(p) for p in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm") if p]
    names = [os.environ.get("HIP_CLANG")] + [str(r / "llvm" / "bin" / "clang++") for r in rocm] + [
        "clang++-19", "clang++-20", "clang++-18", "clang++"]
    clang, version, seen = find_clang(names, "amdgcn")
    if clang is None:
        found = f"; found {', '.join(seen)}" if seen else ""
        return Toolchain("hip-clang", None, None, "no clang >= 18 with the AMDGPU backend" + found +
                         " (apt-get install clang-19 lld-19 clang-tools-19 libamdhip64-dev, or ROCm with ROCM_PATH)")
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
        "libamdhip64": str(runtime) if runtime else None,
        "plugin_tools": {name: _clang_finds(clang, name) for name in HIP_PLUGIN_TOOLS}})


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
    missing = [tool for tool, path in tc.extra.get("plugin_tools", {}).items() if not path]
    if missing:
        major = (tc.version or "?").split(".")[0]
        needs = " and ".join(f"{tool} (Debian: {HIP_PLUGIN_TOOLS[tool].format(major=major)})" for tool in missing)
        return "isa", f"HIP plugin link needs {needs}; device code compiled to ISA only"
    return "plugin", ""


def hip_flags(tc: Toolchain, gfx: str, mode: str) -> list[str]:
    """clang flags for one HIP source: an object with the code object embedded (plugin), or device ISA (isa)."""
    common = ["-x", "hip", f"--offload-arch={gfx}", "-std=c++17", "-fno-gpu-rdc", f"--hip-path={tc.extra['hip_root']}",
              "-O3", "-ffp-contract=off", "-fvisibility=hidden"]
    if mode == "plugin":
        return common + [f"--rocm-device-lib-path={tc.extra['device_libs']}", "-fPIC", "-c"]
    return common + ["-nogpulib", "--offload-device-only", "-S"]


# ------------------------------------------------------------------------------------------------ SYCL
# Two ways to build the sycl target: with a DPC++ compiler, a loadable plugin ('plugin'); without one, each generated
# source is compiled against the SYCL 2020 headers of the intel-sycl-rt wheel (or a oneAPI install) by a host C++
# compiler in syntax-only mode ('check'): the kernel lambdas are instantiated, so their bodies are type-checked, but
# no device code and no plugin result.

NO_DPCPP = "no DPC++ compiler (install Intel oneAPI DPC++: icpx -fsycl)"


def _is_dpcpp(version_text: str) -> bool:
    return any(w in version_text for w in ("oneAPI", "DPC++", "intel/llvm", "Intel(R)"))


@lru_cache(maxsize=None)
def dpcpp() -> Toolchain:
    """A DPC++ compiler: ``$SYCL_CXX``, ``$CMPLR_ROOT/bin/icpx``, ``icpx`` on PATH, oneAPI's default install, or a
    clang++ whose ``--version`` says Intel / oneAPI / DPC++ (an intel/llvm build)."""
    explicit = os.environ.get("SYCL_CXX")
    if explicit:
        path = shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
        out = _run_version([path, "--version"]) if path else ""
        if not out:
            return Toolchain("dpcpp", None, None, f"SYCL_CXX={explicit} does not run (point it at icpx)")
        m = re.search(r"(\d+\.\d+(\.\d+)?)", out)
        return Toolchain("dpcpp", path, m.group(1) if m else None)
    names = [str(Path(os.environ["CMPLR_ROOT"]) / "bin" / "icpx")] if os.environ.get("CMPLR_ROOT") else []
    names += ["icpx", "/opt/intel/oneapi/compiler/latest/bin/icpx", "clang++"]
    for n in names:
        path = shutil.which(n) or (n if Path(n).is_file() and os.access(n, os.X_OK) else None)
        if not path:
            continue
        out = _run_version([path, "--version"])
        if _is_dpcpp(out):
            m = re.search(r"(\d+\.\d+(\.\d+)?)", out)
            return Toolchain("dpcpp", path, m.group(1) if m else None)
    return Toolchain("dpcpp", None, None, NO_DPCPP)


@dataclass(frozen=True)
class SyclHeaders:
    include: Path                 # <include>/sycl/sycl.hpp
    origin: str                   # "intel-sycl-rt 2026.2.0", "$SYCL_INCLUDE_DIR", "oneAPI (/opt/intel/...)"
    version: str                  # libsycl version from sycl/version.hpp, e.g. "9.0.0 (20260930)"
    lib: Path | None = None       # directory of libsycl.so (host link, runtime)
    jit: Path | None = None       # libsycl-jit.so: the runtime compiler of the kernel_compiler extension


def _site_packages() -> list[str | None]:
    """Where installed wheels are looked for: this environment (None: sys.path), then, from a virtual environment,
    its base interpreter's site-packages (a wheel's headers and libraries there are usable as they are)."""
    import sys
    import sysconfig
    paths: list[str | None] = [None]
    if sys.base_prefix != sys.prefix:
        paths.append(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["purelib"])
    return paths


def installed_wheel_file(dist: str, name: str) -> tuple[Path, str] | None:
    """(installed path, wheel version) of the file ``name`` (a basename or a path suffix) of the wheel ``dist``,
    found through its RECORD (its data files land in ``<prefix>/include`` and ``<prefix>/lib``)."""
    import importlib.metadata as metadata
    for where in _site_packages():
        dists = metadata.distributions(name=dist) if where is None else metadata.distributions(name=dist, path=[where])
        for d in dists:
            for f in d.files or []:
                s = str(f).replace("\\", "/")
                if s == name or s.endswith("/" + name):
                    p = Path(d.locate_file(f)).resolve()
                    if p.exists():
                        return p, d.version
    return None


def _sycl_version(include: Path) -> str:
    vh = include / "sycl" / "version.hpp"
    text = vh.read_text(errors="replace") if vh.is_file() else ""
    parts = [re.search(rf"#define __LIBSYCL_{k}_VERSION (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    date = re.search(r"#define __SYCL_COMPILER_VERSION (\d+)", text)
    v = ".".join(m.group(1) for m in parts if m) or "unknown"
    return f"{v} ({date.group(1)})" if date else v


@lru_cache(maxsize=None)
def find_sycl_headers() -> tuple[SyclHeaders | None, str]:
    """The SYCL headers (and, beside them, libsycl and the runtime compiler), or None and why.

    Order: ``$SYCL_INCLUDE_DIR`` (with ``$SYCL_LIB_DIR``); a oneAPI compiler (``$CMPLR_ROOT``, ``icpx`` on PATH,
    ``/opt/intel/oneapi/compiler/latest``); the ``intel-sycl-rt`` wheel of this environment or of its base interpreter.
    """
    def make(include: Path, origin: str, lib: Path | None) -> SyclHeaders:
        lib = lib if lib and (lib / "libsycl.so").exists() else None
        jit = lib / "libsycl-jit.so" if lib and (lib / "libsycl-jit.so").exists() else None
        return SyclHeaders(include, origin, _sycl_version(include), lib, jit)

    env = os.environ.get("SYCL_INCLUDE_DIR")
    if env:
        inc = Path(env)
        if not (inc / "sycl" / "sycl.hpp").is_file():
            return None, f"SYCL_INCLUDE_DIR={env} has no sycl/sycl.hpp"
        lib = Path(os.environ["SYCL_LIB_DIR"]) if os.environ.get("SYCL_LIB_DIR") else inc.parent / "lib"
        return make(inc, "$SYCL_INCLUDE_DIR", lib), ""
    roots = [Path(os.environ["CMPLR_ROOT"])] if os.environ.get("CMPLR_ROOT") else []
    icpx = shutil.which("icpx")
    if icpx:
        roots.append(Path(icpx).resolve().parent.parent)
    roots.append(Path("/opt/intel/oneapi/compiler/latest"))
    for r in roots:
        if (r / "include" / "sycl" / "sycl.hpp").is_file():
            return make(r / "include", f"oneAPI ({r})", r / "lib"), ""
    hpp = installed_wheel_file("intel-sycl-rt", "include/sycl/sycl.hpp")
    if hpp:
        lib = installed_wheel_file("intel-sycl-rt", "libsycl.so")
        return make(hpp[0].parent.parent, f"intel-sycl-rt {hpp[1]}", lib[0].parent if lib else None), ""
    return None, ("no SYCL headers: pip install intel-sycl-rt (the headers land in <prefix>/include/sycl), or set "
                  "SYCL_INCLUDE_DIR, or install Intel oneAPI DPC++")


@lru_cache(maxsize=None)
def host_compilers() -> tuple[tuple[str, str], ...]:
    """(kind, path) for the host C++ compilers found: clang ("clang") and GCC ("gcc"), at most one of each,
    clang first; ``$CXX`` takes its kind's place."""
    found: dict[str, str] = {}
    for n in (os.environ.get("CXX"), "clang++-19", "clang++-20", "clang++-18", "clang++", "g++"):
        path = shutil.which(n) if n else None
        if not path:
            continue
        out = _run_version([path, "--version"])
        kind = "clang" if "clang" in out else "gcc" if ("GCC" in out or "g++" in out or "Free Software" in out) else ""
        if kind and kind not in found:
            found[kind] = path
    return tuple(sorted(found.items()))


def sycl_host_flags(kind: str, headers: SyclHeaders) -> list[str]:
    """Host-compiling SYCL sources without -fsycl: the headers' host half, our code at full checking."""
    flags = ["-std=c++17", "-isystem", str(headers.include), "-DSYCL_DISABLE_FSYCL_SYCLHPP_WARNING"]
    if kind == "clang":  # the kernel attribute is unknown without -fsycl; parallel_for's inner overload is deprecated
        return flags + ["-Wno-unknown-attributes", "-Wno-deprecated-declarations"]
    return flags + ["-Wno-attributes", "-Wno-deprecated-declarations"]


@lru_cache(maxsize=None)
def sycl() -> Toolchain:
    """What builds the sycl target here. extra: mode ('plugin': a DPC++ compiler, path and version are its; 'check':
    path is a host C++ compiler, version the SYCL headers', headers a SyclHeaders, host_kind 'clang' | 'gcc', why:
    why there is no plugin)."""
    dp = dpcpp()
    if dp.available:
        return Toolchain("dpcpp", dp.path, dp.version, extra={"mode": "plugin"})
    headers, why = find_sycl_headers()
    hosts = dict(host_compilers())
    kind = "clang" if "clang" in hosts else "gcc" if "gcc" in hosts else None
    if headers is None or kind is None:
        if headers is not None:
            why = ("no host C++ compiler to check the sources against the SYCL headers "
                   "(apt-get install clang-19, or g++)")
        return Toolchain("sycl", None, None, f"{dp.reason}; nor can the sources be checked here: {why}")
    return Toolchain("sycl-headers", hosts[kind], headers.version, extra={
        "mode": "check", "headers": headers, "host_kind": kind, "why": dp.reason})


def sycl_build_mode(tc: Toolchain) -> tuple[str, str]:
    """('plugin', '') with a DPC++ compiler, else ('check', why): the sources are checked against the headers only."""
    if tc.extra.get("mode") == "plugin":
        return "plugin", ""
    return "check", tc.extra.get("why") or tc.reason or NO_DPCPP


def sycl_flags(tc: Toolchain, mode: str) -> list[str]:
    """Flags for one SYCL source: an object for the plugin (DPC++), or a syntax-only check against the headers."""
    if mode == "plugin":
        return ["-fsycl", "-fPIC", "-O3", "-std=c++17", "-ffp-contract=off", "-fvisibility=hidden", "-c"]
    return sycl_host_flags(tc.extra["host_kind"], tc.extra["headers"]) + ["-fsyntax-only"]


def describe_sycl(tc: Toolchain) -> str:
    """One line for ``strata-kernels info`` and the build log."""
    if not tc.available:
        return f"not available: {tc.reason}"
    if tc.extra.get("mode") == "plugin":
        return f"plugin: DPC++ {tc.version or '?'} at {tc.path}"
    h: SyclHeaders = tc.extra["headers"]
    return (f"check only: the SYCL headers of {h.origin} ({h.include}, libsycl {h.version}) with {tc.path}; "
            f"no plugin: {tc.extra['why']}")


# ------------------------------------------------------------------------------------------------ CUDA 12 from PyPI
# The cuda12 family without a CUDA 12 toolkit: clang (CUDA mode) compiles each kernel source twice, the device side
# to PTX and the host side to an object that embeds the device code; ptxas 12.9 turns the PTX into SASS. The host
# side's runtime calls are answered by the plugin's own driver-API layer (templates/cuda/driver_api.cpp.j2), so the
# plugin needs libcuda.so.1 (any CUDA 12.0+ driver) and no CUDA runtime. PyPI gives the rest: ptxas, libdevice and
# the crt headers (nvidia-cuda-nvcc-cu12), the runtime and driver headers (nvidia-cuda-runtime-cu12) and <nv/target>
# (nvidia-cuda-cccl-cu12).

CUDA12_PACKAGES = ("nvidia-cuda-nvcc-cu12==12.9.*", "nvidia-cuda-runtime-cu12==12.9.*", "nvidia-cuda-cccl-cu12==12.9.*")
CUDA12_INSTALL = "pip install 'strata-kernels[cuda12]' (or: pip install " + " ".join(
    f'"{p}"' for p in CUDA12_PACKAGES) + ")"


def _nvidia_dir(module: str, probe: str) -> Path | None:
    """The directory of PyPI's ``nvidia.<module>`` package that holds ``probe``."""
    import importlib
    try:
        m = importlib.import_module(f"nvidia.{module}")
    except ImportError:
        return None
    return next((Path(p) for p in getattr(m, "__path__", []) if (Path(p) / probe).exists()), None)


def cuda12_root(runtime: Path, nvcc_dir: Path, cccl: Path) -> Path:
    """A CUDA-installation-shaped directory of links into the PyPI packages, as clang's --cuda-path wants it:
    include/ (runtime and driver headers, crt/, nv/), bin/ptxas, nvvm/libdevice, version.txt. clang's CUDA wrapper
    includes curand_mtgp32_kernel.h, which these kernels never use: an empty one stands in."""
    import hashlib
    from .paths import cache_home
    key = hashlib.sha256("\0".join(map(str, (runtime, nvcc_dir, cccl))).encode()).hexdigest()[:12]
    root = cache_home() / f"cuda12-root-{key}"
    if (root / "version.txt").is_file():
        return root
    tmp = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "include").mkdir(parents=True)
    for src in (runtime / "include", nvcc_dir / "include", cccl / "include"):
        for p in src.iterdir():
            if p.name != "__pycache__" and not (tmp / "include" / p.name).exists():
                (tmp / "include" / p.name).symlink_to(p)
    (tmp / "include" / "curand_mtgp32_kernel.h").write_text("/* not used by strata-kernels */\n")
    (tmp / "bin").mkdir()
    (tmp / "bin" / "ptxas").symlink_to(nvcc_dir / "bin" / "ptxas")
    (tmp / "nvvm").mkdir()
    (tmp / "nvvm" / "libdevice").symlink_to(nvcc_dir / "nvvm" / "libdevice")
    (tmp / "version.txt").write_text("CUDA Version 12.9\n")
    try:
        tmp.rename(root)
    except OSError:  # another build made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


@lru_cache(maxsize=None)
def cuda12_driver() -> Toolchain:
    """clang + PyPI's CUDA 12.9 (ptxas, headers, libdevice): builds cuda12 plugins that launch through the driver
    API. extra: clang, ptxas, root (the --cuda-path directory)."""
    clang, _, seen = find_clang([os.environ.get("STRATA_CUDA12_CLANG"), "clang++-19", "clang++-20", "clang++-18",
                                 "clang++"], "nvptx64")
    if not clang:
        found = f"; found {', '.join(seen)}" if seen else ""
        return Toolchain("cuda12-driver", None, None, "no clang >= 18 with the NVPTX backend" + found +
                         " (apt-get install clang-19, or set STRATA_CUDA12_CLANG)")
    runtime = _nvidia_dir("cuda_runtime", "include/cuda_runtime.h")
    nvcc_dir = _nvidia_dir("cuda_nvcc", "bin/ptxas")
    cccl = _nvidia_dir("cuda_cccl", "include/nv/target")
    missing = [pkg for pkg, d in zip(CUDA12_PACKAGES, (nvcc_dir, runtime, cccl)) if d is None]
    if missing:
        return Toolchain("cuda12-driver", None, None, f"the PyPI CUDA 12.9 packages {', '.join(missing)} are not "
                         f"installed ({CUDA12_INSTALL})")
    ptxas = nvcc_dir / "bin" / "ptxas"
    m = re.search(r"release (\d+\.\d+)", _run_version([str(ptxas), "--version"]))
    if not m:
        return Toolchain("cuda12-driver", None, None, f"{ptxas} does not run")
    if _version_tuple(m.group(1))[0] != 12:
        return Toolchain("cuda12-driver", None, None, f"{ptxas} is CUDA {m.group(1)}, not 12.x ({CUDA12_INSTALL})")
    root = cuda12_root(runtime, nvcc_dir, cccl)
    return Toolchain("cuda12-driver", clang, m.group(1), extra={"clang": clang, "ptxas": str(ptxas), "root": str(root)})


def cuda12_clang_flags(tc: Toolchain) -> list[str]:
    """clang flags of both sides of a cuda12 kernel source: nvcc's --fmad=false is -ffp-contract=off here."""
    return [f"--cuda-path={tc.extra['root']}", "-Wno-unknown-cuda-version", "-std=c++17", "-O3", "-ffp-contract=off"]


# Looked up by name at call time (tests replace a finder to simulate a missing toolchain).
_FINDERS = {"host-cxx": "host_cxx", "nvcc": "nvcc", "hip-clang": "hip_clang", "sycl": "sycl"}


def _checked(target: Target, tc: Toolchain) -> Toolchain:
    """``tc`` with ``target``'s toolkit floors checked; ``reason`` says why it cannot build the target."""
    if not tc.available:
        return tc
    if target.backend.name not in BUILDABLE_BACKENDS:
        return Toolchain(tc.name, tc.path, tc.version,
                         f"plugin builds for the {target.backend.name} backend are not part of this version "
                         f"(its generated sources are compile-checked by tests/toolchain)")
    if tc.extra.get("mode") == "check":  # no compiler of the target's toolkit: its floors do not apply
        return tc
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


def for_target(target: Target, family: str | None = None) -> Toolchain:
    """The toolchain for ``target`` (built for ``family``, or as the build picks) with its floors checked; ``reason``
    says why it cannot build the target. A cuda12 target is built by a CUDA 12.x nvcc where there is one, else by the
    PyPI CUDA 12.9 toolchain (`cuda12_driver`): always for the cuda12 family, and for a target the nvcc here cannot
    build (sm_70 beside CUDA 13). Without any nvcc a plain build skips the CUDA targets, as it says."""
    tc = _checked(target, globals()[_FINDERS[target.backend.toolchain]]())
    if target.backend.name != "cuda" or "cuda12" not in target.families or family not in (None, "cuda12"):
        return tc
    if family is None and (tc.available or not tc.path):  # no nvcc at all: the target is skipped, as before
        return tc
    if family == "cuda12" and tc.available and _version_tuple(tc.version)[0] == 12:
        return tc
    alt = _checked(target, globals()["cuda12_driver"]())
    if alt.available:
        return alt
    if family == "cuda12":
        found = f"found nvcc {tc.version} at {tc.path}" if tc.path else "found no nvcc"
        return Toolchain(alt.name, alt.path, alt.version,
                         f"the cuda12 family needs a CUDA 12.x nvcc ({found}) or the PyPI CUDA 12.9 toolchain: "
                         f"{alt.reason}")
    return Toolchain(tc.name, tc.path, tc.version, f"{tc.reason}; or the PyPI CUDA 12.9 toolchain: {alt.reason}")


def clear_cache() -> None:
    for name in (*_FINDERS.values(), "cuda12_driver", "dpcpp", "find_sycl_headers", "host_compilers"):
        f = globals()[name]
        if hasattr(f, "cache_clear"):  # a test may have replaced a finder by a plain function
            f.cache_clear()
