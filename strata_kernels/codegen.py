"""Render a target's source tree from the Jinja2 templates.

Deterministic: the same templates, table and toolchain give byte-identical files; files are only rewritten when
their bytes change, so Ninja rebuilds exactly what an edit touched.
"""
from __future__ import annotations

import hashlib
import json
import math
import platform
import struct
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import jinja2

from . import __version__
from .abi import ABI_VERSION
from .errors import BuildError
from .targets import Selection, Target, package_root, template_for, templates_dir

DRIVER_TOOLCHAIN = "cuda12-driver"  # toolchains.cuda12_driver: kernels launched through the plugin's driver-API layer
_COMMENT = {".cpp": "//", ".cu": "//", ".hip": "//", ".h": "//", ".txt": "#", ".cmake": "#"}


@dataclass
class RenderedTarget:
    """One target's generated tree: what CMake compiles and what the manifest says."""
    target: Target
    ptx: bool
    directory: Path
    sources: list[Path]
    manifest: dict
    flags: list[str] = field(default_factory=list)
    plugin: str = ""             # libstrata_<plugin>.so: the target's name, or with extra geometries theirs too

    @property
    def name(self) -> str:
        return self.plugin or self.target.name


def environment(root: Path | None = None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root or templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def f32_literal(x: float) -> str:
    """A C/C++ literal that is exactly the float32 nearest to x (hex float: no decimal rounding in between)."""
    f32 = struct.unpack("<f", struct.pack("<f", x))[0]
    return f32.hex() + "f"


def geometry_context(g) -> dict:
    return {"head_dim": g.head_dim, "group": g.group, "inv_sqrt_hd": f32_literal(1.0 / math.sqrt(g.head_dim))}


def write_if_different(path: Path, text: str) -> bool:
    """Write only when the bytes change (keeps mtimes, so Ninja skips untouched sources). True if written."""
    data = text.encode()
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return True


def template_hash(target: Target, root: Path | None = None) -> str:
    """sha256 over the templates this target can use (its backend's template_dirs, common/, cmake/) and its
    table: editing another backend's template changes nothing here, so nothing of this target rebuilds."""
    root = root or templates_dir()
    h = hashlib.sha256()
    dirs = sorted(set(target.backend.template_dirs) | {"common", "cmake"})
    for d in dirs:
        for p in sorted((root / d).rglob("*.j2")):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(target.backend.table.read_bytes())
    return h.hexdigest()


def _toolkit_driver(version: str | None) -> int:
    """CUDA toolkit 'X.Y' -> the oldest driver its SASS and static runtime run on: X.0 (CUDA minor-version
    compatibility). PTX JIT needs a driver of at least X.Y; the resolver reads that from toolchain.version."""
    if not version:
        return 0
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return 0
    return major * 1000


def build_manifest(target: Target, ptx: bool, toolchain: dict, flags: list[str], thash: str) -> dict:
    backend = target.backend.name
    sass = [f"sm_{target.sass_arch}"] if backend == "cuda" else []
    return {
        "abi_version": ABI_VERSION,
        "package_version": __version__,
        "target": target.name,
        "backend": backend,
        "families": list(target.families),
        "arch": target.arch or platform.machine(),
        "host": platform.machine(),
        "sass": sass,
        "ptx": [f"compute_{target.arch}"] if backend == "cuda" and ptx else [],
        "gfx": [target.arch] if backend == "hip" else [],
        "geometries": [{"head_dim": g.head_dim, "group": g.group} for g in target.geometries],
        "variants": list(target.all_variants),
        "dispatch_variants": list(target.variants),
        "test_variants": list(target.test_variants),
        "features": list(target.features),
        "toolchain": {"name": toolchain.get("name"), "version": toolchain.get("version")},
        "toolkit": {"min": target.toolkit_min, "max": target.toolkit_max},
        "min_driver_version": _toolkit_driver(toolchain.get("version")) if backend == "cuda" else 0,
        "template_hash": thash,
        "flags": list(flags),
    }


def render_target(sel: Selection | Target, gen_dir: Path, *, toolchain: dict | None = None,
                  flags: list[str] | None = None, root: Path | None = None) -> RenderedTarget:
    """Render ``gen_dir/<plugin>/``: one source per (variant, geometry), the plugin entry and manifest.json."""
    if not isinstance(sel, Selection):
        sel = Selection(sel, sel.ptx)
    target, ptx = sel.target, sel.ptx
    root = root or templates_dir()
    env = environment(root)
    toolchain = toolchain or {"name": target.backend.toolchain, "version": None}
    if toolchain.get("name") == DRIVER_TOOLCHAIN:
        # clang + ptxas build plain sm_XY code (no sm_90a features), and the driver-API layer launches by
        # cuLaunchKernel only (no launch attributes: no programmatic dependent launch, no clusters)
        target = replace(target, features=tuple(f for f in target.features if f not in ("wgmma", "pdl", "cluster")))
    flags = list(flags or [])
    thash = template_hash(target, root)
    manifest = build_manifest(target, ptx, toolchain, flags, thash)
    ext = target.backend.source_ext
    out = gen_dir / sel.plugin
    base_ctx = {**target.context(), "ptx": ptx, "cmt": _COMMENT.get(ext, "//"), "host_arch": platform.machine(),
                "package_version": __version__}
    wanted: list[Path] = []

    def render(template: str, dest: Path, **extra) -> None:
        ctx = {**base_ctx, "template_name": template, **extra}
        try:
            text = env.get_template(template).render(**ctx)
        except jinja2.TemplateError as e:
            where = f"{getattr(e, 'filename', None) or template}:{getattr(e, 'lineno', '?')}"
            raise BuildError(f"rendering {template} for target {target.name} failed at {where}: {e}") from None
        write_if_different(dest, text)
        wanted.append(dest)

    for variant in target.all_variants:
        tpl = template_for(target.backend, variant, root)
        if tpl is None:  # targets.py validates this; a hand-made Target could still get here
            raise BuildError(f"target {target.name}: no template provides variant {variant!r}")
        rel = tpl.relative_to(root).as_posix()
        for g in target.geometries:
            render(rel, out / f"{variant}_{g.head_dim}_{g.group}{ext}", variant=variant, geometry=geometry_context(g))
    manifest_json = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    render("common/plugin_entry.cpp.j2", out / f"plugin{ext}", manifest_json=manifest_json, geometry=None)
    if toolchain.get("name") == DRIVER_TOOLCHAIN:  # the cuda12 family: runtime calls answered by the driver API
        render("cuda/driver_api.cpp.j2", out / "driver_api.cpp", geometry=None)
    mpath = out / "manifest.json"
    write_if_different(mpath, json.dumps(manifest, sort_keys=True, indent=2) + "\n")
    # Stale files from an earlier table (a removed variant or geometry) would otherwise linger.
    keep = set(wanted) | {mpath}
    for p in out.iterdir():
        if p.is_file() and p not in keep:
            p.unlink()
    return RenderedTarget(target, ptx, out, [p for p in wanted], manifest, flags, sel.plugin)


def copy_abi_header(gen_dir: Path) -> Path:
    """The ABI header travels with the generated tree so it can be built anywhere."""
    src = package_root() / "csrc" / "strata_plugin.h"
    dest = gen_dir / "include" / "strata_plugin.h"
    write_if_different(dest, src.read_text())
    return dest


def render_cmake(rendered: list[RenderedTarget], gen_dir: Path, *, loader: dict | None = None,
                 root: Path | None = None, hip: dict | None = None, sycl: dict | None = None,
                 driver: dict | None = None) -> Path:
    """The one CMake project that builds every selected target (and, for pip, the nanobind loader)."""
    env = environment(root)
    targets = []
    for r in rendered:
        t = r.target
        targets.append({
            "name": r.name, "backend": t.backend.name, "arch": t.arch, "sass_arch": t.sass_arch, "ptx": r.ptx,
            "sources": [p.relative_to(gen_dir).as_posix() for p in r.sources],
            "flags": r.flags, "cflags": list(t.cflags), "hip": (hip or {}).get(r.name),
            "sycl": (sycl or {}).get(r.name), "driver": (driver or {}).get(r.name),
        })
    ctx = {
        "template_name": "cmake/CMakeLists.txt.j2", "target": "all", "cmt": "#",
        "targets": targets, "backends": sorted({t["backend"] for t in targets if not t["driver"]}),
        "loader": loader, "package_version": __version__,
    }
    text = env.get_template("cmake/CMakeLists.txt.j2").render(**ctx)
    path = gen_dir / "CMakeLists.txt"
    write_if_different(path, text)
    return path


def generate(selections: list[Selection], out: Path, *, toolchains: dict | None = None,
             flags: dict | None = None) -> list[RenderedTarget]:
    """Render every selected target and the CMake project into ``out`` (works without any compiler)."""
    out.mkdir(parents=True, exist_ok=True)
    copy_abi_header(out)
    rendered = []
    for sel in selections:
        tc = (toolchains or {}).get(sel.target.name)
        rendered.append(render_target(sel, out, toolchain=tc, flags=(flags or {}).get(sel.target.name)))
    hip = {r.name: hip_cmake_info(r.target) for r in rendered if r.target.backend.name == "hip"}
    sycl = {r.name: sycl_cmake_info(r.target) for r in rendered if r.target.backend.name == "sycl"}
    render_cmake(rendered, out, hip=hip, sycl=sycl)
    return rendered


def driver_cmake_info(r: RenderedTarget, toolchain) -> dict:
    """How the CMake project builds a cuda12 target without nvcc (toolchains.cuda12_driver): per kernel source, clang's
    device side to PTX, ptxas to SASS, devcode.py's container (SASS, plus PTX where the table asks), and clang's host
    side embedding it; driver_api.cpp and the objects make the plugin."""
    from . import toolchains
    sm = r.target.arch
    return {"clang": toolchain.extra["clang"], "ptxas": toolchain.extra["ptxas"],
            "include": str(Path(toolchain.extra["root"]) / "include"),
            "flags": toolchains.cuda12_clang_flags(toolchain), "sm": sm, "ptx": r.ptx,
            "python": sys.executable, "devcode": str(Path(__file__).resolve().parent / "devcode.py"),
            "kernels": [p.relative_to(r.directory.parent).as_posix() for p in r.sources
                        if p.suffix == ".cu" and p.stem != "plugin"],
            "host": [p.relative_to(r.directory.parent).as_posix() for p in r.sources
                     if p.stem == "plugin"],
            "cxx": [p.relative_to(r.directory.parent).as_posix() for p in r.sources if p.suffix == ".cpp"]}


def hip_cmake_info(target: Target) -> dict:
    """How the CMake project compiles a HIP target: the clang, its flags, and whether a plugin or only ISA results.
    Without a HIP toolchain (``generate`` needs none) the project names a plain clang++ and builds ISA only."""
    from . import toolchains
    tc = toolchains.hip_clang()
    if not tc.available:
        return {"mode": "isa", "clang": "clang++", "flags": [], "runtime": "", "why": tc.reason}
    mode, why = toolchains.hip_build_mode(tc, target.arch)
    return {"mode": mode, "clang": tc.path, "flags": toolchains.hip_flags(tc, target.arch, mode),
            "runtime": tc.extra.get("libamdhip64") or "", "why": why}


def sycl_cmake_info(target: Target) -> dict:
    """How the CMake project builds a SYCL target: with a DPC++ compiler, objects and a plugin linked by it
    ('plugin'); else each source checked against the SYCL headers by a host compiler ('check'). ``depends``: files
    whose change must re-run the commands (the compiler, or the headers' version.hpp); ``headers``: what was checked
    against. Without either (``generate`` needs none) the project names a plain c++ and checks syntax only."""
    from . import toolchains
    tc = toolchains.sycl()
    if not tc.available:
        return {"mode": "check", "cxx": "c++", "flags": ["-std=c++17", "-fsyntax-only"], "depends": [],
                "headers": None, "why": tc.reason}
    mode, why = toolchains.sycl_build_mode(tc)
    if mode == "plugin":
        return {"mode": mode, "cxx": tc.path, "flags": toolchains.sycl_flags(tc, mode), "depends": [tc.path],
                "link": ["-fsycl", "-shared", "-fPIC"], "headers": None, "why": why, "version": tc.version}
    h = tc.extra["headers"]
    version_hpp = h.include / "sycl" / "version.hpp"
    return {"mode": mode, "cxx": tc.path, "flags": toolchains.sycl_flags(tc, mode),
            "depends": [version_hpp.as_posix()] if version_hpp.is_file() else [],
            "headers": {"origin": h.origin, "include": h.include.as_posix(), "version": h.version}, "why": why}
