"""`strata-kernels bench --plot FILE.png`: the benchmark's rows as a chart — per shape, one horizontal bar per
method (time per call, log scale): the plugin's variants, the baselines a user would otherwise run, and the gather
floors (the time to read the selected cells, which no kernel can beat). matplotlib is optional
(`pip install 'strata-kernels[plot]'`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

COLOURS = {"plugin": "#1f77b4", "baseline": "#9e9e9e", "floor": "#2ca02c"}


def _kind(method: str) -> str:
    if method.startswith("plugin"):
        return "plugin"
    return "floor" if method.startswith("gather floor") else "baseline"


def plot_rows(rows: Sequence, path: str | Path, title: str = "") -> Path:
    """Draw ``rows`` (bench.BenchRow, or anything with shape, fmt, method, ms) into ``path`` (PNG); rows that did
    not run are left out. Raises ImportError with the install command when matplotlib is absent."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FormatStrFormatter
    except ImportError as exc:
        raise ImportError("bench --plot needs matplotlib: pip install 'strata-kernels[plot]' "
                          "(or pip install matplotlib)") from exc
    groups: dict[tuple[str, str], list] = {}
    for r in rows:
        if r.ms is not None and r.ms > 0:
            groups.setdefault((r.shape, r.fmt), []).append(r)
    if not groups:
        raise ValueError("bench --plot: no method produced a time, nothing to draw")
    n = len(groups)
    height = sum(len(g) for g in groups.values()) * 0.32 + 1.2 * n
    fig, axes = plt.subplots(n, 1, figsize=(9, max(3.0, height)), squeeze=False)
    for ax, ((shape, fmt), rs) in zip(axes[:, 0], groups.items()):
        rs = sorted(rs, key=lambda r: r.ms)
        ctx, _, n_q = shape.partition("x")
        y = range(len(rs))
        ax.barh(list(y), [r.ms for r in rs], color=[COLOURS[_kind(r.method)] for r in rs])
        ax.set_yticks(list(y), [r.method for r in rs], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(rs[0].ms / 2, rs[-1].ms * 3)            # bars start at half the fastest: the gaps stay readable
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(FormatStrFormatter(""))
        ax.set_xlabel("ms per call (log scale; shorter is faster)", fontsize=8)
        ax.set_title(f"{fmt}: context {ctx} x {n_q} queries", fontsize=10)
        for i, r in enumerate(rs):
            ax.text(r.ms, i, f" {r.ms:.3g} ms", va="center", fontsize=7)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, ["strata-kernels plugin", "baselines (numpy / torch)", "gather floor (reads only)"],
               loc="lower center", ncol=3, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97 if title else 1))
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
