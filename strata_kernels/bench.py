"""``strata-kernels bench``: the plugin against what a user would run instead, on the same inputs (the parity
recipe, docs/verification.md) in the same run: the same function in plain numpy FP32, and with torch (when importable)
a gather + softmax + matmul, a gather + ``scaled_dot_product_attention`` with a width mask (FP32 and, on a GPU,
bf16), and on a GPU dense bf16 SDPA over every earlier cell (a different function, timed for scale; docs/results/).

Each method: one warm-up call (its output is checked against the FP64 oracle on the parity sample), then ``reps``
timed calls: on a GPU the device time per call by events around the calls queued back to back, and separately the
median wall time of one call waited for; on the host the median of single calls.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .parity import _host_rows, _place, parse_device, sample_queries

METHODS = ("plugin", "numpy-fp32", "torch-fp32", "torch-fp32-sdpa", "torch-bf16-sdpa", "dense-bf16-sdpa",
           "gather-floor", "gather-floor-grouped", "copy-floor")
CPU_METHODS = ("plugin", "numpy-fp32", "torch-fp32", "torch-fp32-sdpa")
GPU_METHODS = ("plugin", "torch-fp32", "torch-fp32-sdpa", "torch-bf16-sdpa", "dense-bf16-sdpa", "gather-floor",
               "gather-floor-grouped")
FLOORS = ("gather-floor", "gather-floor-grouped", "copy-floor")   # no output to check
CPU_SHAPES = "4096x64,1500x64,2100x64"
GPU_SHAPES = "32768x2048,1500x1500,2100x256,131072x2048"      # the shapes of docs/results/
CPU_REPS, GPU_REPS = 3, 5
# Queries gathered per torch step: docs/results/ uses 256 on a GPU; on the host a smaller step keeps memory low.
GPU_CHUNK, CPU_CHUNK = 256, 16


@dataclass
class BenchRow:
    shape: str                  # "<context>x<queries>"
    fmt: str
    method: str
    ms: float | None            # median ms per call (None: the method could not run)
    ratio: float | None         # method ms / plugin ms (> 1: the plugin is faster)
    max_err: float | None       # max |out - fp64| on the sample (None: a different function or not run)
    rel_err: float | None       # max_err / max |fp64|
    note: str = ""
    peak_mb: float | None = None  # device memory the call allocates beyond its inputs and output (GPU only)
    wall_ms: float | None = None  # median wall time of one call, waited for (host work included)
    graph_ms: float | None = None  # GPU time per call from a CUDA-graph replay of back-to-back calls (plugin rows)
    gbps: float | None = None     # the bytes a call must read (selected K, V and scales) / ms per call
    graph_gbps: float | None = None  # the same bytes / graph_ms: the GPU's own rate, the launch rate left out


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'4096x64,1500x64' -> [(4096, 64), (1500, 64)] (context x queries)."""
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        a, sep, b = part.partition("x")
        if not sep or not a.isdigit() or not b.isdigit() or int(a) < 1 or int(b) < 1:
            raise ValueError(f"--shapes: expected CONTEXTxQUERIES items like 4096x64, got {part!r}")
        out.append((int(a), int(b)))
    if not out:
        raise ValueError("--shapes: no shape given")
    return out


# ---------------------------------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------------------------------
def _torch_device(device: tuple[str, int]):
    import torch
    return torch.device("cpu") if device[0] == "cpu" else torch.device("cuda", device[1])


class TorchGather:
    """What a torch user would write for this operation: dequantise the pools, gather each query's selected rows,
    then softmax + matmul (or SDPA) with a mask of the valid cells, ``chunk`` queries at a time."""

    def __init__(self, case: Any, device: tuple[str, int], dtype: str = "float32", sdpa: bool = False,
                 chunk: int | None = None):
        import torch
        self.torch = torch
        self.dev = _torch_device(device)
        self.dtype = getattr(torch, dtype)
        self.sdpa = sdpa
        self.chunk = chunk or (CPU_CHUNK if device[0] == "cpu" else GPU_CHUNK)
        kv = case.kv
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(self.dev)  # noqa: E731
        self.nkv, self.D = kv.n_head_kv, kv.head_dim
        self.G = case.q.shape[1] // self.nkv
        self.n_phys, self.n_cells = kv.n_phys_pages, kv.n_pages * 4
        kinds = {"fp16": ("fp16", "fp16"), "int8": ("int8", "int8"), "q4_0": ("q4", "q4"), "k8v4": ("int8", "q4")}
        self.kinds = kinds[kv.format]
        rows = kv.n_phys_pages * kv.n_head_kv * 4

        def flat(pool):
            if pool is None:
                return None
            a = np.ascontiguousarray(pool)
            return t(a.view(np.float16) if a.dtype == np.uint16 else a).reshape(rows, -1)   # fp16 bits -> fp16
        self.k, self.v = flat(kv.k), flat(kv.v)
        self.k_scale, self.v_scale = flat(kv.k_scale), flat(kv.v_scale)
        self.pt = t(kv.page_table).long()
        self.q = t(case.q)
        self.ids = t(case.ids).long()
        self.w = t(case.widths).long()
        self.out = torch.empty(case.q.shape, dtype=torch.float32, device=self.dev)

    def _dequant_pool(self, pool, scale, kind):
        """The whole pool as ``dtype`` rows [rows, D]. Dequantising the pool once per call costs far less than
        dequantising every gathered copy (each cell is selected by many queries)."""
        torch = self.torch
        if kind == "fp16":
            return pool.to(self.dtype)
        if kind == "int8":
            x = pool.float().view(-1, self.D // 64, 64).mul_(scale.float().unsqueeze(-1))
            return x.view(-1, self.D).to(self.dtype)
        blk = pool.view(-1, self.D // 32, 18)
        d = blk[..., 0:2].contiguous().view(torch.float16).float()          # [rows, NB, 1]
        qs = blk[..., 2:]
        nib = torch.cat([qs & 15, qs >> 4], dim=-1).float().sub_(8.0)
        return nib.mul_(d).view(-1, self.D).to(self.dtype)

    def __call__(self):
        torch = self.torch
        n_q, cap = self.ids.shape
        k_pool = self._dequant_pool(self.k, self.k_scale, self.kinds[0])
        v_pool = self._dequant_pool(self.v, self.v_scale, self.kinds[1])
        heads = torch.arange(self.nkv, device=self.dev).view(1, -1, 1)
        pos = torch.arange(cap, device=self.dev).view(1, -1)
        for s in range(0, n_q, self.chunk):
            e = min(n_q, s + self.chunk)
            B = e - s
            ids = self.ids[s:e]
            ok = (pos < self.w[s:e, None]) & (ids >= 0) & (ids < self.n_cells)
            cell = torch.where(ok, ids, 0)
            page = self.pt[cell // 4]
            ok &= (page >= 0) & (page < self.n_phys)
            page = torch.where(ok, page, 0)
            rows = ((page.unsqueeze(1) * self.nkv + heads) * 4 + (cell % 4).unsqueeze(1)).reshape(-1)
            K = k_pool.index_select(0, rows).view(B, self.nkv, cap, self.D)
            V = v_pool.index_select(0, rows).view(B, self.nkv, cap, self.D)
            qb = self.q[s:e].view(B, self.nkv, self.G, self.D).to(self.dtype)
            mask = ok.view(B, 1, 1, cap)
            if self.sdpa:
                o = torch.nn.functional.scaled_dot_product_attention(qb, K, V, attn_mask=mask)
            else:
                sc = torch.matmul(qb, K.transpose(-1, -2)) / math.sqrt(self.D)
                o = torch.matmul(torch.softmax(sc.masked_fill(~mask, -math.inf), dim=-1), V)
            # a query with no valid cell gives NaN in softmax/SDPA; the operation defines it as 0
            o = torch.where(ok.any(dim=-1).view(-1, 1, 1, 1), o, torch.zeros((), dtype=o.dtype, device=o.device))
            self.out[s:e] = o.reshape(B, self.nkv * self.G, self.D).float()
        return self.out


class TorchDense:
    """Dense causal bf16 SDPA over every earlier cell (the KV dequantised once, outside the timing): the cost of
    not selecting at all. A different function, so no error is reported."""

    def __init__(self, case: Any, device: tuple[str, int], dtype: str = "bfloat16"):
        import torch
        from .reference import dequant_rows
        self.torch = torch
        dev = _torch_device(device)
        kv = case.kv
        pt = np.asarray(kv.page_table).astype(np.int64)
        cells = np.arange(case.ctx)
        phys = pt[cells // 4]
        res = phys >= 0

        def dense(which):
            rows = dequant_rows(kv, which)                                    # [P, nkv, 4, D]
            x = np.zeros((kv.n_head_kv, case.ctx, kv.head_dim), np.float32)
            x[:, res] = rows[phys[res], :, cells[res] % 4].transpose(1, 0, 2)
            return torch.from_numpy(x).to(dev, getattr(torch, dtype)).unsqueeze(0)
        self.k, self.v = dense("k"), dense("v")
        self.q = torch.from_numpy(case.q).to(dev, getattr(torch, dtype)).transpose(0, 1).unsqueeze(0)
        n_q = case.q.shape[0]
        qpos = torch.arange(case.ctx - n_q, case.ctx, device=dev).view(-1, 1)
        self.mask = torch.arange(case.ctx, device=dev).view(1, -1) <= qpos                # [n_q, ctx]
        self.group = case.q.shape[1] // kv.n_head_kv

    def __call__(self):
        F = self.torch.nn.functional
        try:
            o = F.scaled_dot_product_attention(self.q, self.k, self.v, attn_mask=self.mask, enable_gqa=True)
        except TypeError:                                                      # torch < 2.5: no enable_gqa
            k = self.k.repeat_interleave(self.group, dim=1)
            v = self.v.repeat_interleave(self.group, dim=1)
            o = F.scaled_dot_product_attention(self.q, k, v, attn_mask=self.mask)
        return o.squeeze(0).transpose(0, 1)


def _time_calls(fn: Callable[[], Any], reps: int, device: tuple[str, int]) -> tuple[float, float]:
    """(device ms per call, wall ms per call). On a GPU the device time is taken by events around ``reps`` calls
    queued back to back (the host runs ahead of the device: the per-call error-flag read is off meanwhile, the
    kernels still bounds-check); one more call is queued before the start event, so that the device is already busy
    when the timing starts and the host's latency to the first launch is not counted. The wall time is the median of
    single calls each waited for; on the host both are the median of single calls."""
    walls = []
    sync = None
    if device[0] in ("cuda", "hip"):
        import torch
        sync = lambda: torch.cuda.synchronize(device[1])  # noqa: E731
    for _ in range(reps):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        walls.append((time.perf_counter() - t0) * 1e3)
    wall = statistics.median(walls)
    if not sync:
        return wall, wall
    import os
    import torch
    saved = os.environ.get("STRATA_KERNELS_CHECK_IDS")
    os.environ["STRATA_KERNELS_CHECK_IDS"] = "0"
    try:
        sync()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()  # the device starts on this one while the host queues the timed calls
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
    finally:
        if saved is None:
            del os.environ["STRATA_KERNELS_CHECK_IDS"]
        else:
            os.environ["STRATA_KERNELS_CHECK_IDS"] = saved
    return a.elapsed_time(b) / reps, wall


def _graph_ms(fn: Callable[[], Any], device: tuple[str, int], calls: int = 20, replays: int = 5) -> float | None:
    """GPU time per call from a CUDA graph of ``calls`` back-to-back calls, replayed ``replays`` times and timed by
    events (no host work and no launch gaps of the host in it); None where the call cannot be captured."""
    if device[0] != "cuda":
        return None
    import torch
    dev = torch.device("cuda", device[1])
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize(dev)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(replays):
        graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / (replays * calls)


def read_bytes(case: Any) -> int:
    """Bytes one call must read from the pools: K and V rows (codes and scales) of every selected, resident cell, per
    KV head (the decode kernels' memory traffic; q and the output are small beside it)."""
    from .gather_floor import units
    kv = case.kv
    widths = np.asarray(case.width).reshape(case.n_q, -1)[:, -1]
    cells, _ = units(np.asarray(case.ids), widths, np.asarray(kv.page_table), 1)
    hd, nb = kv.head_dim, kv.head_dim // 32
    row = {"fp16": 4 * hd, "int8": 2 * hd + 4 * (hd // 64), "q4_0": 2 * 18 * nb,
           "k8v4": hd + 2 * (hd // 64) + 18 * nb}[kv.format]
    return int(cells.size) * kv.n_head_kv * row


class CopyFloor:
    """Callable: a device-to-device copy of as many bytes as a call reads (``read_bytes``): the memory-bandwidth
    floor of a memory-bound kernel, measured in the same run (it also writes them, so it is a conservative floor)."""

    def __init__(self, case: Any, device: tuple[str, int]):
        import torch
        if device[0] != "cuda":
            raise ValueError(f"the copy floor runs on CUDA devices, not {device[0]}")
        self.bytes = read_bytes(case)
        dev = torch.device("cuda", device[1])
        self.src = torch.ones(max(1, self.bytes), dtype=torch.uint8, device=dev)
        self.dst = torch.empty_like(self.src)

    def __call__(self) -> None:
        self.dst.copy_(self.src)


def _peak_mb(fn: Callable[[], Any], device: tuple[str, int]) -> float | None:
    """Run fn once; on a GPU return the memory it allocated beyond what was live before (scratch, buffers)."""
    if device[0] not in ("cuda", "hip"):
        fn()
        return None
    import torch
    torch.cuda.synchronize(device[1])
    base = torch.cuda.memory_allocated(device[1])
    torch.cuda.reset_peak_memory_stats(device[1])
    out = fn()
    torch.cuda.synchronize(device[1])
    peak = torch.cuda.max_memory_allocated(device[1]) - base
    del out
    return peak / 2**20


def _default_api():
    from . import ops
    return ops


def bench_rows(shapes: Sequence[tuple[int, int]], *, fmt: str = "int8", reps: int = CPU_REPS,
               device: tuple[str, int] = ("cpu", 0), methods: Sequence[str] | None = None,
               variant: str | None = None, op: str = "prompt", head_dim: int = 256, group: int = 12,
               n_head_kv: int = 2, api: Any = None, emit: Callable[[str], None] | None = None,
               variants: Sequence[str | None] | None = None) -> list[BenchRow]:
    """One row per (shape, method); plugin rows first (one per variant of ``variants``, default the dispatcher's
    choice or ``variant``) so the others can be put in ratio to the first of them."""
    from . import reference as R
    from .testing import make_case

    api = api or _default_api()
    methods = list(methods or (CPU_METHODS if device[0] == "cpu" else GPU_METHODS))
    if op not in ("prompt", "decode"):
        raise ValueError(f"op: expected 'prompt' or 'decode', got {op!r}")
    variants = list(variants) if variants else [variant]
    expanded: list[tuple[str, str | None]] = []
    for m in methods:
        expanded += [(m, v) for v in variants] if m == "plugin" else [(m, None)]
    rows: list[BenchRow] = []
    for ctx, n_q in shapes:
        case = make_case(fmt, ctx, n_q, n_head_kv=n_head_kv, group=group, head_dim=head_dim)
        shape = f"{ctx}x{case.n_q}"
        sample = sample_queries(case.n_q, case.widths)
        ref = R.qsa_attn_fp64(case.q, case.kv, case.ids, case.width, sample)
        ref_scale = float(np.abs(ref).max()) if ref.size else 0.0
        nbytes = read_bytes(case) if op == "decode" else 0
        plugin_ms = None
        for m, v in expanded:
            label, note = m, ""
            try:
                fn, label = _method(m, case, device, v, op, api)
            except ImportError as exc:
                rows.append(BenchRow(shape, fmt, m, None, None, None, None, f"not run: {exc}"))
                continue
            except Exception as exc:  # noqa: BLE001 - a method that cannot run is reported, not fatal
                rows.append(BenchRow(shape, fmt, m, None, None, None, None, f"not run: {type(exc).__name__}: {exc}"))
                if emit:
                    emit(_progress(rows[-1]))
                continue
            try:
                peak = _peak_mb(fn, device)                   # warm-up; its output is the one checked
                out = fn()
                err = None
                if m == "copy-floor":
                    note = f"copies {fn.bytes / 1e6:.1f} MB (the bytes a call reads)"
                elif m in FLOORS:
                    note = f"reads {fn.bytes / 1e9:.2f} GB (K, V codes and scales), computes nothing"
                elif m != "dense-bf16-sdpa":
                    err = float(np.abs(_host_rows(out, sample) - ref).max()) if sample.size else 0.0
                else:
                    note = "a different function (every earlier cell)"
                ms, wall = _time_calls(fn, max(1, reps), device)
                graph = None
                if m == "plugin" and device[0] == "cuda":
                    try:
                        graph = _graph_ms(fn, device)
                    except Exception as exc:  # noqa: BLE001 - reported beside the row
                        note = f"graph replay failed: {type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001
                rows.append(BenchRow(shape, fmt, label, None, None, None, None, f"failed: {type(exc).__name__}: {exc}"))
                if emit:
                    emit(_progress(rows[-1]))
                continue
            if m == "plugin" and plugin_ms is None:
                plugin_ms = ms
            ratio = ms / plugin_ms if plugin_ms else None
            gbps = nbytes / (ms * 1e6) if nbytes and ms and m not in ("gather-floor", "gather-floor-grouped") else None
            ggbps = nbytes / (graph * 1e6) if nbytes and graph else None
            rows.append(BenchRow(shape, fmt, label, ms, ratio, err,
                                 err / ref_scale if err is not None and ref_scale > 0 else None, note, peak, wall,
                                 graph, gbps, ggbps))
            if emit:
                emit(_progress(rows[-1]))
            del out
    return rows


def _method(m: str, case: Any, device: tuple[str, int], variant: str | None, op: str,
            api: Any) -> tuple[Callable[[], Any], str]:
    """(callable, label) for one method; inputs are placed before, so the callable times only the work."""
    if m == "plugin":
        q, kv, ids, width = _place(case, device)
        call = api.qsa_prompt_attn if op == "prompt" else api.qsa_decode_attn
        from .parity import _nan_filled
        out = _nan_filled(q, tuple(case.q.shape))
        label = "plugin"
        try:
            chosen = api.which(q, kv, ids, width, path=op, variant=variant).variant
            label = f"plugin ({chosen})" if variant else f"plugin auto ({chosen})"
        except Exception:  # noqa: BLE001 - the label is cosmetic
            if variant:
                label = f"plugin ({variant})"
        return (lambda: call(q, kv, ids, width, variant=variant, out=out)), label
    if m == "numpy-fp32":
        from .reference import qsa_attn_numpy
        return (lambda: qsa_attn_numpy(case.q, case.kv, case.ids, case.width, dtype=np.float32)), \
            "numpy fp32 gather+softmax+matmul"
    if m in ("torch-fp32", "torch-fp32-sdpa", "torch-bf16-sdpa"):
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise ImportError("torch is not installed") from exc
        dtype = "bfloat16" if "bf16" in m else "float32"
        sdpa = m.endswith("sdpa")
        label = f"torch {'bf16' if 'bf16' in m else 'fp32'} gather+{'SDPA' if sdpa else 'softmax+matmul'}"
        return TorchGather(case, device, dtype, sdpa), label
    if m == "dense-bf16-sdpa":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise ImportError("torch is not installed") from exc
        return TorchDense(case, device), "dense bf16 SDPA (all earlier cells)"
    if m == "copy-floor":
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise ImportError("torch is not installed") from exc
        return CopyFloor(case, device), "copy floor (device copy of the bytes read)"
    if m in FLOORS:
        from .gather_floor import GatherFloor
        from .targets import grouped_queries
        n = grouped_queries(case.group) if m == "gather-floor-grouped" else 1
        label = "gather floor, per query" if n == 1 else f"gather floor, union of {n} queries"
        return GatherFloor(case, device, n), label
    raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {m!r}")


def _progress_line(text: str | None) -> None:
    """Progress on a terminal only, rewritten in place (the table is the result; a log gets it once)."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + (text or ""))
        sys.stderr.flush()


def _progress(r: BenchRow) -> str:
    if r.ms is None:
        return f"{r.shape} {r.fmt} {r.method}: {r.note}"
    err = "" if r.max_err is None else f", max err vs fp64 {r.max_err:.3g}"
    return f"{r.shape} {r.fmt} {r.method}: {r.ms:.3f} ms{err}"


def format_rows(rows: Sequence[BenchRow], device_kind: str = "cpu") -> str:
    """The table and what its columns mean. Columns no row fills (wall time and peak memory on the CPU) are
    left out."""
    head = ("context x queries", "format", "method", "ms per call", "graph ms", "GB/s", "graph GB/s", "wall ms",
            "x plugin's time", "max err vs fp64", "err / scale", "peak MB", "note")
    cells = [(r.shape, r.fmt, r.method, "-" if r.ms is None else f"{r.ms:.4f}",
              "-" if r.graph_ms is None else f"{r.graph_ms:.4f}", "-" if r.gbps is None else f"{r.gbps:.0f}",
              "-" if r.graph_gbps is None else f"{r.graph_gbps:.0f}",
              "-" if r.wall_ms is None else f"{r.wall_ms:.3f}",
              "-" if r.ratio is None else f"{r.ratio:.2f}", "-" if r.max_err is None else f"{r.max_err:.3g}",
              "-" if r.rel_err is None else f"{r.rel_err:.3g}", "-" if r.peak_mb is None else f"{r.peak_mb:.1f}",
              r.note) for r in rows]
    keep = [i for i, h in enumerate(head) if h in ("context x queries", "format", "method", "note")
            or (any(c[i] != "-" for c in cells) and not (h == "wall ms" and device_kind == "cpu"))]  # = ms there
    if not any(c[-1] for c in cells):
        keep.remove(len(head) - 1)
    head = tuple(head[i] for i in keep)
    cells = [tuple(c[i] for i in keep) for c in cells]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(head)]
    fmt = lambda c: "  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip()  # noqa: E731
    how = ("device time by events around back-to-back calls (one call queued before the start event)"
           if device_kind != "cpu" else "median wall time of single calls")
    legend = [f"ms per call: {how}."]
    if "graph ms" in head:
        legend.append("graph ms: GPU time per call from a CUDA-graph replay of 20 back-to-back calls.")
    if "GB/s" in head:
        legend.append("GB/s: the bytes a call must read (K, V codes and scales of the selected cells) / ms per call.")
    if "graph GB/s" in head:
        legend.append("graph GB/s: the same bytes / graph ms (the GPU's rate without the host's launch rate).")
    if "wall ms" in head:
        legend.append("wall ms: one call waited for, host work included.")
    legend.append("x plugin's time: this method's time divided by the first plugin row's (> 1: the plugin is faster).")
    legend.append("err / scale: the largest error against the FP64 oracle divided by the largest |value| of the "
                  "result.")
    if "peak MB" in head:
        legend.append("peak MB: device memory a call allocates beyond its inputs and output.")
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(c) for c in cells] + [""] + legend)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``strata-kernels bench``."""
    parser.add_argument("--shapes", help=f"CONTEXTxQUERIES list (default: {CPU_SHAPES} on the CPU, "
                        f"{GPU_SHAPES} on a GPU)")
    parser.add_argument("--format", default="int8", help="KV format(s): fp16, int8, q4_0, k8v4 (comma-separated)")
    parser.add_argument("--reps", type=int, help=f"timed calls per method; the median is kept (default "
                        f"{CPU_REPS} on the CPU, {GPU_REPS} on a GPU)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda[:N] or hip[:N]")
    parser.add_argument("--variant", help="plugin variant(s) to time, comma-separated, or 'all' (every variant "
                        "the plugin holds that takes the format); default: the dispatcher's choice")
    parser.add_argument("--methods", help=f"comma-separated subset of {', '.join(METHODS)}")
    parser.add_argument("--op", default="prompt", choices=("prompt", "decode"), help="plugin operation to time")
    parser.add_argument("--head-dim", type=int, default=256)
    parser.add_argument("--group", type=int, default=12)
    parser.add_argument("--n-head-kv", type=int, default=2)
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw the times as a chart (needs matplotlib: "
                        "pip install 'strata-kernels[plot]')")


def run(args: argparse.Namespace, api: Any = None) -> int:
    """``strata-kernels bench``: print the table; 0 on success, 2 on a usage error, 1 if the plugin failed."""
    from .testing import format_name
    try:
        device = parse_device(args.device)
        shapes = parse_shapes(args.shapes or (CPU_SHAPES if device[0] == "cpu" else GPU_SHAPES))
        fmts = [format_name(f.strip()) for f in args.format.split(",") if f.strip()]
        methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
        bad = [m for m in methods or [] if m not in METHODS]
        if bad:
            raise ValueError(f"--methods: unknown {', '.join(bad)}; expected some of {', '.join(METHODS)}")
        reps = args.reps if args.reps is not None else (CPU_REPS if device[0] == "cpu" else GPU_REPS)
        if reps < 1:
            raise ValueError(f"--reps: expected >= 1, got {reps}")
    except ValueError as exc:
        print(f"strata-kernels bench: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("strata-kernels bench: --plot needs matplotlib: pip install 'strata-kernels[plot]'", file=sys.stderr)
            return 2
    print(f"strata-kernels bench on {_device_name(device)}: {args.op} operation, shapes are context x queries, "
          f"{reps} timed call(s) per method", flush=True)
    rows: list[BenchRow] = []
    for fmt in fmts:
        variants = _variant_list(args.variant, fmt, device, args.op, api)
        rows += bench_rows(shapes, fmt=fmt, reps=reps, device=device, methods=methods, variants=variants,
                           op=args.op, head_dim=args.head_dim, group=args.group, n_head_kv=args.n_head_kv,
                           api=api, emit=_progress_line)
    _progress_line(None)
    print(format_rows(rows, device[0]))
    if args.plot:
        from .plot import plot_rows
        title = f"strata-kernels bench, {args.op} on {_device_name(device)}"
        print(f"wrote {plot_rows(rows, args.plot, title)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"op": args.op, "device": list(device), "device_name": _device_name(device),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": _commit(),
                       **_tree_state(), "reps": reps, "rows": [asdict(r) for r in rows]}, f, indent=1)
    plugin_failed = any(r.method.startswith("plugin") and r.ms is None for r in rows)
    return 1 if plugin_failed else 0


def _device_name(device: tuple[str, int]) -> str:
    if device[0] == "cpu":
        import platform
        return platform.processor() or platform.machine()
    try:
        import torch
        return torch.cuda.get_device_name(device[1])
    except Exception:  # noqa: BLE001 - the name is a label
        return f"{device[0]}:{device[1]}"


def _commit() -> str:
    """The checkout's commit (STRATA_KERNELS_COMMIT where the tree travels without .git), or 'unknown'."""
    import os
    import subprocess
    env = os.environ.get("STRATA_KERNELS_COMMIT")
    if env:
        return env
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _tree_state(cwd: str | None = None) -> dict:
    """Whether the checkout's tracked files differ from its commit, and a SHA-256 of that difference (`git diff
    --binary HEAD`), so that a result measured on a tree with uncommitted changes says so and names them; None for
    both where git cannot tell (no .git, STRATA_KERNELS_COMMIT set)."""
    import hashlib
    import os
    import subprocess
    unknown = {"tree_modified": None, "tree_diff_sha256": None}
    if os.environ.get("STRATA_KERNELS_COMMIT"):
        return unknown
    cwd = cwd or os.path.dirname(os.path.abspath(__file__))
    try:
        r = subprocess.run(["git", "diff", "--binary", "HEAD"], capture_output=True, timeout=20, cwd=cwd)
    except (OSError, subprocess.SubprocessError):
        return unknown
    if r.returncode != 0:
        return unknown
    return {"tree_modified": bool(r.stdout),
            "tree_diff_sha256": hashlib.sha256(r.stdout).hexdigest() if r.stdout else None}


def _variant_list(spec: str | None, fmt: str, device: tuple[str, int], op: str, api: Any) -> list[str | None]:
    """--variant: None (dispatch), 'a,b', or 'all' = the dispatcher's choice then every compiled variant taking fmt."""
    if not spec:
        return [None]
    if spec != "all":
        return [v.strip() for v in spec.split(",") if v.strip()]
    from .targets import VARIANT_RULES
    from .testing import FORMAT_CODES
    code = FORMAT_CODES[fmt]
    held = (api or _default_api()).plugin_variants(device)
    return [None] + [v for v in held if v in VARIANT_RULES and code in VARIANT_RULES[v]["formats"]
                     and op in VARIANT_RULES[v]["ops"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strata-kernels bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
