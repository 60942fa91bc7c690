"""``strata-kernels bench --overhead``: host time per call of the engine's call path (docs/engine.md).

Per operation (decode of 1 query over a 4,096-cell cache, prompt of 16 queries; on the CPU 1 query over 16 cells and 16 over 64) it
times, in one run and on the same arrays: the plain call ``sk.qsa_*_attn(..., out=out)``, ``plan.run``, the torch op
(``torch.ops.strata_kernels.qsa_*_attn_out``) and its kernel called without the dispatcher, a bare call of the loader
with the same arguments (scratch and flag prepared beforehand, as the plan does), and a trivial framework op
(``torch.add`` / ``np.add`` of a small array).

Host time = wall time of each call as seen by the caller, median over ``--calls`` calls. On a GPU the calls run in
batches of ``--batch`` with a stream sync between batches (outside the timed calls), so the launch queue never fills
and the numbers are the host's work, not the device's; the device time per call is reported beside them.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from . import ops, testing
from .bench import _commit, _tree_state
from .parity import parse_device


@dataclass
class OverheadRow:
    op: str                 # "decode 1x4096", "prompt 16x4096"
    method: str
    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    calls: int
    note: str = ""


def _time_calls(fn: Callable[[], Any], calls: int, batch: int, sync: Callable[[], None]) -> list[float]:
    for _ in range(min(200, calls)):  # warm-up: plans, caches, lazy module loads
        fn()
    sync()
    ts: list[float] = []
    clock = time.perf_counter_ns
    while len(ts) < calls:
        for _ in range(min(batch, calls - len(ts))):
            t0 = clock()
            fn()
            ts.append(clock() - t0)
        sync()
    return ts


def _row(op: str, method: str, ts: list[float], note: str = "") -> OverheadRow:
    a = np.asarray(ts) / 1e3
    return OverheadRow(op, method, float(np.median(a)), float(np.percentile(a, 10)), float(np.percentile(a, 90)),
                       len(ts), note)


def _bare_loader(op: int, p: Any, q, kv, ids, width, out, stream: int) -> Callable[[], Any]:
    """The loader's array call with the plan's scratch and error word (what a C++ engine's call costs from Python)."""
    plugin = p.plugin
    scratch = p.workspace
    bad = ops._framework_alloc(q, (2,), "int64", ops._INT64_MAX)
    args = (op, p.variant, kv.format_code, q, out, ids, width, 1, kv.page_table, kv.k, kv.v, kv.k_scale, kv.v_scale,
            kv.n_head_kv, kv.head_dim, p.group, kv.n_phys_pages, scratch, bad, 0, stream)
    return lambda: plugin.call(*args)


def measure(device: tuple[str, int], calls: int, batch: int, log: Callable[[str], None] = print) -> dict:
    import strata_kernels as sk
    on_gpu = device[0] != "cpu"
    shapes = [("decode", 4096, 1), ("prompt", 4096, 16)] if on_gpu else [("decode", 16, 1), ("prompt", 64, 16)]
    torch = None
    try:
        import torch

        from . import torch_ops  # registers torch.ops.strata_kernels.*
    except ImportError:
        if on_gpu:
            raise
    rows: list[OverheadRow] = []
    gpu_us: dict[str, float] = {}
    for opname, ctx, n_q in shapes:
        case = testing.make_case("int8", ctx, n_q)
        label = f"{opname} {n_q}x{ctx}"
        opcode = ops._OP_PROMPT if opname == "prompt" else ops._OP_DECODE
        call = sk.qsa_prompt_attn if opname == "prompt" else sk.qsa_decode_attn
        if on_gpu:
            dev = torch.device(device[0] if device[0] != "hip" else "cuda", device[1])
            q, kv, ids, width = testing.to_torch(case, dev)
            sync = torch.cuda.synchronize
            stream = int(torch.cuda.current_stream(dev).cuda_stream)
            small_a = torch.ones(16, device=dev)
            small_out = torch.empty_like(small_a)
        else:
            kv, q, ids, width = case.kv, case.q, case.ids, case.width
            sync = lambda: None  # noqa: E731
            stream = 0
            small_a = np.ones(16, dtype=np.float32)
            small_out = np.empty_like(small_a)
        out = ops._framework_alloc(q, tuple(q.shape), "float32")
        p = sk.plan(kv, op=opname, max_queries=n_q, cap=int(ids.shape[1]), n_head=int(q.shape[1]))
        methods: list[tuple[str, Callable[[], Any], str]] = [
            ("plain call", lambda: call(q, kv, ids, width, out=out), "sk.qsa_*_attn(q, kv, ids, width, out=out)"),
            ("plan.run", lambda: p.run(q, ids, width, out=out), ""),
        ]
        if torch is not None:
            tq, tkv, tids, twidth = (q, kv, ids, width) if on_gpu else testing.to_torch(case, "cpu")
            tout = out if on_gpu else torch.from_numpy(out)
            top = getattr(torch.ops.strata_kernels, f"qsa_{opname}_attn_out").default
            targs = (tq, "int8", tkv.k, tkv.k_scale, tkv.v, tkv.v_scale, tkv.page_table, tids, twidth, tout)
            methods.append(("torch op", lambda: top(*targs), f"torch.ops.strata_kernels.qsa_{opname}_attn_out"))
            kernel = torch_ops._kernels(opcode, on_gpu)[0]
            methods.append(("op kernel", lambda: kernel(*targs),
                            "the torch op's kernel called directly: the torch op less the dispatcher"))
        methods.append(("bare loader", _bare_loader(opcode, p, q, kv, ids, width, out, stream),
                        "plugin.call with the same arrays (no checks; flag not read)"))
        if on_gpu:
            methods.append(("torch.add", lambda: torch.add(small_a, small_a, out=small_out), "16 floats, out="))
        else:
            methods.append(("np.add", lambda: np.add(small_a, small_a, out=small_out), "16 floats, out="))
            if torch is not None:
                ta = torch.from_numpy(small_a)
                tout_small = torch.from_numpy(small_out)
                methods.append(("torch.add", lambda: torch.add(ta, ta, out=tout_small), "16 floats, out="))
        for name, fn, note in methods:
            ts = _time_calls(fn, calls, batch, sync)
            rows.append(_row(label, name, ts, note))
            r = rows[-1]
            log(f"  {label:16s} {name:12s} median {r.median_us:8.2f} us  p10 {r.p10_us:8.2f}  p90 {r.p90_us:8.2f}"
                f"  ({r.calls} calls)")
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            n = 200
            start.record()
            for _ in range(n):
                p.run(q, ids, width, out=out)
            end.record()
            sync()
            gpu_us[label] = start.elapsed_time(end) * 1e3 / n
            log(f"  {label:16s} device time per call (back to back): {gpu_us[label]:.2f} us")
        sk.check_errors()
    name = ops.device_name(device)
    return {
        "what": "host time per call (median of individual calls' wall time)",
        "op": [f"{s[0]} {s[2]}x{s[1]}" for s in shapes],
        "device": name, "device_kind": device[0],
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": _commit(), **_tree_state(), "host": platform.node(), "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None), "calls_per_method": calls, "batch": batch,
        "check_ids": os.environ.get("STRATA_KERNELS_CHECK_IDS", "lazy (default)"),
        "device_us_per_call": gpu_us, "rows": [asdict(r) for r in rows],
    }


def format_table(result: dict) -> str:
    lines = [f"Host time per call on {result['device']} ({result['date']}, commit {result['commit'][:12]}, "
             f"{result['calls_per_method']} calls per method)", "",
             "| op | method | median µs | p10 µs | p90 µs | note |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['op']} | {r['method']} | {r['median_us']:.2f} | {r['p10_us']:.2f} | {r['p90_us']:.2f} | "
                     f"{r['note']} |")
    for op, us in result.get("device_us_per_call", {}).items():
        lines.append(f"\nDevice time per call, {op}: {us:.2f} µs (back-to-back plan.run, CUDA events)")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overhead", action="store_true",
                        help="time the host path per call (plain call, plan.run, torch op, bare loader, a trivial "
                             "framework op) instead of the kernels")
    parser.add_argument("--calls", type=int, default=10000, help="--overhead: timed calls per method (default 10000)")
    parser.add_argument("--batch", type=int, default=200,
                        help="--overhead: calls between stream syncs on a GPU (default 200, below the launch queue)")


def run(args: argparse.Namespace) -> int:
    device = parse_device(args.device)
    result = measure(device, args.calls, args.batch)
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0
