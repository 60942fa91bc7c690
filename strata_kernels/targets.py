"""Target tables (``backends/*.toml``): loading, validation and target-list parsing.

A target's facts live once, in its backend table; codegen, the build, the wheels, the manifest (and through it
the resolver) and the CI matrix all read them from here.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from .errors import TargetError
from .geometry import Geometry, why_not as geometry_why_not

# Every variant name the project knows (docs/operation.md). A table may only list names that a template provides.
KNOWN_VARIANTS = (
    "fp32", "fp32_pre75", "fp32_lanecell", "v1", "v2", "imma", "v2t", "v70",
    "wmma", "wmma_fast", "wmma_i8", "rdna2", "split", "grouped", "flash", "gpair",
)

# Which KV formats each variant accepts (docs/variants.md; codes 0 fp16, 1 int8, 2 q4_0, 3 k8v4), the compute
# capability its instructions need on NVIDIA (0 = any), and the operations it serves. Rendered into every GPU
# plugin's dispatch and read by the parity harness: one source for the fact.
VARIANT_RULES = {
    "fp32": {"formats": (0, 1, 2, 3), "min_cc": 0, "ops": ("prompt", "decode")},
    "fp32_pre75": {"formats": (0, 1, 2, 3), "min_cc": 0, "ops": ("prompt", "decode")},
    "fp32_lanecell": {"formats": (0, 1, 2, 3), "min_cc": 0, "ops": ("prompt", "decode")},
    "v1": {"formats": (0, 1, 2, 3), "min_cc": 75, "ops": ("prompt", "decode")},
    "v2": {"formats": (1,), "min_cc": 80, "ops": ("prompt", "decode")},
    "imma": {"formats": (1,), "min_cc": 80, "ops": ("prompt", "decode")},
    "v2t": {"formats": (1,), "min_cc": 75, "ops": ("prompt", "decode")},
    "v70": {"formats": (0, 1, 3), "min_cc": 70, "ops": ("prompt", "decode")},
    "wmma": {"formats": (1,), "min_cc": 0, "ops": ("prompt", "decode")},
    "wmma_fast": {"formats": (1,), "min_cc": 0, "ops": ("prompt", "decode")},
    "wmma_i8": {"formats": (1,), "min_cc": 0, "ops": ("prompt", "decode")},
    "rdna2": {"formats": (1,), "min_cc": 0, "ops": ("prompt", "decode")},
    "split": {"formats": (1,), "min_cc": 80, "ops": ("decode",)},
    "grouped": {"formats": (1, 0, 3, 2), "min_cc": 80, "ops": ("prompt", "decode")},
    "flash": {"formats": (0, 1, 2, 3), "min_cc": 80, "ops": ("decode",)},
    "gpair": {"formats": (1,), "min_cc": 90, "ops": ("prompt", "decode")},
}



# The geometry (head_dim, G) at which the CUDA dispatch runs grouped's INT8 prompts in its pair form (128-row units,
# variant gpair's kernel; cuda/dispatch.inc.j2, pair_form): where it was measured. The plan's scratch
# (ops.grouped_scratch_floats) covers that form there.
GROUPED_PAIR_GEOMETRY = (256, 12)


def grouped_queries(group: int, rows: int = 64) -> int:
    """Queries per block of the grouped kernel: as many whole groups of G heads as fill its 64 rows (128 in the pair
    form), at most 32 (one membership bit each); cuda/grouped.cu.j2 computes the same NQ."""
    return min(rows // group, 32)


_BACKEND_KEYS = {"name", "toolchain", "template_dirs", "source_ext"}
_TARGET_KEYS = {
    "arch", "ptx", "families", "family", "toolkit", "features", "variants", "test_variants",
    "geometries", "cflags",
}
_REQUIRED_TARGET_KEYS = {"families", "features", "variants"}
_GPU_BACKENDS = {"cuda", "hip"}


@dataclass(frozen=True)
class Backend:
    name: str
    toolchain: str
    template_dirs: tuple[str, ...]
    source_ext: str
    table: Path


@dataclass(frozen=True)
class Target:
    name: str
    backend: Backend
    arch: str | None
    ptx: bool
    families: tuple[str, ...]
    toolkit_min: str | None
    toolkit_max: str | None
    features: tuple[str, ...]
    variants: tuple[str, ...]
    test_variants: tuple[str, ...]
    geometries: tuple[Geometry, ...]
    cflags: tuple[str, ...] = ()

    @property
    def sass_arch(self) -> str | None:
        """The arch nvcc compiles SASS for: '90a' where the table gives the `wgmma` feature (sm_90a code runs only on
        compute capability 9.0, which the resolver knows from the manifest's 'sm_90a'), else the table's arch."""
        if self.backend.name == "cuda" and "wgmma" in self.features:
            return f"{self.arch}a"
        return self.arch

    @property
    def all_variants(self) -> tuple[str, ...]:
        """Dispatched variants first, then the test-only ones (docs/variants.md)."""
        return self.variants + tuple(v for v in self.test_variants if v not in self.variants)

    def context(self) -> dict:
        """The template context: the target's table."""
        return {
            "target": self.name,
            "backend": self.backend.name,
            "arch": self.arch,
            "ptx": self.ptx,
            "families": list(self.families),
            "features": list(self.features),
            "variants": list(self.all_variants),
            "dispatch_variants": list(self.variants),
            "test_variants": list(self.test_variants),
            "geometries": [{"head_dim": g.head_dim, "group": g.group} for g in self.geometries],
            "toolkit": {"min": self.toolkit_min, "max": self.toolkit_max},
            "variant_rules": {k: {"formats": list(v["formats"]), "min_cc": v["min_cc"], "ops": list(v["ops"])}
                              for k, v in VARIANT_RULES.items()},
            "grouped_pair_geometry": {"head_dim": GROUPED_PAIR_GEOMETRY[0], "group": GROUPED_PAIR_GEOMETRY[1]},
        }


@dataclass(frozen=True)
class Selection:
    """One entry of a parsed target list: a target and whether it should also carry PTX. ``extra``: a plugin of
    geometries beyond its table's (``target.geometries`` then holds only those; `strata-kernels build --geometries`)."""
    target: Target
    ptx: bool
    extra: bool = False

    @property
    def name(self) -> str:
        return self.plugin + ("+PTX" if self.ptx and not self.target.ptx else "")

    @property
    def plugin(self) -> str:
        """The plugin's name, ``libstrata_<plugin>.so``: the target's, and for extra geometries the target's plus
        theirs (``sm_90-128x4``; '-' never occurs in a target name), so it sits beside the table's plugin."""
        if not self.extra:
            return self.target.name
        return "-".join([self.target.name] + [g.tag for g in self.target.geometries])


def extra_geometries(sel: Selection, wanted: "tuple[Geometry, ...]") -> Selection | None:
    """The selection of ``wanted``'s geometries that ``sel``'s table does not already build, or None when it has
    them all."""
    missing = tuple(g for g in wanted if g not in sel.target.geometries)
    if not missing:
        return None
    return Selection(replace(sel.target, geometries=missing), sel.ptx, extra=True)


def package_root() -> Path:
    return Path(__file__).resolve().parent


def data_root() -> Path:
    """Where ``templates/`` and ``backends/`` live: the source tree, or the installed package's data/."""
    env = os.environ.get("STRATA_KERNELS_DATA")
    if env:
        return Path(env)
    src = package_root().parent
    if (src / "backends").is_dir() and (src / "templates").is_dir():
        return src
    return package_root() / "data"


def backends_dir() -> Path:
    return data_root() / "backends"


def templates_dir() -> Path:
    return data_root() / "templates"


def _fail(table: Path, where: str, msg: str) -> TargetError:
    return TargetError(f"{table.name}: {where}: {msg}")


def _str_list(table: Path, where: str, key: str, value) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(table, where, f"'{key}' must be a list of strings, got {value!r}")
    return tuple(value)


def _geometries(table: Path, where: str, value) -> tuple[Geometry, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(table, where, f"'geometries' must be a non-empty list of tables, got {value!r}")
    out = []
    for g in value:
        if not isinstance(g, dict) or set(g) != {"head_dim", "group"}:
            raise _fail(table, where, f"each geometry needs exactly head_dim and group, got {g!r}")
        bad = geometry_why_not(g["head_dim"], g["group"])
        if bad:
            raise _fail(table, where, bad)
        out.append(Geometry(g["head_dim"], g["group"]))
    if len(set(out)) != len(out):
        raise _fail(table, where, "duplicate geometry")
    return tuple(out)


def template_for(backend: Backend, variant: str, root: Path | None = None) -> Path | None:
    """The template file that provides ``variant`` for ``backend``, searching its template_dirs in order."""
    root = root or templates_dir()
    for d in backend.template_dirs:
        for ext in (backend.source_ext, ".cu", ".cpp"):
            p = root / d / f"{variant}{ext}.j2"
            if p.is_file():
                return p
    return None


def load_table(path: Path, templates: Path | None = None) -> list[Target]:
    """Parse and validate one backend table."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TargetError(f"{path.name}: not valid TOML: {e}") from None
    unknown = set(data) - {"backend", "defaults", "targets"}
    if unknown:
        raise _fail(path, "top level", f"unknown section(s) {sorted(unknown)}; expected backend, defaults, targets")
    b = data.get("backend")
    if not isinstance(b, dict):
        raise _fail(path, "top level", "missing [backend] table")
    bad = set(b) - _BACKEND_KEYS
    if bad:
        raise _fail(path, "[backend]", f"unknown key(s) {sorted(bad)}; allowed: {sorted(_BACKEND_KEYS)}")
    missing = _BACKEND_KEYS - set(b)
    if missing:
        raise _fail(path, "[backend]", f"missing key(s) {sorted(missing)}")
    backend = Backend(
        name=b["name"], toolchain=b["toolchain"],
        template_dirs=_str_list(path, "[backend]", "template_dirs", b["template_dirs"]),
        source_ext=b["source_ext"], table=path,
    )
    defaults = data.get("defaults", {})
    bad = set(defaults) - _TARGET_KEYS
    if bad:
        raise _fail(path, "[defaults]", f"unknown key(s) {sorted(bad)}")
    targets = []
    tables = data.get("targets")
    if not isinstance(tables, dict) or not tables:
        raise _fail(path, "top level", "no [targets.*] tables")
    for name, t in tables.items():
        where = f"[targets.{name}]"
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            raise _fail(path, where, "target names are lower-case letters, digits and '_'")
        t = {**defaults, **t}
        bad = set(t) - _TARGET_KEYS
        if bad:
            raise _fail(path, where, f"unknown key(s) {sorted(bad)}; allowed: {sorted(_TARGET_KEYS)}")
        if "family" in t and "families" not in t:
            t["families"] = t.pop("family")
        missing = _REQUIRED_TARGET_KEYS - set(t)
        if "geometries" not in t:
            missing.add("geometries")
        if backend.name in _GPU_BACKENDS and "arch" not in t:
            missing.add("arch")
        if missing:
            raise _fail(path, where, f"missing field(s) {sorted(missing)}")
        variants = _str_list(path, where, "variants", t["variants"])
        test_variants = _str_list(path, where, "test_variants", t.get("test_variants", []))
        for v in variants + test_variants:
            if v not in KNOWN_VARIANTS:
                raise _fail(path, where, f"unknown variant {v!r}; known variants: {', '.join(KNOWN_VARIANTS)}")
            if template_for(backend, v, templates) is None:
                dirs = ", ".join(f"templates/{d}/" for d in backend.template_dirs)
                raise _fail(path, where, f"variant {v!r} has no template ({v}{backend.source_ext}.j2 in {dirs})")
        if "fp32" not in variants:
            raise _fail(path, where, "every target must dispatch the 'fp32' variant (the fallback of docs/variants.md)")
        toolkit = t.get("toolkit", {})
        if not isinstance(toolkit, dict) or set(toolkit) - {"min", "max"}:
            raise _fail(path, where, f"'toolkit' must be a table with min and/or max, got {toolkit!r}")
        ptx = t.get("ptx", False)
        if not isinstance(ptx, bool):
            raise _fail(path, where, f"'ptx' must be true or false, got {ptx!r}")
        if ptx and backend.name != "cuda":
            raise _fail(path, where, "'ptx' applies to CUDA targets only")
        arch = t.get("arch")
        if arch is not None and not isinstance(arch, str):
            raise _fail(path, where, f"'arch' must be a string, got {arch!r}")
        targets.append(Target(
            name=name, backend=backend, arch=arch, ptx=ptx,
            families=_str_list(path, where, "families", t["families"]),
            toolkit_min=toolkit.get("min"), toolkit_max=toolkit.get("max"),
            features=_str_list(path, where, "features", t["features"]),
            variants=variants, test_variants=test_variants,
            geometries=_geometries(path, where, t["geometries"]),
            cflags=_str_list(path, where, "cflags", t.get("cflags", [])),
        ))
    return targets


def load_targets(directory: Path | None = None, templates: Path | None = None) -> dict[str, Target]:
    """All targets of all backend tables, by name."""
    directory = directory or backends_dir()
    out: dict[str, Target] = {}
    tables = sorted(directory.glob("*.toml"))
    if not tables:
        raise TargetError(f"no backend tables (*.toml) in {directory}")
    for path in tables:
        for t in load_table(path, templates):
            if t.name in out:
                raise TargetError(f"{path.name}: target {t.name!r} is also defined in {out[t.name].backend.table.name}")
            out[t.name] = t
    return out


@lru_cache(maxsize=1)
def all_targets() -> dict[str, Target]:
    return load_targets()


_CUDA_DOTTED = re.compile(r"^(\d+)\.(\d+)([af]?)$")


def _normalise(token: str) -> tuple[str, bool]:
    """One list entry → (target name, +PTX requested)."""
    tok = token.strip()
    ptx = False
    if tok.upper().endswith("+PTX"):
        tok, ptx = tok[:-4], True
    low = tok.lower()
    m = _CUDA_DOTTED.match(low)
    if m:  # TORCH_CUDA_ARCH_LIST syntax: "8.6", "9.0a"
        return f"sm_{m.group(1)}{m.group(2)}{m.group(3)}", ptx
    if re.fullmatch(r"\d{2,3}[af]?", low):
        return f"sm_{low}", ptx
    if low.startswith("compute_"):
        return "sm_" + low[len("compute_"):], True
    return low, ptx


def parse_target_list(spec: str, targets: dict[str, Target] | None = None,
                      native: "list[str] | None" = None) -> list[Selection]:
    """Parse ``"cpu;sm_80;sm_90+PTX;gfx1100"``, ``all``, ``native`` or ``TORCH_CUDA_ARCH_LIST`` syntax.

    ``native`` is the list of target names for the devices seen here (CPU included); when None it is probed.
    """
    targets = targets if targets is not None else all_targets()
    tokens = [t for t in re.split(r"[;,\s]+", spec.strip()) if t]
    if not tokens:
        raise TargetError("the target list is empty; give target names such as 'cpu;sm_90' or 'all' or 'native'")
    chosen: dict[str, bool] = {}
    for tok in tokens:
        if tok.lower() == "all":
            for name, t in targets.items():
                chosen[name] = chosen.get(name, False) or t.ptx
            continue
        if tok.lower() == "native":
            if native is None:
                from .resolve import native_target_names
                native = native_target_names(targets)
            for name in native:
                chosen.setdefault(name, targets[name].ptx)
            continue
        name, ptx = _normalise(tok)
        if name not in targets:
            known = ", ".join(sorted(targets, key=_sort_key))
            raise TargetError(f"unknown target {tok!r} (read as {name!r}); known targets: {known}")
        if ptx and targets[name].backend.name != "cuda":
            raise TargetError(f"'+PTX' only applies to CUDA targets, not {name!r}")
        chosen[name] = chosen.get(name, False) or ptx or targets[name].ptx
    return [Selection(targets[n], p) for n, p in sorted(chosen.items(), key=lambda kv: _sort_key(kv[0]))]


def _sort_key(name: str) -> tuple:
    m = re.match(r"([a-z_]*?)(\d+)", name)
    order = {"cpu": 0, "sm_": 1, "gfx": 2, "sycl": 3}
    prefix = m.group(1) if m else name
    return (order.get(prefix, 4), int(m.group(2)) if m else 0, name)
