"""Plugin wheels per toolchain family : build a family's targets and package them reproducibly.

A family is a name in the targets' ``families`` lists (``cuda13``, ``cuda12``, ``rocm``, ``sycl``; ``core`` is the
core wheel that ``pip wheel .`` builds). Its wheel ``strata-kernels-<family>`` holds one package,
``strata_kernels_<family>/``, with the plugins (``libstrata_<target>.so``), each plugin's manifest as JSON and a size
report; it depends on ``strata-kernels==<the same version>`` and registers the package in the entry-point group
``strata_kernels.plugins``, where the resolver finds it without importing it.

Toolkit rule of the family names (the resolver reads the same convention): ``cuda<N>`` is built with a CUDA N.x
nvcc, so its plugins run on drivers of major >= N; ``rocm`` with the HIP clang; ``sycl`` with a DPC++ compiler.

Reproducible: entries sorted, every timestamp ``SOURCE_DATE_EPOCH`` (default 1980-01-01, the zip epoch), fixed
permissions, and plugins linked stripped (no build-dependent symbol table). nvcc names anonymous namespaces after
the source path, so two builds give the same bytes when they use the same build directory (the default does).
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import platform
import re
import shutil
import struct
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, toolchains
from .errors import BuildError, TargetError, ToolchainError
from .targets import Target, all_targets

DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z: the earliest time a zip entry can hold
ENTRY_POINT_GROUP = "strata_kernels.plugins"

# Size budgets (README, "Wheels", says why these numbers): the sum of a family's plugin files and each plugin, in MB.
# A wheel past a budget is not written; raise a budget only with the reason in the README.
# Raised for the prebuilt geometries (issue 14; backends/cuda.toml ships 8 (head_dim, G) pairs): measured with nvcc
# 13.0, each pair adds 0.21 MB to sm_90's plugin (0.95 -> 2.19 MB at 7 pairs) and 0.27 MB to sm_80's, which also
# carries compute_80 PTX (1.00 -> 2.92 MB at 8 pairs): first cuda 1.6 -> 3.2 MB per target, cuda13 10 -> 24 MB (about
# 20.5 MB estimated from those two for its nine targets), cuda12 8 -> 14 MB (about 12 MB for its six).
# cuda12 measured (strata-kernels wheel --family cuda12, all 8 pairs, 2026-12-01): 24.62 MB of plugins: sm_70 1.57,
# sm_75 1.66, sm_80 9.36 (9.16 MB of it device code: its compute_80 PTX travels as text), sm_86/89 3.48, sm_90 5.07.
# Its device code sits in the plugin's own uncompressed container (PyPI has no fatbinary to compress it as nvcc's
# fatbins are), hence 10 MB per cuda12 target and 26 MB for the family.
# cuda13 measured the same way (nvcc 13.0, all 8 pairs, 2026-12-01): 23.50 MB: sm_80 3.68 and sm_120 3.57 (the two
# that carry PTX), sm_90 2.82, sm_100/103/110 2.47-2.48, sm_86/89 2.32, sm_75 1.35: so 4.0 MB per CUDA target and
# 26 MB for cuda13 (10 % above the measure).
# The 24.62 MB above had v2, v2t, split and grouped left out of the cuda12 plugins; with every variant of the table
# again (the H200 ran them, docs/results/2026-12-01-h200-cuda12/run2), measured the same way (clang 19 + ptxas 12.9,
# all 8 pairs, 2026-12-01): 35.79 MB: sm_80 14.11 (5.10 MB SASS, 8.75 MB its compute_80 PTX as text), sm_90 7.41,
# sm_86/89 5.30, sm_75 2.10, sm_70 1.57; the wheel 9.36 MB compressed. So 16 MB per cuda12 target and 40 MB for the
# family (12-13 % above the measure).
# rocm and sycl ship the same 8 pairs within their budgets as they were: gfx1030 0.46 MB (measured), gfx11/gfx12
# 1.08-1.18 MB and the rocm family ~5.0 MB, the sycl plugin ~0.8 MB (estimated; README "Geometries" says how).
# cuda13 measured again (nvcc 13.0, all 8 pairs, 2026-12-04, the tree of the union batches): the kernels added since
# 2026-12-01 (grouped for FP16, K8V4 and Q4_0, its warp-specialized sm_90a form, the union pre-pass's cluster and
# search forms, flash) took the family to 28.97 MB: sm_80 4.43 and sm_120 4.40 (with their PTX), sm_90 4.27 (4.14
# before the union batches), sm_100/103/110 2.99-3.00, sm_86/89 2.76, sm_75 1.35. Past 4.0 per target and 26 for the
# family, `strata-kernels wheel --family cuda13` would refuse the wheel (_check_budget); so 5.0 MB per CUDA target and
# 32 MB for cuda13 (13 % and 10 % above the measure).
# cuda12 measured again the same day (`strata-kernels wheel --family cuda12`, all 8 pairs, which refused the wheel):
# 46.72 MB: sm_80 19.46 (19.15 MB device code, most of it compute_80 PTX as text), sm_90 9.30, sm_86/89 7.14, sm_75
# 2.10, sm_70 1.57. So 22 MB per cuda12 target and 52 MB for the family (13 % and 11 % above); compressing the
# container's entries would take most of sm_80's back (README, "Wheels").
FAMILY_BUDGET_MB = {"cuda13": 32.0, "cuda12": 52.0, "rocm": 6.0, "sycl": 2.0}
TARGET_BUDGET_MB = {"cuda": 5.0, "hip": 1.5, "sycl": 1.5}
FAMILY_TARGET_BUDGET_MB = {"cuda12": 22.0}  # a family's own per-target budget, where it differs from its backend's


# ------------------------------------------------------------------------------------------------ families

def families(targets: dict[str, Target] | None = None) -> list[str]:
    """Every plugin-wheel family named in the tables (``core`` excluded: that is ``pip wheel .``)."""
    targets = targets if targets is not None else all_targets()
    return sorted({f for t in targets.values() for f in t.families} - {"core"})


def family_targets(family: str, targets: dict[str, Target] | None = None) -> list[Target]:
    targets = targets if targets is not None else all_targets()
    known = families(targets)
    if family not in known:
        raise TargetError(f"unknown family {family!r}; the backend tables name: {', '.join(known)}"
                          + (" (the core wheel is built with `pip wheel .`)" if family == "core" else ""))
    from .targets import _sort_key
    return sorted((t for t in targets.values() if family in t.families), key=lambda t: _sort_key(t.name))


def family_toolchain(family: str, members: list[Target]) -> toolchains.Toolchain:
    """The toolchain that builds ``family`` here; ``reason`` says why not (then nothing is built)."""
    backends = {t.backend.name for t in members}
    if len(backends) != 1:
        raise TargetError(f"family {family} mixes backends {sorted(backends)}; a plugin wheel is built by one toolchain")
    tc = toolchains.for_target(members[0])
    if not tc.available and not tc.path:
        return tc
    if members[0].backend.name == "sycl" and tc.available:
        mode, why = toolchains.sycl_build_mode(tc)
        if mode != "plugin":  # header checks only: nothing a wheel could carry
            return toolchains.Toolchain(tc.name, tc.path, tc.version, f"family {family} needs a SYCL plugin: {why}")
    m = re.fullmatch(r"cuda(\d+)", family)
    if m:
        major = int(m.group(1))
        if major == 12:  # a CUDA 12.x nvcc, else PyPI's CUDA 12.9 with the driver-API launch (toolchains.for_target)
            return toolchains.for_target(members[0], family)
        base = toolchains.nvcc()
        have = toolchains._version_tuple(base.version)[0]
        if have != major:
            return toolchains.Toolchain(base.name, base.path, base.version,
                                        f"family {family} is built with a CUDA {major}.x nvcc (its plugins then run "
                                        f"on drivers of CUDA {major}.x and newer); found nvcc {base.version} at "
                                        f"{base.path}: set CUDA_HOME to a CUDA {major}.x toolkit")
        return base
    return tc


# ------------------------------------------------------------------------------------------------ ELF facts

_SHT_GNU_VERNEED = 0x6FFFFFFE


def elf_facts(path: Path) -> dict:
    """Section sizes, NEEDED libraries and the highest GLIBC/GLIBCXX/CXXABI version references of an ELF64
    little-endian shared object (enough for the manylinux tag and the size report; no binutils needed)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BuildError(f"{path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = []
    for i in range(shnum):
        name, stype, _flags, _addr, off, size, link, _info, _align, _entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        secs.append((name, stype, off, size, link))

    def cstr(table_off: int, at: int) -> str:
        end = data.index(b"\0", table_off + at)
        return data[table_off + at:end].decode()

    shstr = secs[shstrndx][2]
    sections = {cstr(shstr, s[0]): s for s in secs}
    versions: dict[str, tuple[int, ...]] = {}
    for s in secs:
        if s[1] != _SHT_GNU_VERNEED:
            continue
        strtab = secs[s[4]][2]
        off = s[2]
        while True:
            _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, off)
            a = off + aux
            for _ in range(cnt):
                _hash, _flags, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                m = re.fullmatch(r"([A-Z]+)_([\d.]+)", cstr(strtab, name))
                if m:
                    v = tuple(int(x) for x in m.group(2).split("."))
                    versions[m.group(1)] = max(versions.get(m.group(1), ()), v)
                if not anext:
                    break
                a += anext
            if not nxt:
                break
            off += nxt
    needed: list[str] = []
    if ".dynamic" in sections and ".dynstr" in sections:
        dyn, dynstr = sections[".dynamic"], sections[".dynstr"][2]
        for i in range(dyn[3] // 16):
            tag, val = struct.unpack_from("<qQ", data, dyn[2] + 16 * i)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                needed.append(cstr(dynstr, val))
    return {"sections": {n: s[3] for n, s in sections.items() if n}, "needed": needed,
            "versions": {k: ".".join(map(str, v)) for k, v in sorted(versions.items())}}


def manylinux_tag(files: list[Path | dict], machine: str | None = None) -> str:
    """``manylinux_2_<N>_<arch>`` where N is the newest GLIBC symbol version the files reference (PEP 600); each
    entry is a path or the ``elf_facts`` already read from one."""
    glibc = (2, 17)
    for f in files:
        v = (f if isinstance(f, dict) else elf_facts(f))["versions"].get("GLIBC")
        if v:
            glibc = max(glibc, tuple(int(x) for x in v.split(".")[:2]))
    arch = machine or platform.machine()
    return f"manylinux_{glibc[0]}_{glibc[1]}_{arch}"


# ------------------------------------------------------------------------------------------------ zip writing

def source_date_epoch() -> int:
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        return DEFAULT_EPOCH
    if not raw.isdigit():
        raise ValueError(f"SOURCE_DATE_EPOCH must be a number of seconds, got {raw!r}")
    return max(int(raw), DEFAULT_EPOCH)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(path: Path, files: dict[str, bytes], executable: set[str] = frozenset()) -> None:
    """Write a wheel whose bytes depend only on ``files``: sorted entries, one timestamp, fixed modes, RECORD last."""
    epoch = time.gmtime(source_date_epoch())[:6]
    dist_info = next(n.split("/")[0] for n in files if n.endswith(".dist-info/WHEEL"))
    record_name = f"{dist_info}/RECORD"
    names = sorted(n for n in files if n != record_name)
    record = "".join(f"{n},{_record_hash(files[n])},{len(files[n])}\n" for n in names) + f"{record_name},,\n"
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for n in names + [record_name]:
            info = zipfile.ZipInfo(n, date_time=epoch)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = ((0o100755 if n in executable else 0o100644) << 16)
            info.create_system = 3
            z.writestr(info, files[n] if n != record_name else record.encode())
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------ the family wheel

@dataclass
class WheelResult:
    family: str
    wheel: Path | None = None
    report: Path | None = None
    sizes: dict[str, dict] = field(default_factory=dict)   # target -> {plugin, fatbin, ...}
    build_seconds: float = 0.0
    skipped: str = ""                                       # why nothing was built


def dist_name(family: str) -> str:
    return f"strata-kernels-{family}"


def package_name(family: str) -> str:
    return f"strata_kernels_{family}"


def _metadata(family: str, members: list[str], toolchain: str) -> str:
    return (f"Metadata-Version: 2.1\nName: {dist_name(family)}\nVersion: {__version__}\n"
            f"Summary: strata-kernels plugins of the {family} family ({', '.join(members)})\n"
            f"License: Apache-2.0\nRequires-Python: >=3.11\nRequires-Dist: strata-kernels=={__version__}\n"
            f"Description-Content-Type: text/markdown\n\n"
            f"QSA attention plugins for {', '.join(members)}, built with {toolchain}. Installed beside "
            f"`strata-kernels`, they are found through the entry-point group `{ENTRY_POINT_GROUP}`; "
            f"`strata-kernels explain` lists them.\n")


def _size_row(target: str, so: Path) -> dict:
    facts = elf_facts(so)
    secs = facts["sections"]
    device = secs.get(".nv_fatbin", 0) + secs.get(".hip_fatbin", 0)
    return {"target": target, "plugin_bytes": so.stat().st_size, "device_code_bytes": device,
            "host_code_bytes": secs.get(".text", 0), "needed": facts["needed"], "versions": facts["versions"]}


def build_family_wheel(family: str, out: Path, *, targets: str | None = None, build_dir: Path | None = None,
                       jobs: int | None = None, log=print) -> WheelResult:
    """Build ``family``'s targets (or the ``targets`` subset) and write its wheel to ``out``."""
    from . import build as sk_build
    from .targets import parse_target_list

    t0 = time.monotonic()
    members = family_targets(family)
    if targets:
        sels = parse_target_list(targets)
        names = {t.name for t in members}
        outside = [s.target.name for s in sels if s.target.name not in names]
        if outside:
            raise TargetError(f"--targets {targets!r}: {', '.join(outside)} not in family {family} "
                              f"({', '.join(sorted(names))})")
        spec = ";".join(s.name for s in sels)
        chosen = [s.target for s in sels]
    else:
        spec = ";".join(t.name + ("+PTX" if t.ptx else "") for t in members)
        chosen = members
    result = WheelResult(family)
    tc = family_toolchain(family, chosen)
    if not tc.available:
        result.skipped = tc.reason
        log(f"strata-kernels: family {family}: nothing built: {tc.reason}")
        return result
    # Said before compiling: the ISA of every source at every pair is minutes of work that no wheel could carry.
    isa_only = [t.name for t in chosen
                if t.backend.name == "hip" and toolchains.hip_build_mode(tc, t.arch)[0] != "plugin"]
    if isa_only:
        raise BuildError(f"family {family}: {', '.join(sorted(isa_only))} could only be compiled to ISA here "
                         f"(no device libraries), and a wheel carries loadable plugins only; build with a ROCm "
                         f">= 6 toolchain (ROCM_PATH), or name the loadable subset with --targets")
    log(f"strata-kernels: family {family}: {spec} with {tc.name} {tc.version} ({tc.path})")
    build_dir = Path(build_dir or (sk_build.default_build_dir().parent / f"wheel-{__version__}-{family}"))
    with tempfile.TemporaryDirectory(prefix="strata-wheel-") as tmp:
        stage = Path(tmp) / package_name(family)
        res = sk_build.build(spec, build_dir=build_dir, install_dir=stage, jobs=jobs, family=family, log=log)
        if res.checked_only:
            raise BuildError(f"family {family}: {', '.join(sorted(res.checked_only))} could only be checked against "
                             f"the SYCL headers here (no DPC++ compiler), and a wheel carries loadable plugins only; "
                             f"build with Intel oneAPI DPC++ (icpx -fsycl on PATH, or SYCL_CXX)")
        missing = [t.name for t in chosen if t.name not in res.built]
        if missing:
            raise BuildError(f"family {family}: {', '.join(missing)} were not built")
        result.build_seconds = res.seconds
        pkg = package_name(family)
        files: dict[str, bytes] = {}
        manifests: dict[str, dict] = {}
        from .resolve import read_manifest
        for name in sorted(res.built):
            so = res.built[name]
            files[f"{pkg}/{so.name}"] = so.read_bytes()
            manifests[name] = read_manifest(so)
            files[f"{pkg}/manifests/{name}.json"] = (json.dumps(manifests[name], indent=2, sort_keys=True)
                                                     + "\n").encode()
            result.sizes[name] = _size_row(name, so)
        tag = manylinux_tag([result.sizes[n] for n in sorted(res.built)])  # the ELF facts read just above
        from .targets import _sort_key
        plugin_names = sorted(res.built, key=_sort_key)
        report = {"family": family, "version": __version__, "toolchain": tc.as_dict(), "platform_tag": tag,
                  "targets": [result.sizes[n] for n in plugin_names],
                  "plugin_bytes_total": sum(r["plugin_bytes"] for r in result.sizes.values())}
        _check_budget(family, report, {n: t.backend.name for n, t in ((t.name, t) for t in chosen)})
        files[f"{pkg}/size-report.json"] = (json.dumps(report, indent=2, sort_keys=True) + "\n").encode()
        files[f"{pkg}/__init__.py"] = (
            f'"""strata-kernels plugins of the {family} family: {", ".join(plugin_names)} (data only; the resolver '
            f'finds the .so files here through the entry point, without importing this package)."""\n'
            f'from pathlib import Path\n\n__version__ = "{__version__}"\nTARGETS = {tuple(plugin_names)!r}\n\n\n'
            f'def plugin_dir() -> Path:\n    return Path(__file__).resolve().parent\n').encode()
        di = f"{pkg}-{__version__}.dist-info"
        files[f"{di}/METADATA"] = _metadata(family, plugin_names, f"{tc.name} {tc.version}").encode()
        files[f"{di}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: strata-kernels {__version__}\nRoot-Is-Purelib: false\n"
                                f"Tag: py3-none-{tag}\n").encode()
        files[f"{di}/entry_points.txt"] = f"[{ENTRY_POINT_GROUP}]\n{family} = {pkg}\n".encode()
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        wheel = out / f"{pkg}-{__version__}-py3-none-{tag}.whl"
        write_wheel(wheel, files, executable={f"{pkg}/{Path(p).name}" for p in res.built.values()})
    report["wheel"] = wheel.name
    report["wheel_bytes"] = wheel.stat().st_size
    report["build_seconds"] = round(result.build_seconds, 1)
    result.wheel = wheel
    result.report = out / f"{pkg}-{__version__}-size.json"
    result.report.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    result.build_seconds = time.monotonic() - t0
    log(size_table(report))
    log(f"strata-kernels: wrote {wheel} ({wheel.stat().st_size / 1e6:.2f} MB) in {result.build_seconds:.1f} s; "
        f"size report {result.report}")
    return result


def _check_budget(family: str, report: dict, backends: dict[str, str]) -> None:
    def budget(target: str) -> float:
        return FAMILY_TARGET_BUDGET_MB.get(family, TARGET_BUDGET_MB.get(backends[target], 1e9))
    over = [f"{r['target']} is {r['plugin_bytes'] / 1e6:.2f} MB (budget {budget(r['target'])} MB)"
            for r in report["targets"] if r["plugin_bytes"] / 1e6 > budget(r["target"])]
    total = report["plugin_bytes_total"] / 1e6
    if total > FAMILY_BUDGET_MB.get(family, 1e9):
        over.append(f"the family's plugins are {total:.2f} MB (budget {FAMILY_BUDGET_MB[family]} MB)")
    if over:
        raise BuildError(f"family {family} is over its size budget: {'; '.join(over)}. Look at what grew "
                         f"(size report below); raise the budget in strata_kernels/wheel.py only with the reason in "
                         f"README.md ('Wheels').\n{size_table(report)}")


def size_table(report: dict) -> str:
    rows = [f"{'target':<10} {'plugin MB':>10} {'device code MB':>15} {'host code MB':>13}"]
    for r in report["targets"]:
        rows.append(f"{r['target']:<10} {r['plugin_bytes'] / 1e6:>10.2f} {r['device_code_bytes'] / 1e6:>15.2f} "
                    f"{r['host_code_bytes'] / 1e6:>13.2f}")
    total = report["plugin_bytes_total"]
    rows.append(f"{'total':<10} {total / 1e6:>10.2f}" + (f"   wheel (compressed) {report['wheel_bytes'] / 1e6:.2f} MB"
                                                          if "wheel_bytes" in report else ""))
    return "\n".join(rows)
