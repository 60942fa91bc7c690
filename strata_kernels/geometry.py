"""Geometries: the (head_dim, G) pairs a plugin is instantiated for, and which pairs the kernels allow.

Build time (tables, codegen, `strata-kernels build --geometries`) and run time (the resolver's choice per geometry,
its error messages) both need this rule, so it lives here, apart from both.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# What the kernels allow. head_dim: int8 rows carry one fp16 scale per 64 dims and Q4_0 rows pairs of 32-dim blocks
# (docs/operation.md), and the GPU kernels static_assert HD % 64 == 0 && HD <= 256 (common/chunk_gather, cuda/v2, imma,
# grouped, common/wmma_kernel); the CPU kernel has the same HD / 64 scale groups. G: one 16-row MMA tile of heads
# (cuda/v1, v2, imma, grouped, v70, fp32: "warp w takes heads w and w + 8").
HEAD_DIMS = (64, 128, 192, 256)
MAX_GROUP = 16
ALLOWED = f"head_dim one of {', '.join(map(str, HEAD_DIMS))} (a multiple of 64, at most 256) and G in 1..{MAX_GROUP}"


@dataclass(frozen=True, order=True)
class Geometry:
    head_dim: int
    group: int

    def __str__(self) -> str:
        return f"HD{self.head_dim}_G{self.group}"

    @property
    def tag(self) -> str:
        """How the command line spells it: ``128x4`` (head_dim 128, G 4)."""
        return f"{self.head_dim}x{self.group}"


def why_not(head_dim, group) -> str | None:
    """None when the kernels allow (head_dim, G); else the sentence saying what they allow."""
    if not (isinstance(head_dim, int) and head_dim in HEAD_DIMS):
        return f"head_dim {head_dim!r} is not allowed: the kernels take {ALLOWED}"
    if not (isinstance(group, int) and 1 <= group <= MAX_GROUP):
        return f"G {group!r} is not allowed: the kernels take {ALLOWED}"
    return None


def parse(spec: str) -> tuple[Geometry, ...]:
    """``"128x4,128x8"`` (or ``;``/space separated) -> geometries, in order, without duplicates. ValueError naming
    what is allowed for an entry that is malformed or that the kernels do not take."""
    out: list[Geometry] = []
    tokens = [t for t in re.split(r"[;,\s]+", spec.strip()) if t]
    if not tokens:
        raise ValueError(f"--geometries is empty; give HEAD_DIMxG pairs such as '128x4,128x8' ({ALLOWED})")
    for tok in tokens:
        m = re.fullmatch(r"(\d+)[xX:](\d+)", tok)
        if not m:
            raise ValueError(f"geometry {tok!r}: expected HEAD_DIMxG, e.g. 128x4 (head_dim 128, 4 query heads per "
                             f"KV head)")
        g = Geometry(int(m.group(1)), int(m.group(2)))
        bad = why_not(g.head_dim, g.group)
        if bad:
            raise ValueError(f"geometry {tok!r}: {bad}")
        if g not in out:
            out.append(g)
    return tuple(out)
