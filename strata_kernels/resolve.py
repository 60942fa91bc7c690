"""Which plugin runs on which device, and why.

probe the devices (ctypes on the drivers; no torch) → discover plugin files and read their embedded manifests
(without loading them) → score every plugin against every device → explain the choice → load the chosen one.

Discovery order (also the tie-break between equally good plugins):
  1. ``strata_kernels/plugins/libstrata_*.so``   (the core wheel, or ``pip install .``)
  2. entry points in the group ``strata_kernels.plugins`` (plugin wheels), sorted by entry-point name
  3. the per-user plugin directory (``strata-kernels build``; ``paths.user_plugin_dir``)
  4. the directories of ``STRATA_KERNELS_PLUGIN_PATH`` (os.pathsep-separated), in the order given

Entry-point convention: the value names a *package*, e.g. ``cuda13 = "strata_kernels_cuda13"``; its plugins
are the ``libstrata_*.so`` files in that package's directory. The package is located, not imported, so a
plugin wheel runs no Python code at discovery. (A value with an attribute, ``"pkg:func"``, is loaded and
called instead; it returns a directory, a .so path, or a list of either.)

Scoring per device; the best score wins, ties go to the higher arch, then to the discovery order above:
  CUDA  3 exact SASS · 2 same-major older SASS · 1 PTX compute_XY with XY ≤ the device (JIT) · else reject.
        'a'/'f'-suffixed archs only on their exact arch. The driver must be of the toolkit's major (SASS)
        or at least the toolkit's version (PTX JIT), and at least the manifest's min_driver_version.
  HIP   3 exact gfx · 1 a generic target (gfx11-generic, …) covering the device · else reject.
  SYCL, CPU: the plugin of that backend (the CPU plugin's host arch must be this machine's).
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import logging
import mmap
import os
import platform
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import GeometryMissing, PluginError, Unsupported
from .paths import user_plugin_dir
from .abi import ABI_VERSION, MANIFEST_BEGIN, MANIFEST_END  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from .targets import Target

log = logging.getLogger("strata_kernels")


ENTRY_POINT_GROUP = "strata_kernels.plugins"
ENV_PLUGIN_PATH = "STRATA_KERNELS_PLUGIN_PATH"
ENV_TARGET = "STRATA_KERNELS_TARGET"
ENV_SIMULATE_DRIVER = "STRATA_KERNELS_SIMULATE_DRIVER"
# The NVIDIA driver each CUDA plugin family needs (README, "GPU plugins"): SASS built by a CUDA N.x toolkit runs on
# an N.0 driver or newer; cuda12 plugins launch through the driver API, so nothing else is needed.
FAMILY_DRIVERS = {"cuda13": "CUDA 13.0 or newer (driver R580+)", "cuda12": "CUDA 12.0 or newer (driver R525+)"}
DEFAULT_SIMULATED_DRIVER = 13000  # a CUDA 13.0 driver, CUDA style (major*1000 + minor*10)

_MAX_MANIFEST_BYTES = 1 << 20

BACKENDS = ("cpu", "cuda", "hip", "sycl")
_SOURCE_ORDER = {"package": 0, "entry point": 1, "user": 2, "path": 3}

# Generic HIP code-object targets and the gfx archs each one covers (LLVM AMDGPU "generic processor" table).
HIP_GENERIC_TARGETS = {
    "gfx9-generic": r"gfx90[0246c]",
    "gfx9-4-generic": r"gfx94[0-2]|gfx950",
    "gfx10-1-generic": r"gfx101[0-3]",
    "gfx10-3-generic": r"gfx103[0-6]",
    "gfx11-generic": r"gfx110[0-3]|gfx115[0-3]",
    "gfx12-generic": r"gfx120[01]",
}

_CUDA_LIBS = ("libcuda.so.1", "libcuda.so")
_HIP_LIBS = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


# ----------------------------------------------------------------------------------------------- records

@dataclass
class Device:
    kind: str                       # 'cpu' | 'cuda' | 'hip' | 'sycl'
    index: int
    name: str
    arch: str                       # 'x86_64', 'sm_90', 'gfx1100'
    cc: tuple[int, int] | None = None
    driver_version: int | None = None  # CUDA: cuDriverGetVersion (13000 = 13.0); HIP: hipDriverGetVersion
    simulated: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.index}"

    def describe(self) -> str:
        bits = [self.name]
        if self.kind == "cuda" and self.driver_version is not None:
            bits.append(f"driver CUDA {_cuda_version_str(self.driver_version)}")
        if self.simulated:
            bits.append("simulated")
        return f"{self.label} {self.arch} ({'; '.join(bits)})"


@dataclass
class PluginFile:
    path: Path
    source: str                     # where it was found, e.g. "package", "entry point cuda13", "path"
    manifest: dict | None = None
    error: str | None = None        # why the manifest could not be used

    @property
    def origin(self) -> str:
        """'package' | 'entry point' | 'user' | 'path' (the tie-break order)."""
        return "entry point" if self.source.startswith("entry point") else self.source.split(" ")[0]

    @property
    def target(self) -> str:
        if self.manifest and isinstance(self.manifest.get("target"), str):
            return self.manifest["target"]
        stem = self.path.name
        return stem[len("libstrata_"):].split(".so")[0] if stem.startswith("libstrata_") else stem

    @property
    def backend(self) -> str | None:
        return self.manifest.get("backend") if self.manifest and not self.error else None


@dataclass
class Candidate:
    plugin: PluginFile
    accepted: bool
    reason: str                     # one sentence: why accepted or rejected
    score: int = 0                  # 3 exact · 2 same-major older SASS · 1 PTX JIT / generic gfx · 0 rejected
    match: str | None = None        # the manifest entry that matched: 'sm_80', 'compute_120', 'gfx1100'
    forced: bool = False
    _arch_key: tuple = field(default=(), repr=False)

    @property
    def verdict(self) -> str:
        return "ACCEPT" if self.accepted else "REJECT"

    @property
    def how(self) -> str:
        """How the plugin's code reaches the device: 'exact SASS sm_100', 'same-major SASS sm_120',
        'PTX JIT compute_120', 'generic code object gfx11-generic'; empty where there is one way (CPU, SYCL)."""
        backend = self.plugin.backend
        words = {"cuda": {3: "exact SASS", 2: "same-major SASS", 1: "PTX JIT"},
                 "hip": {3: "exact code object", 1: "generic code object"}}.get(backend or "", {})
        return f"{words[self.score]} {self.match}" if self.score in words and self.match else ""


@dataclass
class Resolution:
    device: Device
    chosen: Candidate | None
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)


# -------------------------------------------------------------------------------------------- versions

def _cuda_version_str(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _parse_cuda_version(text) -> int | None:
    """'13.0', '12.9.1', 12080 → CUDA-style int (major*1000 + minor*10); None when unreadable."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        return None
    m = re.match(r"^\s*(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    major, minor = int(m.group(1)), int(m.group(2) or 0)
    return major * 1000 + minor * 10 if major < 1000 else major


def _parse_sm(text: str) -> tuple[int, int, str] | None:
    """'sm_90a' / 'compute_120' / '90' → (major, minor, suffix). The last digit is the minor version."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d)(\d+)?([af]?)", text.strip().lower())
    if not m:
        return None
    digits = m.group(1) + (m.group(2) or "")
    if len(digits) < 2:
        return None
    return int(digits[:-1]), int(digits[-1]), m.group(3)


def _strip_gfx(name: str) -> str:
    """'gfx90a:sramecc+:xnack-' → 'gfx90a'."""
    return name.strip().lower().split(":")[0]


def _normalise_machine(m: str) -> str:
    m = (m or "").lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(m, m)


# ---------------------------------------------------------------------------------------------- probing

def _load_library(names) -> tuple[object | None, str]:
    """The first of ``names`` that loads, or None and why none did."""
    names = list(names)
    first = None
    for n in names:
        try:
            return ctypes.CDLL(n), n
        except OSError as e:
            first = first or str(e)
    also = f"; also tried {', '.join(names[1:])}" if len(names) > 1 else ""
    return None, (first or "no library names to try") + also


def _fn(lib, name: str, argtypes=None, restype=ctypes.c_int):
    f = getattr(lib, name, None)
    if f is None:
        return None
    try:
        f.restype = restype
        if argtypes is not None:
            f.argtypes = argtypes
    except (AttributeError, TypeError):
        pass
    return f


def _error_name(lib, getter: str, code: int) -> str:
    f = _fn(lib, getter, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])
    if f is not None:
        s = ctypes.c_char_p()
        try:
            if f(code, ctypes.byref(s)) == 0 and s.value:
                return f"{code} ({s.value.decode(errors='replace')})"
        except Exception:  # noqa: BLE001 - a name is a nicety
            pass
    return str(code)


def _cpu_device() -> Device:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    name = line.split(":", 1)[1].strip() or name
                    break
    except OSError:
        pass
    return Device("cpu", 0, name, _normalise_machine(platform.machine()), None, None, False)


def _probe_cuda(notes: list[str]) -> list[Device]:
    lib, why = _load_library(_CUDA_LIBS)
    if lib is None:
        notes.append(f"CUDA: not probed: the NVIDIA driver library (libcuda.so.1) could not be loaded ({why})")
        return []
    c_int_p = ctypes.POINTER(ctypes.c_int)
    cu_init = _fn(lib, "cuInit", [ctypes.c_uint])
    rc = cu_init(0) if cu_init else -1
    if rc != 0:
        notes.append(f"CUDA: no devices: cuInit failed with {_error_name(lib, 'cuGetErrorName', rc)}")
        return []
    driver = ctypes.c_int(0)
    get_version = _fn(lib, "cuDriverGetVersion", [c_int_p])
    driver_version = driver.value if get_version and get_version(ctypes.byref(driver)) == 0 else None
    count = ctypes.c_int(0)
    rc = _fn(lib, "cuDeviceGetCount", [c_int_p])(ctypes.byref(count))
    if rc != 0:
        notes.append(f"CUDA: no devices: cuDeviceGetCount failed with {_error_name(lib, 'cuGetErrorName', rc)}")
        return []
    if count.value == 0:
        notes.append("CUDA: the driver reports no devices (check CUDA_VISIBLE_DEVICES)")
    get = _fn(lib, "cuDeviceGet", [c_int_p, ctypes.c_int])
    attr = _fn(lib, "cuDeviceGetAttribute", [c_int_p, ctypes.c_int, ctypes.c_int])
    get_name = _fn(lib, "cuDeviceGetName", [ctypes.c_char_p, ctypes.c_int, ctypes.c_int])
    out = []
    for i in range(count.value):
        dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        rc = get(ctypes.byref(dev), i)
        if rc == 0:
            rc = attr(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev.value)
        if rc == 0:
            rc = attr(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev.value)
        if rc != 0:
            notes.append(f"CUDA: device {i} skipped: query failed with {_error_name(lib, 'cuGetErrorName', rc)}")
            continue
        buf = ctypes.create_string_buffer(256)
        name = f"CUDA device {i}"
        if get_name and get_name(buf, 256, dev.value) == 0 and buf.value:
            name = buf.value.decode(errors="replace")
        cc = (major.value, minor.value)
        out.append(Device("cuda", i, name, f"sm_{cc[0]}{cc[1]}", cc, driver_version, False))
    return out


# gcnArchName inside hipDeviceProp_t: 'gfx' + hex digits (or a generic name), then optional ':feature±', NUL.
_GCN_ARCH = re.compile(rb"(gfx[0-9a-f]{2,4}(?:-[0-9a-z-]*generic)?(?::[A-Za-z0-9_]+[+-])*)\x00")
_HIP_PROPS_BYTES = 64 * 1024   # larger than any ROCm's hipDeviceProp_t; the layout varies by version
_HIP_NAME_BYTES = 256          # hipDeviceProp_t starts with char name[256] in every layout


def _gcn_arch_from_props(raw: bytes) -> str | None:
    """Find gcnArchName in a hipDeviceProp_t of unknown layout: the 'gfx…' string after the name field."""
    found = [m for m in _GCN_ARCH.finditer(raw)]
    after_name = [m for m in found if m.start() >= _HIP_NAME_BYTES]
    pick = (after_name or found or [None])[0]
    return _strip_gfx(pick.group(1).decode()) if pick else None


def _hip_library_names() -> list[str]:
    names = list(_HIP_LIBS)
    for root in (os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH"), "/opt/rocm"):
        if root:
            names.append(str(Path(root) / "lib" / "libamdhip64.so"))
    return names


def _probe_hip(notes: list[str]) -> list[Device]:
    lib, why = _load_library(_hip_library_names())
    if lib is None:
        notes.append(f"HIP: not probed: the ROCm runtime (libamdhip64.so) could not be loaded ({why})")
        return []
    c_int_p = ctypes.POINTER(ctypes.c_int)
    hip_init = _fn(lib, "hipInit", [ctypes.c_uint])
    if hip_init is not None:
        rc = hip_init(0)
        if rc != 0:
            notes.append(f"HIP: no devices: hipInit failed with {_error_name_hip(lib, rc)}")
            return []
    count = ctypes.c_int(0)
    get_count = _fn(lib, "hipGetDeviceCount", [c_int_p])
    rc = get_count(ctypes.byref(count)) if get_count else -1
    if rc != 0:
        notes.append(f"HIP: no devices: hipGetDeviceCount failed with {_error_name_hip(lib, rc)}")
        return []
    if count.value == 0:
        notes.append("HIP: the runtime reports no devices (check HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES)")
    driver = ctypes.c_int(0)
    get_version = _fn(lib, "hipDriverGetVersion", [c_int_p])
    driver_version = driver.value if get_version and get_version(ctypes.byref(driver)) == 0 else None
    # ROCm 6 renamed the struct-filling call (hipGetDeviceProperties is a macro for ...R0600); try both.
    props_fns = [f for f in (_fn(lib, "hipGetDevicePropertiesR0600", [ctypes.c_void_p, ctypes.c_int]),
                             _fn(lib, "hipGetDeviceProperties", [ctypes.c_void_p, ctypes.c_int])) if f]
    out = []
    for i in range(count.value):
        arch, name = None, f"HIP device {i}"
        for props in props_fns:
            buf = ctypes.create_string_buffer(_HIP_PROPS_BYTES)
            if props(buf, i) != 0:
                continue
            raw = buf.raw
            name = raw[:_HIP_NAME_BYTES].split(b"\0", 1)[0].decode(errors="replace") or name
            arch = _gcn_arch_from_props(raw)
            if arch:
                break
        if not arch:
            notes.append(f"HIP: device {i} skipped: its gfx arch (gcnArchName) could not be read")
            continue
        out.append(Device("hip", i, name, arch, None, driver_version, False))
    return out


def _error_name_hip(lib, code: int) -> str:
    f = _fn(lib, "hipGetErrorName", [ctypes.c_int], ctypes.c_char_p)
    if f is not None:
        try:
            s = f(code)
            if s:
                return f"{code} ({s.decode(errors='replace')})"
        except Exception:  # noqa: BLE001
            pass
    return str(code)


@lru_cache(maxsize=1)
def _probe() -> tuple[tuple[Device, ...], tuple[str, ...]]:
    notes: list[str] = []
    devices = [_cpu_device()]
    for backend, probe in (("CUDA", _probe_cuda), ("HIP", _probe_hip)):
        try:
            devices += probe(notes)
        except Exception as e:  # noqa: BLE001 - a probe never takes the process down
            notes.append(f"{backend}: probe failed: {type(e).__name__}: {e}")
    notes.append("SYCL: devices are not probed; `--simulate sycl` shows what a SYCL device would get")
    return tuple(devices), tuple(notes)


def probe_devices() -> list[Device]:
    """The CPU, then every NVIDIA and AMD GPU the drivers report. Cached per process; never raises."""
    return list(_probe()[0])


def probe_notes() -> list[str]:
    """Why a backend found no devices (library missing, cuInit error, …)."""
    return list(_probe()[1])


# ------------------------------------------------------------------------------------------- simulation

def _simulated_driver() -> int:
    raw = os.environ.get(ENV_SIMULATE_DRIVER, "").strip()
    if not raw:
        return DEFAULT_SIMULATED_DRIVER
    v = _parse_cuda_version(int(raw) if raw.isdigit() and len(raw) >= 4 else raw)
    if v is None:
        raise ValueError(f"{ENV_SIMULATE_DRIVER}={raw!r}: expected a CUDA driver version such as 12080 or '12.8'")
    return v


def simulate(spec: str) -> list[Device]:
    """Devices that are not here: ``"sm_86,gfx1100,cpu"`` (also ``8.6``, ``sycl``, ``cpu:aarch64``).

    CUDA devices get the driver version of ``STRATA_KERNELS_SIMULATE_DRIVER`` (default 13000, i.e. CUDA 13.0).
    """
    driver = _simulated_driver()
    out: list[Device] = []
    counts: dict[str, int] = {}

    def add(kind, name, arch, cc=None, drv=None):
        out.append(Device(kind, counts.get(kind, 0), name, arch, cc, drv, True))
        counts[kind] = counts.get(kind, 0) + 1

    for tok in (t.strip() for t in re.split(r"[,;\s]+", spec or "") if t.strip()):
        low = tok.lower()
        if low in ("none", "-"):
            continue
        if low == "cpu" or low.startswith("cpu:"):
            machine = _normalise_machine(low.split(":", 1)[1]) if ":" in low else _normalise_machine(platform.machine())
            add("cpu", f"{machine} CPU", machine)
        elif low == "sycl":
            add("sycl", "SYCL device", "sycl")
        elif low.startswith("gfx"):
            arch = _strip_gfx(low)
            add("hip", f"AMD {arch}", arch)
        else:
            dotted = re.fullmatch(r"(\d+)\.(\d)", low)
            sm = (int(dotted.group(1)), int(dotted.group(2)), "") if dotted else (
                _parse_sm(low) if low.startswith("sm_") or low.isdigit() else None)
            if sm is None:
                raise ValueError(f"cannot simulate {tok!r}: expected sm_XY (e.g. sm_86), X.Y, gfxNNNN "
                                 f"(e.g. gfx1100), sycl or cpu")
            arch = f"sm_{sm[0]}{sm[1]}"
            add("cuda", f"NVIDIA {arch}", arch, (sm[0], sm[1]), driver)
    return out


# -------------------------------------------------------------------------------------------- discovery

def read_manifest(path: Path) -> dict:
    """The JSON manifest embedded between STRATA_MANIFEST_BEGIN and STRATA_MANIFEST_END, read without loading
    the library. Raises ValueError with a sentence when it is missing or not valid JSON."""
    st = os.stat(path)
    return _read_manifest_cached(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _read_manifest_cached(path: str, size: int, mtime_ns: int) -> dict:
    if size == 0:
        raise ValueError("the file is empty")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        start = mm.find(MANIFEST_BEGIN)
        if start < 0:
            raise ValueError(f"no {MANIFEST_BEGIN.decode()} marker: not a strata-kernels plugin, or built "
                             "without a manifest")
        last_error = ""
        # The marker text may also occur elsewhere in the binary; the manifest is the occurrence holding JSON.
        while start >= 0:
            body = start + len(MANIFEST_BEGIN)
            end = mm.find(MANIFEST_END, body, body + _MAX_MANIFEST_BYTES)
            if end < 0:
                last_error = f"{MANIFEST_BEGIN.decode()} without a matching {MANIFEST_END.decode()}"
            else:
                try:
                    data = json.loads(mm[body:end].decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    last_error = f"the manifest is not valid JSON ({e})"
                else:
                    if isinstance(data, dict):
                        return data
                    last_error = f"the manifest is JSON but not an object (got {type(data).__name__})"
            start = mm.find(MANIFEST_BEGIN, body)
        raise ValueError(last_error)


def check_manifest(m: dict) -> str | None:
    """A sentence saying what is wrong with a manifest's fields, or None. (The ABI version is checked when
    scoring, so that the trace says which version the plugin speaks.)"""
    if not isinstance(m.get("abi_version"), int):
        return f"'abi_version' must be an integer, got {m.get('abi_version')!r}"
    if not isinstance(m.get("target"), str) or not m.get("target"):
        return f"'target' must be a non-empty string, got {m.get('target')!r}"
    if m.get("backend") not in BACKENDS:
        return f"'backend' must be one of {', '.join(BACKENDS)}, got {m.get('backend')!r}"
    for key in ("sass", "ptx", "gfx"):
        v = m.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return f"'{key}' must be a list of strings, got {v!r}"
    for key in ("sass", "ptx"):
        for x in m.get(key, []):
            if _parse_sm(x) is None:
                return f"'{key}' entry {x!r} is not an arch like sm_90 / compute_120"
    mdv = m.get("min_driver_version", 0)
    if mdv is not None and (not isinstance(mdv, int) or isinstance(mdv, bool)):
        return f"'min_driver_version' must be an integer, got {mdv!r}"
    tc = m.get("toolchain", {})
    if tc is not None and not isinstance(tc, dict):
        return f"'toolchain' must be an object {{name, version}}, got {tc!r}"
    return None


def _plugin_file(path: Path, source: str) -> PluginFile:
    try:
        manifest = read_manifest(path)
    except (OSError, ValueError) as e:
        return PluginFile(path, source, None, f"manifest unreadable: {e}")
    return PluginFile(path, source, manifest, check_manifest(manifest))


def _package_plugin_dir() -> Path:
    return Path(__file__).resolve().parent / "plugins"


def _entry_points() -> list:
    return sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _so_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("libstrata_*.so") if p.is_file())


def _entry_point_paths(ep) -> list[Path]:
    """The plugin files an entry point stands for (see the module docstring for the convention)."""
    if ":" not in ep.value:
        spec = importlib.util.find_spec(ep.value.strip())
        if spec is None:
            raise ImportError(f"package {ep.value!r} is not installed")
        dirs = list(spec.submodule_search_locations or [])
        if not dirs and spec.origin:
            dirs = [str(Path(spec.origin).parent)]
        return [p for d in dirs for p in _so_files(Path(d))]
    obj = ep.load()
    result = obj() if callable(obj) else obj
    if isinstance(result, (str, os.PathLike)):
        result = [result]
    out: list[Path] = []
    for item in result:
        p = Path(item)
        out += _so_files(p) if p.is_dir() else [p]
    return out


def discover() -> tuple[list[PluginFile], list[str]]:
    """All plugin files, in discovery order (package, entry points, user directory, STRATA_KERNELS_PLUGIN_PATH), and
    notes on sources that could not be searched. The same file found twice is kept once, at its first place."""
    found: list[PluginFile] = []
    notes: list[str] = []
    seen: set[str] = set()

    def add(path: Path, source: str):
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            found.append(_plugin_file(path, source))

    pkg = _package_plugin_dir()
    for p in _so_files(pkg) if pkg.is_dir() else []:
        add(p, "package")
    try:
        eps = _entry_points()
    except Exception as e:  # noqa: BLE001 - broken metadata must not stop the resolver
        eps = []
        notes.append(f"entry points of group {ENTRY_POINT_GROUP!r} could not be read: {e}")
    for ep in eps:
        source = f"entry point {ep.name} ({ep.value})"
        try:
            paths = _entry_point_paths(ep)
        except Exception as e:  # noqa: BLE001
            found.append(PluginFile(Path(ep.value), source, None,
                                    f"entry point {ep.name} = {ep.value!r} failed: {type(e).__name__}: {e}"))
            continue
        if not paths:
            notes.append(f"{source} holds no libstrata_*.so files")
        for p in paths:
            add(p, source)
    user = user_plugin_dir()
    for p in _so_files(user) if user.is_dir() else []:
        add(p, "user")
    for entry in (e for e in os.environ.get(ENV_PLUGIN_PATH, "").split(os.pathsep) if e.strip()):
        p = Path(entry).expanduser()
        if p.is_dir():
            files = _so_files(p)
            if not files:
                notes.append(f"{ENV_PLUGIN_PATH} entry {entry} holds no libstrata_*.so files")
            for f in files:
                add(f, f"path {entry}")
        elif p.is_file():
            add(p, f"path {entry}")
        else:
            notes.append(f"{ENV_PLUGIN_PATH} entry {entry} does not exist")
    return found, notes


def find_plugins() -> list[PluginFile]:
    return discover()[0]


# ---------------------------------------------------------------------------------------------- scoring

def _score_cuda(dev: Device, m: dict) -> Candidate:
    if dev.cc is None:
        return Candidate(None, False, "the device's compute capability is unknown")
    dmaj, dmin = dev.cc
    best: tuple | None = None   # (score, arch_key, entry, kind)
    why_not: list[str] = []
    for s in m.get("sass", []):
        maj, mn, suf = _parse_sm(s)
        if suf and (maj, mn) != (dmaj, dmin):
            why_not.append(f"SASS {s} runs only on sm_{maj}{mn} exactly")
            continue
        if (maj, mn) == (dmaj, dmin):
            cand = (3, (maj, mn, 1 if suf else 0), s, "exact SASS")
        elif maj == dmaj and mn < dmin:
            cand = (2, (maj, mn, 0), s, "same-major older SASS")
        elif maj < dmaj:
            why_not.append(f"SASS {s} is for major {maj}, the device is major {dmaj} (SASS never runs across "
                           "majors)")
            continue
        else:
            why_not.append(f"SASS {s} is newer than the device ({dev.arch})")
            continue
        best = max(best, cand) if best else cand
    for p in m.get("ptx", []):
        maj, mn, suf = _parse_sm(p)
        if suf and (maj, mn) != (dmaj, dmin):
            why_not.append(f"PTX {p} runs only on sm_{maj}{mn} exactly")
        elif (maj, mn) <= (dmaj, dmin):
            cand = (1, (maj, mn, 1 if suf else 0), p, "PTX, JIT-compiled by the driver")
            best = max(best, cand) if best else cand
        else:
            why_not.append(f"PTX {p} is newer than the device ({dev.arch})")
    if best is None:
        listed = ", ".join(m.get("sass", []) + m.get("ptx", [])) or "no SASS or PTX at all"
        detail = "; ".join(why_not) if why_not else f"it carries {listed}"
        return Candidate(None, False, f"no code for {dev.arch}: {detail}")
    sc, key, entry, kind = best
    tk_raw = (m.get("toolchain") or {}).get("version")
    tk = _parse_cuda_version(tk_raw)
    drv = dev.driver_version
    tk_name = f"CUDA {_cuda_version_str(tk)}" if tk else "an unknown CUDA version"
    if drv is not None:
        if tk and sc >= 2 and drv // 1000 < tk // 1000:
            return Candidate(None, False,
                             f"{kind} {entry} matches, but it was built with {tk_name} and the driver supports "
                             f"only CUDA {_cuda_version_str(drv)}: SASS needs a driver of the toolkit's major "
                             f"({tk // 1000}.x) or newer; update the driver or install the plugin wheel built "
                             f"for CUDA {drv // 1000}", match=entry)
        if tk and sc == 1 and drv < tk:
            return Candidate(None, False,
                             f"only PTX {entry} fits, and JIT-compiling PTX from {tk_name} needs a driver for "
                             f"CUDA {_cuda_version_str(tk)} or newer (this one: {_cuda_version_str(drv)})",
                             match=entry)
        mdv = m.get("min_driver_version") or 0
        if mdv and drv < mdv:
            return Candidate(None, False,
                             f"{kind} {entry} matches, but the plugin needs a driver for CUDA "
                             f"{_cuda_version_str(mdv)} or newer (min_driver_version {mdv}); this one supports "
                             f"{_cuda_version_str(drv)}", match=entry)
    what = {3: f"exact SASS {entry} for {dev.arch}",
            2: f"SASS {entry} runs on {dev.arch} (same major, older minor)",
            1: f"PTX {entry} is JIT-compiled by the driver for {dev.arch}"}[sc]
    if drv is None:
        what += " (driver version unknown, not checked)"
    elif tk is None:
        what += " (toolkit version not in the manifest, driver not checked)"
    return Candidate(None, True, f"{what} (score {sc})", sc, entry, _arch_key=key)


def _gfx_generic_covers(generic: str, gfx: str) -> bool:
    pattern = HIP_GENERIC_TARGETS.get(generic)
    return bool(pattern and re.fullmatch(pattern, gfx))


def _score_hip(dev: Device, m: dict) -> Candidate:
    gfx = [_strip_gfx(g) for g in m.get("gfx", [])]
    arch = _strip_gfx(dev.arch)
    if arch in gfx:
        return Candidate(None, True, f"exact code object {arch} (score 3)", 3, arch, _arch_key=(1,))
    for g in gfx:
        if g.endswith("-generic") and _gfx_generic_covers(g, arch):
            return Candidate(None, True, f"generic code object {g} covers {arch} (score 1)", 1, g, _arch_key=(0,))
    listed = ", ".join(gfx) or "no gfx code objects"
    return Candidate(None, False, f"HIP code objects need the exact gfx: the plugin carries {listed}, "
                                  f"the device is {arch}")


def _score_cpu(dev: Device, m: dict) -> Candidate:
    host = _normalise_machine(m.get("host") or "")
    if not host:
        return Candidate(None, False, "the manifest does not say which host arch it was built for")
    if host != _normalise_machine(dev.arch):
        return Candidate(None, False, f"built for a {host} host, this machine is {dev.arch}")
    return Candidate(None, True, f"CPU plugin for {host} (score 3)", 3, host)


def _score_sycl(dev: Device, m: dict) -> Candidate:
    # SYCL kernels are JIT-compiled from SPIR-V by the runtime: any SYCL device can take the SYCL plugin.
    return Candidate(None, True, "SYCL plugin (score 3)", 3, "sycl")


_SCORERS = {"cuda": _score_cuda, "hip": _score_hip, "cpu": _score_cpu, "sycl": _score_sycl}


def score(device: Device, plugin: PluginFile) -> Candidate:
    """Accept or reject one plugin for one device, with the reason as a sentence."""
    m = plugin.manifest
    if plugin.error or m is None:
        c = Candidate(None, False, plugin.error or "no manifest")
    elif m.get("abi_version") != ABI_VERSION:
        c = Candidate(None, False, f"the plugin speaks ABI {m.get('abi_version')}, this strata-kernels speaks ABI "
                                   f"{ABI_VERSION}; install the plugin wheel of the same version as strata-kernels")
    elif m.get("backend") != device.kind:
        c = Candidate(None, False, f"backend {m.get('backend')} plugin, device is {device.kind}")
    else:
        c = _SCORERS[device.kind](device, m)
    c.plugin = plugin
    return c


def _rank(c: Candidate, position: int) -> tuple:
    """Sort key, best first: score, the matched arch, discovery order, position in the list."""
    return (-c.score, tuple(-x for x in c._arch_key), _SOURCE_ORDER.get(c.plugin.origin, 3), position)


# -------------------------------------------------------------------------------------------- resolving

def _forced_target() -> str | None:
    raw = os.environ.get(ENV_TARGET, "").strip()
    if not raw:
        return None
    try:
        from .targets import _normalise
        return _normalise(raw)[0]
    except Exception:  # noqa: BLE001
        return raw.lower()


def _backend_of_target(name: str, plugins: list[PluginFile]) -> str | None:
    for p in plugins:
        if p.backend and p.target == name:
            return p.backend
    tables = _table_targets()[0]
    if tables and name in tables:
        return tables[name].backend.name
    if name.startswith(("sm_", "compute_")):
        return "cuda"
    if name.startswith("gfx"):
        return "hip"
    return name if name in BACKENDS else None


def _resolve_one(device: Device, plugins: list[PluginFile], forced: str | None) -> Resolution:
    cands = [score(device, p) for p in plugins]
    order = sorted(range(len(cands)), key=lambda i: _rank(cands[i], i))
    cands = [cands[i] for i in order]
    notes: list[str] = []
    forced_backend = _backend_of_target(forced, plugins) if forced else None
    if forced and forced_backend is None:
        notes.append(f"{ENV_TARGET}={forced} names no installed plugin and no known target; it is ignored")
    if forced and forced_backend == device.kind:
        # Every plugin of the forced target stays eligible: the table's and those of extra geometries.
        picks = [c for c in cands if c.plugin.backend == device.kind and c.plugin.target == forced
                 and c.plugin.manifest.get("abi_version") == ABI_VERSION]
        if not picks:
            available = sorted({p.target for p in plugins if p.backend == device.kind and not p.error})
            notes.append(f"{ENV_TARGET}={forced} names no installed plugin usable here; installed {device.kind} "
                         f"targets: {', '.join(available) or 'none'}. Unset {ENV_TARGET} or pick one of these")
            for c in cands:
                if c.accepted:
                    c.accepted, c.reason = False, f"not the target forced by {ENV_TARGET}={forced} ({c.reason})"
            return Resolution(device, None, cands, notes)
        forced_ids = {id(c) for c in picks}
        for c in cands:
            if id(c) in forced_ids:
                rules = "the rules would accept it too" if c.accepted else f"the rules would reject it: {c.reason}"
                c.accepted, c.forced = True, True
                c.reason = f"forced by {ENV_TARGET}={forced} ({rules})"
            elif c.accepted:
                c.accepted, c.reason = False, f"not the target forced by {ENV_TARGET}={forced} ({c.reason})"
        cands = picks + [c for c in cands if id(c) not in forced_ids]
        return Resolution(device, picks[0], cands, notes)
    chosen = next((c for c in cands if c.accepted), None)
    return Resolution(device, chosen, cands, notes)


def resolve(devices: list[Device] | None = None, plugins: list[PluginFile] | None = None) -> list[Resolution]:
    """For each device, every plugin with accept/reject and a reason, and the chosen one (or None)."""
    devices = probe_devices() if devices is None else devices
    plugins = find_plugins() if plugins is None else plugins
    forced = _forced_target()
    return [_resolve_one(d, plugins, forced) for d in devices]


# ------------------------------------------------------------------------------------ the target tables

def _table_targets(targets=None) -> tuple[dict | None, str | None]:
    """The target tables (backends/*.toml) and None, or None and why they could not be read."""
    if targets is not None:
        return (targets if isinstance(targets, dict) else {t.name: t for t in targets}), None
    try:
        from . import targets as targets_mod
        return targets_mod.all_targets(), None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"


def table_manifest(target: "Target") -> dict:
    """The manifest a plugin built from ``target``'s table would carry (the fields the scoring reads)."""
    backend = target.backend.name
    tk = target.toolkit_max or target.toolkit_min
    return {
        "abi_version": ABI_VERSION,
        "target": target.name,
        "backend": backend,
        "families": list(target.families),
        "sass": [f"sm_{target.arch}"] if backend == "cuda" else [],
        "ptx": [f"compute_{target.arch}"] if backend == "cuda" and target.ptx else [],
        "gfx": [target.arch] if backend == "hip" else [],
        "host": platform.machine(),
        "toolchain": {"name": target.backend.toolchain, "version": tk},
        "min_driver_version": 0,
    }


def _wheel_for(device: Device, target: "Target") -> str:
    """The wheel to install for ``target``; for CUDA, a family whose toolkit major the driver supports."""
    fams = list(target.families)
    fam = fams[0]
    if device.kind == "cuda" and device.driver_version:
        ok = [f for f in fams
              if (m := re.fullmatch(r"cuda(\d+)", f)) and int(m.group(1)) <= device.driver_version // 1000]
        fam = ok[0] if ok else fam
    return "strata-kernels" if fam == "core" else f"strata-kernels-{fam}"


def table_choice(device: Device, targets: "dict[str, Target] | None" = None) -> tuple[Candidate | None, str]:
    """The target-table entry that would serve ``device`` (the same rules on manifests synthesised from the
    tables; the driver is not checked, the toolkit is only known at build time), and a sentence saying so."""
    tables, err = _table_targets(targets)
    if tables is None:
        return None, f"the target tables could not be read ({err}), so no target or wheel can be named"
    fake = [PluginFile(Path(f"<table {name}>"), "package", table_manifest(t)) for name, t in tables.items()]
    dev = Device(device.kind, device.index, device.name, device.arch, device.cc, None, device.simulated)
    chosen = _resolve_one(dev, fake, None).chosen
    if chosen is None:
        known = sorted(n for n, t in tables.items() if t.backend.name == device.kind)
        return None, (f"no target in the tables serves {device.arch} (the {device.kind} targets are "
                      f"{', '.join(known) or 'none'})")
    t = tables[chosen.plugin.target]
    how = ""
    if chosen.score == 1:
        how = f"PTX {chosen.match}, JIT-compiled; " if device.kind == "cuda" else f"generic {chosen.match}; "
    elif chosen.score == 2:
        how = f"SASS {chosen.match}; "
    what = f"PTX {chosen.match} of target {t.name}" if device.kind == "cuda" and chosen.score == 1 else t.name
    toolkit = f"; needs a CUDA {t.toolkit_max.split('.')[0]}.x toolkit (≤ {t.toolkit_max})" if t.toolkit_max else ""
    return chosen, (f"the target table would use {what} ({how}family {'/'.join(t.families)}{toolkit}): "
                    f"`pip install {_wheel_for(device, t)}`")


def native_targets(targets: "dict[str, Target] | None" = None) -> tuple[list[str], list[str]]:
    """'cpu' plus the best table target for each probed GPU, and notes on GPUs no target serves."""
    tables, err = _table_targets(targets)
    if tables is None:
        return [], [f"the target tables could not be read ({err})"]
    names: list[str] = ["cpu"] if "cpu" in tables else []
    notes: list[str] = []
    for dev in probe_devices():
        if dev.kind == "cpu":
            continue
        if dev.kind == "cuda" and dev.cc is not None:
            # Exact, else the newest same-major SASS not newer than the device (PTX is a build choice: +PTX).
            fits = []
            for n, t in tables.items():
                sm = _parse_sm(t.arch) if t.backend.name == "cuda" and t.arch else None
                if sm and not sm[2] and sm[0] == dev.cc[0] and sm[1] <= dev.cc[1]:
                    fits.append((sm[1], n))
            pick = max(fits)[1] if fits else None
        else:
            chosen, _ = table_choice(dev, tables)
            pick = chosen.plugin.target if chosen else None
        if pick is None:
            notes.append(f"native: no target serves {dev.describe()}; it is skipped")
        elif pick not in names:
            names.append(pick)
    return names, notes


def native_target_names(targets: "dict[str, Target] | None" = None) -> list[str]:
    """The target names for ``STRATA_TARGETS=native``: the CPU and the devices seen here."""
    names, notes = native_targets(targets)
    for n in notes:
        log.info("%s", n)
    return names


# --------------------------------------------------------------------------------------------- explain

def build_advice(device: Device, target: "Target") -> list[str]:
    """How to get ``target``'s plugin before (or without) a release on PyPI: build it here with the family's
    toolchain (docs/building.md)."""
    wheel_name = _wheel_for(device, target)
    if wheel_name == "strata-kernels":
        return []
    family = wheel_name[len("strata-kernels-"):]
    t = target.name
    return [f"(on PyPI once a release is published; until then build it here, with the {family} toolchain:",
            f" `strata-kernels wheel --family {family} --targets {t} --out dist` then "
            f"`pip install --find-links dist {wheel_name}`,",
            f" or `strata-kernels build --targets {t}` into the per-user plugin directory,",
            f" or `STRATA_TARGETS=\"cpu;{t}\" pip install .` in a source checkout; see docs/building.md)"]


def _advice(device: Device, targets=None) -> list[str]:
    chosen, hint = table_choice(device, targets)
    lines = [f"no installed plugin fits {device.arch}; {hint}"]
    if device.kind != "cpu":
        tables, _ = _table_targets(targets)
        if chosen is not None and tables:
            lines += build_advice(device, tables[chosen.plugin.target])
        lines.append(f"or put a plugin built for it in a directory named by {ENV_PLUGIN_PATH}, or force "
                     f"an installed one with {ENV_TARGET}=<target>; arrays on the host still run on the CPU plugin")
    return lines


def _trace_device(res: Resolution, targets=None) -> list[str]:
    dev = res.device
    lines = [dev.describe()]
    other: dict[str, list[Candidate]] = {}
    for c in res.candidates:
        b = c.plugin.backend
        if b and b != dev.kind:
            other.setdefault(b, []).append(c)
            continue
        where = f"{c.plugin.path} [{c.plugin.source}]"
        lines.append(f"  {c.verdict}  {c.plugin.target:<10} {c.reason}")
        lines.append(f"          {'':<10} {where}")
    for b, cs in sorted(other.items()):
        names = ", ".join(dict.fromkeys(c.plugin.target for c in cs))
        lines.append(f"  REJECT  {names}: backend {b} plugin, device is {dev.kind}")
    for n in res.notes:
        lines.append(f"  note: {n}")
    if res.chosen is not None:
        how = f" by {res.chosen.how}" if res.chosen.how else ""
        lines.append(f"  => chosen: {res.chosen.plugin.target}{how} ({res.chosen.plugin.path})")
        lines.append(f"     variants: {_variant_line(dev, res.chosen.plugin.manifest)}")
        served = geometry_plugins(res)
        if any(c is not res.chosen for c in served.values()):
            by = {}
            for geom, c in served.items():
                by.setdefault(id(c), (c, []))[1].append(geom)
            lines.append("     geometries (head_dim x G): " + "; ".join(
                f"{_tags(gs)} by {c.plugin.path.name} [{c.plugin.origin}]" for c, gs in by.values()))
        else:
            lines.append(f"     geometries (head_dim x G): {_tags(served)}; others: `strata-kernels build "
                         f"--targets {res.chosen.plugin.target} --geometries HDxG`")
    else:
        lines.append("  => no plugin chosen")
        if not res.notes:
            lines += [f"     {a}" for a in _advice(dev, targets)]
            chosen, _ = table_choice(dev, targets)
            tables, _ = _table_targets(targets)
            if chosen is not None and tables:
                t = tables[chosen.plugin.target]
                lines.append(f"     with {t.name} it would run: "
                             f"{_variant_line(dev, {'dispatch_variants': list(t.variants)})}")
    return lines


def _variant_line(dev: Device, manifest: dict | None) -> str:
    """What the plugin's automatic dispatch would run on ``dev`` under this process's switches (docs/variants.md)."""
    from .dispatch_model import summary
    m = manifest or {}
    variants = m.get("dispatch_variants") or m.get("variants") or ["fp32"]
    arch = dev.arch if dev.kind in ("cuda", "hip") else dev.kind
    if dev.kind == "cuda" and dev.cc is not None:
        arch = f"sm_{dev.cc[0]}{dev.cc[1]}"
    switches = sorted(k for k in os.environ if k.startswith("STRATA_") and not k.startswith("STRATA_KERNELS_"))
    return summary(dev.kind, arch, variants) + (f" (switches: {', '.join(switches)})" if switches else "")


def explain(simulate: str | None = None, *, devices: list[Device] | None = None,
            plugins: list[PluginFile] | None = None, targets: "dict[str, Target] | None" = None) -> str:
    """The resolver's trace: per device, every installed plugin with ACCEPT/REJECT and the reason, and the
    chosen one. ``simulate="sm_86,gfx1100"`` runs the same rules for devices that are not here."""
    from . import __version__
    out = [f"strata-kernels {__version__} resolver (plugin ABI {ABI_VERSION})"]
    if plugins is None:
        plugins, disc_notes = discover()
    else:
        disc_notes = []
    if devices is None:
        if simulate:
            devices = _simulate_devices(simulate)
            out.append(f"devices: simulated from {simulate!r} (CUDA driver "
                       f"{_cuda_version_str(_simulated_driver())}; set {ENV_SIMULATE_DRIVER} to change)")
        else:
            devices = probe_devices()
            out.append("devices: probed here")
            out += [f"  - {n}" for n in probe_notes()]
    forced = _forced_target()
    if forced:
        out.append(f"override: {ENV_TARGET}={forced}")
    out.append(f"plugins found: {len(plugins)}" + ("" if plugins else
               f" (none in {_package_plugin_dir()}, in entry points {ENTRY_POINT_GROUP!r}, in {user_plugin_dir()} or in "
               f"{ENV_PLUGIN_PATH})"))
    for p in plugins:
        if p.error:
            out.append(f"  {p.path.name}  [{p.source}]  unusable: {p.error}")
            continue
        m = p.manifest
        code = ", ".join(m.get("sass", []) + m.get("ptx", []) + m.get("gfx", [])) or m.get("host") or ""
        tc = m.get("toolchain") or {}
        mdv = m.get("min_driver_version") or 0
        needs = f" (needs a driver for CUDA {_cuda_version_str(mdv)}+)" if m.get("backend") == "cuda" and mdv else ""
        out.append(f"  {p.target:<10} {m.get('backend'):<5} {code:<24} {tc.get('name') or ''} "
                   f"{tc.get('version') or ''}{needs}  [{p.source}] {p.path}")
        out.append(f"  {'':<10} geometries (head_dim x G): {_tags(plugin_geometries(p))}")
    out += [f"  - {n}" for n in disc_notes]
    out.append("CUDA plugin wheels and the driver each needs: " +
               "; ".join(f"strata-kernels-{f}: {need}" for f, need in FAMILY_DRIVERS.items()))
    for res in resolve(devices, plugins):
        out.append("")
        out += _trace_device(res, targets)
    return "\n".join(out) + "\n"


_simulate_devices = simulate


# ------------------------------------------------------------------------------------------- loading

_loaded: dict[tuple, object] = {}                 # (kind, index, geometry or None) -> the loaded plugin
_libs: dict[str, object] = {}                     # plugin path -> the loaded plugin (one dlopen per file)
_resolutions: dict[tuple[str, int], Resolution] = {}


def resolution_for(kind: str, index: int = 0) -> Resolution:
    """The resolution for one probed device (cached per (kind, index))."""
    key = (kind, index)
    if key not in _resolutions:
        devices = probe_devices()
        dev = next((d for d in devices if d.kind == kind and d.index == index), None)
        if dev is None:
            seen = ", ".join(d.label for d in devices)
            notes = "".join(f"\n  - {n}" for n in probe_notes())
            raise Unsupported(f"no {kind} device {index} here (devices seen: {seen}); the probe says:{notes}")
        _resolutions[key] = resolve([dev])[0]
    return _resolutions[key]


# ------------------------------------------------------------------------------------------- geometries

def plugin_geometries(plugin: PluginFile) -> list[tuple[int, int]]:
    """The (head_dim, G) pairs a plugin is built for (its manifest's geometries)."""
    out = []
    for g in (plugin.manifest or {}).get("geometries") or []:
        if isinstance(g, dict) and isinstance(g.get("head_dim"), int) and isinstance(g.get("group"), int):
            out.append((g["head_dim"], g["group"]))
    return out


def device_geometries(res: Resolution) -> list[tuple[int, int]]:
    """Every (head_dim, G) some accepted plugin for the device carries, sorted."""
    return sorted({g for c in res.candidates if c.accepted for g in plugin_geometries(c.plugin)})


def geometry_plugins(res: Resolution) -> dict[tuple[int, int], Candidate]:
    """(head_dim, G) -> the plugin that serves it on the device: the best accepted plugin that carries it, so a
    plugin of extra geometries (`strata-kernels build --geometries`) serves those, and the table's plugin its own."""
    out: dict[tuple[int, int], Candidate] = {}
    for c in res.candidates:
        if c.accepted:
            for g in plugin_geometries(c.plugin):
                out.setdefault(g, c)
    return dict(sorted(out.items()))


def _tags(geoms) -> str:
    return ", ".join(f"{hd}x{g}" for hd, g in geoms) or "none"


def missing_geometry(res: Resolution, geometry: tuple[int, int]) -> GeometryMissing:
    """The error for a call whose (head_dim, G) no accepted plugin carries: what the plugins carry, and the command
    that builds the missing one."""
    from .geometry import why_not
    hd, g = geometry
    have = [f"{c.plugin.target} [{c.plugin.origin}] is built for {_tags(plugin_geometries(c.plugin))}"
            for c in res.candidates if c.accepted]
    listing = "; ".join(have) or "none is installed"
    bad = why_not(hd, g)
    if bad:
        return GeometryMissing(f"no strata-kernels plugin can be built for (head_dim {hd}, G {g}): {bad} "
                               f"(the plugins for {res.device.describe()}: {listing})", device_geometries(res))
    target = res.chosen.plugin.target if res.chosen else res.device.arch
    command = f"strata-kernels build --targets {target} --geometries {hd}x{g}"
    return GeometryMissing(
        f"no installed plugin for {res.device.describe()} is built for (head_dim {hd}, G {g}) ({listing}). Build "
        f"one with `{command}`: it compiles the kernels for that geometry into the per-user plugin directory, which "
        f"the resolver searches beside the installed plugins (it needs the target's toolchain here; "
        f"docs/building.md)", device_geometries(res))


# ------------------------------------------------------------------------------------------- loading

def plugin_for(kind: str, index: int = 0, geometry: tuple[int, int] | None = None) -> object:
    """Load the plugin chosen for device (kind, index) and, given ``geometry`` (head_dim, G), the best accepted
    plugin that carries it; cached. Raises Unsupported with the full trace when no plugin fits, GeometryMissing
    (a ValueError naming the build command) when none carries the geometry, PluginError when none loads."""
    key = (kind, index, geometry)
    if key in _loaded:
        return _loaded[key]
    res = resolution_for(kind, index)
    if res.chosen is None:
        trace = "\n".join(_trace_device(res))
        raise Unsupported(f"no strata-kernels plugin can run on {res.device.describe()}.\n{trace}\n"
                          f"Overrides: {ENV_TARGET}=<target> forces an installed plugin; {ENV_PLUGIN_PATH} adds "
                          f"plugin directories; `strata-kernels explain` shows this trace.")
    from . import _loader
    tries = [res.chosen] + [c for c in res.candidates if c.accepted and c is not res.chosen]
    if geometry is not None:
        tries = [c for c in tries if tuple(geometry) in plugin_geometries(c.plugin)]
        if not tries:
            raise missing_geometry(res, tuple(geometry))
    failures = []
    for c in tries:
        path = str(c.plugin.path)
        lib = _libs.get(path)
        if lib is None:
            try:
                lib = _loader.load(path)
            except Exception as e:  # noqa: BLE001 - dlopen/ABI failures become one PluginError below
                failures.append(f"{c.plugin.path}: {e}")
                res.notes.append(f"loading {c.plugin.target} failed: {e}")
                continue
            abi = getattr(lib, "abi_version", ABI_VERSION)
            if abi != ABI_VERSION:
                failures.append(f"{c.plugin.path}: loaded, but it speaks ABI {abi}, not {ABI_VERSION}")
                continue
            _libs[path] = lib
        if failures:
            res.notes.append(f"fell back to {c.plugin.target} after the better plugin(s) failed to load")
            if geometry is None:
                res.chosen = c
        _loaded[key] = lib
        return lib
    raise PluginError(f"no accepted plugin for {res.device.describe()} could be loaded: " + "; ".join(failures))


def clear_cache() -> None:
    """Forget probed devices, read manifests, resolutions and loaded-plugin handles (for tests)."""
    _probe.cache_clear()
    _read_manifest_cached.cache_clear()
    _loaded.clear()
    _libs.clear()
    _resolutions.clear()
