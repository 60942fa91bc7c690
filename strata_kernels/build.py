"""Drive the build: pick targets, render them, one CMake configure, one Ninja run, atomic install.

The build directory keeps a key over the package version, templates, target tables, toolchains and flags:
when nothing changed, nothing runs; when a template changed, codegen rewrites only the files whose bytes
changed and Ninja recompiles only those.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from . import __version__, codegen, toolchains
from .paths import cache_home, user_plugin_dir
from .errors import BuildError, ToolchainError
from .geometry import Geometry, parse as parse_geometries
from .targets import Selection, all_targets, extra_geometries, package_root, parse_target_list

Log = Callable[[str], None]


@dataclass
class BuildResult:
    built: dict[str, Path] = field(default_factory=dict)        # target -> installed plugin
    isa_only: dict[str, Path] = field(default_factory=dict)     # target -> directory of device assembly (HIP)
    checked_only: dict[str, Path] = field(default_factory=dict)  # target -> its generated sources, checked against
                                                                 # the SYCL headers (no DPC++ compiler, no plugin)
    skipped: dict[str, str] = field(default_factory=dict)       # target -> reason
    loader: Path | None = None
    up_to_date: bool = False
    seconds: float = 0.0
    spec: str = ""                                               # the target list asked for ("native", "cpu;sm_89")
    notes: list[str] = field(default_factory=list)               # what "native" saw and left out


RECORD = "build-record.json"


def write_record(result: BuildResult, path: Path) -> None:
    """What a build made and skipped, and why, for `strata-kernels info`. Names only, no paths or times, so a
    wheel that carries it stays reproducible."""
    doc = {"version": __version__, "spec": result.spec, "built": sorted(result.built),
           "isa_only": sorted(result.isa_only), "checked_only": sorted(result.checked_only),
           "skipped": dict(sorted(result.skipped.items())), "notes": result.notes}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def read_record(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def default_build_dir() -> Path:
    env = os.environ.get("STRATA_KERNELS_BUILD_DIR")
    if env:
        return Path(env)
    return cache_home() / f"build-{__version__}"


def default_install_dir() -> Path:
    """The per-user plugin directory (the resolver searches it); never the installed package, which pip owns."""
    return user_plugin_dir()


def _same_but_cuda(old: list[str] | None, new: list[str]) -> bool:
    """Two configure argument lists that differ only in one naming the CUDA compiler and the other not (a target list
    with and one without CUDA targets): CMake can add or keep the CUDA language in place. A different nvcc cannot."""
    if old is None:
        return False
    cuda = lambda a: [x for x in a if x.startswith("-DCMAKE_CUDA_COMPILER=")]  # noqa: E731
    rest = lambda a: [x for x in a if not x.startswith("-DCMAKE_CUDA_COMPILER=")]  # noqa: E731
    return rest(old) == rest(new) and (not cuda(old) or not cuda(new))


def _is_explicit(spec: str) -> bool:
    return not all(tok.lower() in ("all", "native") for tok in re.split(r"[;,\s]+", spec.strip()) if tok)


def _tool(name: str, module: str | None, minimum: tuple[int, ...] | None = None) -> str:
    """cmake / ninja: the pip-installed one (build requirements) first, then PATH."""
    path = None
    if module:
        try:
            mod = __import__(module)
            cand = Path(getattr(mod, "BIN_DIR", "")) / name
            if cand.is_file():
                path = str(cand)
        except ImportError:
            pass
    path = path or shutil.which(name)
    if not path:
        raise ToolchainError(f"{name} not found: pip install {name}" + (" (>= 3.26)" if name == "cmake" else ""))
    if minimum:
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"(\d+)\.(\d+)", out)
        if not m or (int(m.group(1)), int(m.group(2))) < minimum:
            raise ToolchainError(f"{path} is {m.group(0) if m else 'of unknown version'}; strata-kernels needs "
                                 f"{name} >= {'.'.join(map(str, minimum))}: pip install '{name}>="
                                 f"{'.'.join(map(str, minimum))}'")
    return path


def loader_config() -> dict:
    """How the nanobind module is built: stable ABI on Python >= 3.12 (one wheel for 3.12+)."""
    import nanobind
    src = package_root() / "csrc"
    return {
        "python_version": f"{sys.version_info.major}.{sys.version_info.minor}",
        "stable_abi": sys.version_info >= (3, 12),
        "nanobind_dir": Path(nanobind.cmake_dir()).as_posix(),
        "source": (src / "_loader.cpp").as_posix(),
        "include": src.as_posix(),
    }


def _key(selections: list[Selection], tcs: dict, loader: dict | None, root: Path) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({
        "version": __version__,
        "targets": [[s.plugin, s.ptx, [g.tag for g in s.target.geometries]] for s in selections],
        "toolchains": {k: v.as_dict() for k, v in sorted(tcs.items())},
        "loader": loader,
        "python": sys.executable,
    }, sort_keys=True).encode())
    for p in sorted(root.rglob("*.j2")):
        h.update(p.as_posix().encode() + p.read_bytes())
    for s in selections:
        h.update(s.target.backend.table.read_bytes())
    for p in sorted((package_root() / "csrc").glob("*")):
        h.update(p.read_bytes())
    return h.hexdigest()


def _target_flags(sel: Selection, tc: toolchains.Toolchain) -> list[str]:
    if tc.name == codegen.DRIVER_TOOLCHAIN:
        return ["-O3", "-ffp-contract=off", "ptxas --fmad=false"]
    return toolchains.cuda_flags(tc) if sel.target.backend.name == "cuda" else []


def _install(src: Path, dest_dir: Path) -> Path:
    """Write to a temporary name, then rename: an interrupted build never leaves a half-written plugin."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / src.name
    if dest.is_file() and dest.read_bytes() == src.read_bytes():
        return dest
    tmp = dest_dir / f".{src.name}.tmp{os.getpid()}"
    shutil.copy2(src, tmp)
    os.replace(tmp, dest)
    return dest


def _run_streamed(cmd: list[str], cwd: Path, log: Log, env: dict | None = None, progress: bool = False) -> None:
    """Run a build step, echoing Ninja's [n/m] progress; on failure raise with the last lines of output."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-60:]
        if progress and re.match(r"^\[\d+/\d+\]", line):
            log("  " + line[:160])
        elif "error" in line.lower() or "warning" in line.lower():
            log("  " + line[:300])
    rc = proc.wait()
    if rc != 0:
        raise BuildError(f"{' '.join(cmd[:2])} failed (exit {rc}); last output:\n" + "\n".join(tail))


ONLY_GEOMETRIES_ENV = "STRATA_ONLY_GEOMETRIES"


def only_geometries(selections: list[Selection], spec: str | None, *, log: Log = print) -> list[Selection]:
    """``STRATA_ONLY_GEOMETRIES`` (``"256x12"``): each table plugin with only those of its table's geometries, for a
    quick build (a test, a device probe). The plugin keeps its name; its manifest lists the geometries it holds."""
    if not spec:
        return selections
    try:
        wanted = parse_geometries(spec)
    except ValueError as e:
        raise BuildError(f"{ONLY_GEOMETRIES_ENV}={spec!r}: {e}") from None
    out = []
    for sel in selections:
        keep = tuple(g for g in sel.target.geometries if g in wanted)
        if not keep:
            raise BuildError(f"{ONLY_GEOMETRIES_ENV}={spec!r} names none of {sel.target.name}'s geometries "
                             f"({', '.join(g.tag for g in sel.target.geometries)}); unset it, or build another "
                             f"geometry with `strata-kernels build --geometries`")
        if len(keep) < len(sel.target.geometries):
            log(f"strata-kernels: {sel.target.name}: only {', '.join(g.tag for g in keep)} ({ONLY_GEOMETRIES_ENV})")
        out.append(replace(sel, target=replace(sel.target, geometries=keep)))
    return out


def with_geometries(selections: list[Selection], geometries: "str | tuple[Geometry, ...] | None", *,
                    table_plugins: bool, log: Log = print) -> list[Selection]:
    """The selections to build when ``geometries`` are asked for: per target, a plugin of those its table lacks
    (``libstrata_<target>-128x4.so``), beside the table's plugin (``table_plugins``) or alone."""
    if not geometries:
        return selections
    wanted = parse_geometries(geometries) if isinstance(geometries, str) else tuple(geometries)
    out: list[Selection] = []
    for sel in selections:
        if table_plugins:
            out.append(sel)
        extra = extra_geometries(sel, wanted)
        if extra is None:
            log(f"strata-kernels: {sel.target.name}: its table's plugin already has "
                f"{', '.join(g.tag for g in wanted)}; no extra plugin"
                + ("" if table_plugins else f" (`strata-kernels build --targets {sel.target.name}` builds that one)"))
        else:
            out.append(extra)
    return out


def build(spec: str | None = None, *, build_dir: Path | None = None, install_dir: Path | None = None,
          with_loader: bool = False, loader_dir: Path | None = None, jobs: int | None = None,
          geometries: "str | tuple[Geometry, ...] | None" = None, table_plugins: bool = True,
          family: str | None = None, log: Log = print) -> BuildResult:
    """Build the plugins of ``spec`` (``STRATA_TARGETS``, default ``native``) and install them. ``geometries``
    (``"128x4,128x8"``): also a plugin per target with those of them its table lacks; ``table_plugins=False``
    builds only those (`strata-kernels build --geometries`). ``family``: the plugin-wheel family being built (its
    toolchain rule, toolchains.for_target)."""
    t0 = time.monotonic()
    if isinstance(geometries, str):
        geometries = parse_geometries(geometries)     # a bad geometry is refused before anything is probed
    spec = spec or os.environ.get("STRATA_TARGETS") or "native"
    explicit = _is_explicit(spec)
    native = None
    result = BuildResult(spec=spec)
    if "native" in spec.lower():
        from .resolve import native_targets, probe_devices
        native, notes = native_targets(all_targets())
        gpus = [d.describe() for d in probe_devices() if d.kind != "cpu"]
        notes = [f"native: the CPU and the GPUs seen here ({'; '.join(gpus) or 'none seen'}): "
                 f"{', '.join(native) or 'nothing'}"] + notes
        result.notes += notes
        for note in notes:
            log(f"strata-kernels: {note}")
    selections = parse_target_list(spec, all_targets(), native=native)
    selections = only_geometries(selections, os.environ.get(ONLY_GEOMETRIES_ENV), log=log)
    selections = with_geometries(selections, geometries, table_plugins=table_plugins, log=log)
    build_dir = Path(build_dir or default_build_dir()).resolve()
    install_dir = Path(install_dir or default_install_dir()).resolve()

    chosen: list[Selection] = []
    tcs: dict[str, toolchains.Toolchain] = {}
    for sel in selections:
        tc = toolchains.for_target(sel.target, family)
        if not tc.available:
            if explicit:
                raise ToolchainError(f"target {sel.target.name} was asked for but cannot be built: {tc.reason}")
            result.skipped[sel.target.name] = tc.reason
            log(f"strata-kernels: skipping {sel.target.name}: {tc.reason}")
            continue
        chosen.append(sel)
        tcs[sel.plugin] = tc
    if not chosen and not with_loader:
        log("strata-kernels: nothing to build")
        result.seconds = time.monotonic() - t0
        return result

    loader = loader_config() if with_loader else None
    gen_dir, cmake_dir = build_dir / "gen", build_dir / "cmake"
    key_file = build_dir / "key.json"
    hip = {s.plugin: codegen.hip_cmake_info(s.target) for s in chosen if s.target.backend.name == "hip"}
    isa_targets = {n for n, h in hip.items() if h["mode"] == "isa"}
    sycl = {s.plugin: codegen.sycl_cmake_info(s.target) for s in chosen if s.target.backend.name == "sycl"}
    check_targets = {n for n, i in sycl.items() if i["mode"] == "check"}
    outputs = {s.plugin: cmake_dir / "plugins" / f"libstrata_{s.plugin}.so" for s in chosen
               if s.plugin not in isa_targets | check_targets}
    key = _key(chosen, tcs, {"loader": loader, "hip": hip, "sycl": sycl}, codegen.templates_dir())

    stale = not (key_file.is_file() and key_file.read_text() == key and all(p.is_file() for p in outputs.values())
                 and all(list((cmake_dir / "isa" / n).glob("*.s")) for n in isa_targets)
                 and all(list((cmake_dir / "sycl-check" / n).glob("*.ok")) for n in check_targets)
                 and (not loader or list((cmake_dir / "loader").glob("_loader*.so"))))
    names = ", ".join(s.name for s in chosen) + (" + loader" if loader else "")
    if not stale:
        log(f"strata-kernels: {names}: up to date ({build_dir})")
        result.up_to_date = True
    else:
        log(f"strata-kernels: building {names} in {build_dir}")
        rendered = [codegen.render_target(s, gen_dir, toolchain=tcs[s.plugin].as_dict(),
                                          flags=_target_flags(s, tcs[s.plugin]))
                    for s in chosen]
        codegen.copy_abi_header(gen_dir)
        driver = {r.name: codegen.driver_cmake_info(r, tcs[r.name]) for r in rendered
                  if tcs[r.name].name == codegen.DRIVER_TOOLCHAIN}
        codegen.render_cmake(rendered, gen_dir, loader=loader, hip=hip, sycl=sycl, driver=driver)
        cmake = _tool("cmake", "cmake", (3, 26))
        ninja = _tool("ninja", "ninja")
        env = dict(os.environ)
        args = [cmake, "-S", str(gen_dir), "-B", str(cmake_dir), "-G", "Ninja",
                f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release"]
        nvcc = next((t.path for t in tcs.values() if t.name == "nvcc"), None)
        if nvcc:
            args.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
        launcher = shutil.which("ccache") or shutil.which("sccache")
        if launcher:
            args += [f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}"]
        if loader:
            args.append(f"-DPython_EXECUTABLE={sys.executable}")
        # A build directory configured by another cmake (pip's build environments are temporary), compiler or
        # Python cannot be reused: start it afresh rather than fail inside Ninja's regeneration step.
        stamp = cmake_dir / "strata-configure.json"
        if (cmake_dir / "build.ninja").is_file():
            old = json.loads(stamp.read_text()) if stamp.is_file() else None
            if old != args and not _same_but_cuda(old, args):
                log("strata-kernels: the build directory was configured differently; reconfiguring")
                shutil.rmtree(cmake_dir)
            elif old != args:
                # Only the CUDA compiler came or went with the target list (the same nvcc): configure again in place,
                # so the objects of targets built before are kept.
                log("strata-kernels: configuring (cmake, in place: the CUDA targets changed)")
                _run_streamed(args, build_dir, log, env)
                stamp.write_text(json.dumps(args))
        if not (cmake_dir / "build.ninja").is_file():
            log("strata-kernels: configuring (cmake)")
            _run_streamed(args, build_dir, log, env)
            stamp.write_text(json.dumps(args))
        jobs = jobs or int(os.environ.get("MAX_JOBS", "0") or 0) or os.cpu_count() or 1
        log(f"strata-kernels: compiling with {jobs} job(s) (ninja)")
        tb = time.monotonic()
        _run_streamed([ninja, "-C", str(cmake_dir), f"-j{jobs}"], build_dir, log, env, progress=True)
        log(f"strata-kernels: compiled in {time.monotonic() - tb:.1f} s")
        key_file.write_text(key)
    for name in sorted(isa_targets):
        isa_dir = cmake_dir / "isa" / name
        files = sorted(isa_dir.glob("*.s"))
        if not files:
            raise BuildError(f"the build finished but no ISA was written for {name} in {isa_dir}")
        result.isa_only[name] = isa_dir
        log(f"strata-kernels: {name}: ISA only, no plugin: {hip[name]['why']} ({len(files)} file(s) in {isa_dir})")
    for name in sorted(check_targets):
        stamps = sorted((cmake_dir / "sycl-check" / name).glob("*.ok"))
        if not stamps:
            raise BuildError(f"the build finished but no SYCL header check of {name} was recorded in "
                             f"{cmake_dir / 'sycl-check' / name}")
        result.checked_only[name] = gen_dir / name
        h = sycl[name]["headers"]
        log(f"strata-kernels: {name}: checked against the SYCL headers of {h['origin']} ({h['include']}), no plugin: "
            f"{sycl[name]['why']} ({len(stamps)} source(s) in {gen_dir / name}, by {sycl[name]['cxx']})")
    for name, src in outputs.items():
        if not src.is_file():
            raise BuildError(f"the build finished but {src} is missing")
        result.built[name] = _install(src, install_dir)
        log(f"strata-kernels: installed {result.built[name]} ({src.stat().st_size / 1e6:.2f} MB)")
    if loader:
        mods = sorted((cmake_dir / "loader").glob("_loader*.so"))
        if not mods:
            raise BuildError(f"the loader was not built in {cmake_dir / 'loader'}")
        result.loader = _install(mods[0], Path(loader_dir or package_root()))
        log(f"strata-kernels: installed {result.loader}")
    result.seconds = time.monotonic() - t0
    return result
