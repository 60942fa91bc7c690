"""The parity harness of docs/verification.md: every variant of the loaded plugin against the chunk + merge decode
algorithm ("old", batches of 32 queries) and the FP64 oracle, on the synthetic cases of docs/verification.md.

``strata-kernels parity [context] [queries] [reps] [options]``; exit codes 0 (no failure), 1 (a failure),
2 (usage error), 77 (the test does not apply to this device). The last line is
``PASSED: n  SKIPPED (fallback): n  FAILURES: n  SKIPPED (not applicable): n``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import _arrays as A
from .ops import FORMATS
from .targets import KNOWN_VARIANTS as _TABLE_VARIANTS
from .targets import VARIANT_RULES
from .errors import GeometryMissing
from .geometry import why_not as geometry_why_not

# ---------------------------------------------------------------------------------------------------------------
# Variant facts (docs/variants.md)
# ---------------------------------------------------------------------------------------------------------------
DECODE_FAMILY = ("fp32", "fp32_pre75", "fp32_lanecell")          # the "old" algorithm and its bit-identical forms
PROMPT_KERNELS = ("v1", "v2", "imma", "grouped", "v2t", "v70", "wmma", "wmma_fast", "wmma_i8", "rdna2", "gpair")
DECODE_KERNELS = ("split", "flash")                               # decode operation only (cases 12, 13)
KNOWN_VARIANTS = _TABLE_VARIANTS + ("fp64",)
# The formats each variant takes come from targets.VARIANT_RULES (also rendered into the plugins' dispatch).
VARIANT_FORMATS: dict[str, tuple[str, ...]] = {
    **{v: tuple(FORMATS[c] for c in r["formats"]) for v, r in VARIANT_RULES.items()},
    "fp64": FORMATS,
}
ROUNDS_V = ("v1", "v70", "grouped")  # gather K8V4 V as fp16_rn((n - 8) d): budgeted in cases 7-8 (docs/verification.md)
REPORT_ONLY = ("wmma_fast",)      # docs/verification.md: reported, not held to checks 1-2
PERIOD = 251
OLD_BATCH = 32                    # ATTN_BATCH of docs/operation.md


def applies(variant: str, fmt: str, op: str = "prompt") -> bool:
    """Whether a forced ``variant`` can run format ``fmt`` on operation ``op`` ('prompt' or 'decode')."""
    if op == "decode":
        return variant in DECODE_KERNELS and fmt in VARIANT_FORMATS[variant]
    return variant not in DECODE_KERNELS + ("fp64",) and fmt in VARIANT_FORMATS.get(variant, ())


# ---------------------------------------------------------------------------------------------------------------
# The case table (docs/verification.md), as data
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseRow:
    """One row of the case table. ``shapes`` holds (context, queries) pairs: 'ctx' / 'nq' stand for the run's sizes,
    ('min', k) for min(nq, k), 'periodic' for the periodic case's query count."""
    number: int
    formats: tuple[str, ...]
    shapes: tuple[tuple[Any, Any], ...]
    note: str
    holes: bool = False
    width0: bool = False
    real_scales: bool = False
    periodic: bool = False
    op: str = "prompt"


_FULL = ("ctx", "nq")
_S1500 = (1500, ("min", 1500))
_S2100 = (2100, ("min", 256))
CASE_TABLE: tuple[CaseRow, ...] = (
    CaseRow(1, ("int8",), (_FULL,), "all queries sparse"),
    CaseRow(2, ("fp16",), (_FULL,), ""),
    CaseRow(3, ("q4_0",), (_FULL,), "skipped (fallback) wherever Q4_0 has no prompt kernel"),
    CaseRow(4, ("q4_0",), (_S1500,), ""),
    CaseRow(5, ("int8",), (_S1500,), "short context: the selection is every cell"),
    CaseRow(6, ("int8",), (_S2100,), "the identity-to-sparse edge"),
    CaseRow(7, ("k8v4",), (_FULL, _S1500, _S2100), "exact V scales"),
    CaseRow(8, ("k8v4",), (_FULL, _S1500, _S2100), "realistic V scales, with the fp16 budget", real_scales=True),
    CaseRow(9, ("fp16", "int8", "k8v4"), (_S1500, _S2100), "page holes", holes=True),
    CaseRow(10, ("fp16", "int8", "k8v4"), (_S1500,), "width-0 queries", width0=True),
    CaseRow(11, ("fp16", "int8", "k8v4"), ((200, "periodic"),),
            "more than 65,535 queries (launch split), periodic", periodic=True),
    CaseRow(12, ("int8", "fp16", "q4_0", "k8v4"), (("ctx", 1), ("ctx", 4), ("ctx", 8), (2100, 4)),
            "decode kernels vs chunk + merge", op="decode"),
    CaseRow(13, ("fp16", "int8", "k8v4"), ((1500, 8), (2100, 64)), "decode kernels: page holes", holes=True,
            op="decode"),
    CaseRow(14, ("fp16", "int8", "k8v4"), ((1500, 8),), "decode kernels: width-0 queries", width0=True, op="decode"),
)


@dataclass(frozen=True)
class CaseSpec:
    """One concrete case: a row of the table at one format and one shape."""
    number: int
    fmt: str
    ctx: int
    n_q: int
    note: str = ""
    holes: bool = False
    width0: bool = False
    real_scales: bool = False
    periodic: bool = False
    op: str = "prompt"

    @property
    def label(self) -> str:
        from .testing import case_label
        lab = case_label(self.fmt, holes=self.holes, width0=self.width0, real_scales=self.real_scales,
                         periodic=self.periodic)
        return lab + (" decode" if self.op == "decode" else "")

    @property
    def n_q_effective(self) -> int:
        return self.n_q if self.periodic else min(self.n_q, self.ctx)

    @property
    def name(self) -> str:
        return f"{self.label}, ctx {self.ctx}, {self.n_q_effective} queries"


@dataclass(frozen=True)
class Sizes:
    ctx: int
    queries: int
    reps: int
    periodic_queries: int


SPEC_SIZES = Sizes(32768, 2048, 5, 65541)                # docs/verification.md defaults, used on GPUs
# The CPU default must finish in about a minute on two cores; the periodic case keeps two full periods.
CPU_SIZES = Sizes(4096, 64, 1, 2 * PERIOD + 1)
# --quick: a smoke test of a few seconds; the periodic case keeps one full period and one repeat.
QUICK_SIZES = Sizes(2560, 16, 1, PERIOD + 1)


def expand_cases(sizes: Sizes, numbers: Sequence[int] | None = None) -> list[CaseSpec]:
    """The concrete cases of docs/verification.md for these sizes (all rows, or the given row numbers)."""
    out = []
    for row in CASE_TABLE:
        if numbers is not None and row.number not in numbers:
            continue
        for fmt in row.formats:
            for c, n in row.shapes:
                ctx = sizes.ctx if c == "ctx" else int(c)
                if n == "nq":
                    nq = sizes.queries
                elif n == "periodic":
                    nq = sizes.periodic_queries
                elif isinstance(n, tuple):
                    nq = min(sizes.queries, n[1])
                else:
                    nq = int(n)
                out.append(CaseSpec(row.number, fmt, ctx, nq, row.note, row.holes, row.width0, row.real_scales,
                                    row.periodic, row.op))
    return out


def sample_queries(n_q: int, widths: np.ndarray) -> np.ndarray:
    """The FP64 sample: queries 0, s, 2s, ... with s = max(1, n_q / 16), plus every width-0 query (sorted, unique)."""
    s = max(1, n_q // 16)
    return np.union1d(np.arange(0, n_q, s), np.flatnonzero(np.asarray(widths) == 0)).astype(np.int64)


# ---------------------------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------------------------
PASS, FAIL, SKIP_FALLBACK, SKIP_NA = "PASS", "FAIL", "SKIP (fallback)", "SKIP (not applicable)"


@dataclass
class ParityResult:
    case: int
    name: str
    label: str
    fmt: str
    ctx: int
    n_q: int
    op: str
    variant: str
    status: str
    err_old: float = math.nan
    err_new: float = math.nan
    ref_scale: float = math.nan
    diff: float = math.nan
    scale: float = math.nan
    t_old_ms: float = math.nan
    t_new_ms: float = math.nan
    failed_checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    line: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASS


def _g(x: float) -> str:
    return f"{x:.3g}"


def _rel(a: float, b: float) -> float:
    return a / b if b > 0 else (0.0 if a == 0 else math.inf)


def pass_rule(r: ParityResult, on_cpu: bool) -> str:
    """The accuracy rule this result is held to, in words with its numbers (docs/verification.md)."""
    if r.variant in REPORT_ONLY:
        return "reported only (a fast form, not held to the accuracy rules)"
    if on_cpu and r.variant in DECODE_FAMILY:
        return "must be <= 1e-05"
    bound = max(4 * r.err_old, 1e-6 * r.ref_scale)
    return (f"must be <= {_g(_rel(bound, r.ref_scale))} (4 x fp32's error or 1e-06, the larger); "
            f"vs fp32 {_g(_rel(r.diff, r.scale))} of scale, must be <= 0.0001")


def format_line(r: ParityResult, on_cpu: bool = True) -> str:
    """One line per (case, variant): result, case, variant, error against FP64 as a fraction of the output scale
    with the rule it must meet, and the time (the legend says what each part means)."""
    head = f"{r.status.split()[0]:<4}  case {r.case:<2} {r.name:<42} {r.variant or '-':<9}"
    if r.status in (SKIP_FALLBACK, SKIP_NA):
        kind = "fallback" if r.status == SKIP_FALLBACK else "not applicable"
        return f"{head} {kind}: " + "; ".join(r.notes)
    body = f"vs FP64 {_g(_rel(r.err_new, r.ref_scale))} of scale, {pass_rule(r, on_cpu)}"
    if not math.isnan(r.t_new_ms):
        if on_cpu or math.isnan(r.t_old_ms):
            body += f"; {r.t_new_ms:.3f} ms"
        else:
            body += (f"; {r.t_new_ms:.3f} ms, fp32 fallback {r.t_old_ms:.3f} ms "
                     f"({r.t_old_ms / r.t_new_ms:.2f}x faster)" if r.t_new_ms > 0 else "")
    return f"{head} {body}"


def legend(on_cpu: bool) -> str:
    """What the lines mean; printed once before the cases."""
    lines = [
        "Each line: result, case number and data (format, context, queries), the variant tested, its largest error",
        "against the FP64 oracle as a fraction of the output scale (the largest |value| of the FP64 result) with the",
        "rule it must meet, then its time per call. Every case must also give finite outputs, exact zeros where no",
        "cell is valid, and the same bits on a second call.",
    ]
    if on_cpu:
        lines.append("On the CPU the plugin's only variant is fp32, so it is held to 1e-05 of scale and nothing is "
                     "compared for speed.")
    else:
        lines += ["'vs fp32' is the largest difference from the plugin's fp32 kernel (the engine's fallback), which "
                  "runs all queries", "32 at a time; its time is shown beside the variant's."]
    lines += ["SKIP fallback: on this device the format has no prompt kernel and runs fp32, which the other cases",
              "check. SKIP not applicable: the variant is not in the plugin or does not take this format.",
              "More in docs/verification.md."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Array helpers that work on numpy and torch (device) arrays without copying whole outputs to the host
# ---------------------------------------------------------------------------------------------------------------
_ROWS_PER_PIECE = 4096


def _is_torch(x: Any) -> bool:
    return A.framework(x) == "torch"


def _max_abs(x: Any, y: Any = None) -> float:
    """max |x| or max |x - y|, NaN if any NaN; taken in pieces to bound temporaries."""
    m = 0.0
    for s in range(0, x.shape[0], _ROWS_PER_PIECE):
        a = x[s:s + _ROWS_PER_PIECE]
        d = a if y is None else a - y[s:s + _ROWS_PER_PIECE]
        v = float(d.abs().max().item()) if _is_torch(d) else float(np.max(np.abs(d)))
        if math.isnan(v):
            return math.nan
        m = max(m, v)
    return m


def _all_finite(x: Any) -> bool:
    if _is_torch(x):
        import torch
        return bool(torch.isfinite(x).all().item())
    return bool(np.isfinite(x).all())


def _host_rows(x: Any, idx: np.ndarray) -> np.ndarray:
    if _is_torch(x):
        import torch
        return x[torch.as_tensor(idx, device=x.device)].cpu().numpy().astype(np.float64)
    return np.asarray(x[idx], dtype=np.float64)


def _periodic_err(x: Any, period: int) -> float:
    base = x[:period]
    m = 0.0
    for s in range(period, x.shape[0], period):
        blk = x[s:s + period]
        v = _max_abs(blk, base[:blk.shape[0]])
        if math.isnan(v):
            return math.nan
        m = max(m, v)
    return m


def _nan_filled(like: Any, shape: tuple[int, ...]) -> Any:
    """float32 output pre-filled with 0xFF bytes (a NaN) so unwritten elements are caught (docs/verification.md)."""
    if _is_torch(like):
        import torch
        t = torch.empty(shape, dtype=torch.float32, device=like.device)
        t.view(torch.int32).fill_(-1)
        return t
    a = np.empty(shape, dtype=np.float32)
    a.view(np.uint8).fill(0xFF)
    return a


def _copy(x: Any) -> Any:
    return x.clone() if _is_torch(x) else x.copy()


def _same_bits(a: Any, b: Any) -> bool:
    if _is_torch(a):
        import torch
        return bool(torch.equal(a.view(torch.int32), b.view(torch.int32)))
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


def _place(case: Any, device: tuple[str, int]) -> tuple[Any, Any, Any, Any]:
    """The case's arrays on ``device`` (numpy on the CPU, torch tensors on a GPU)."""
    if device[0] == "cpu":
        return case.q, case.kv, case.ids, case.width
    from .testing import to_torch
    return to_torch(case, f"cuda:{device[1]}")  # torch names HIP devices 'cuda' too


def make_timer(device: tuple[str, int], reps: int) -> Callable[[Callable[[], Any]], float]:
    """ms per call of ``reps`` back-to-back calls: device events on a GPU; on the host a steady clock,
    the median of 3 such measurements. reps = 0: no timing (NaN)."""
    if reps <= 0:
        return lambda fn: math.nan
    if device[0] in ("cuda", "hip"):
        import torch

        def timed(fn: Callable[[], Any]) -> float:
            torch.cuda.synchronize(device[1])
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / reps
        return timed

    def timed_host(fn: Callable[[], Any]) -> float:
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            runs.append((time.perf_counter() - t0) * 1e3 / reps)
        return statistics.median(runs)
    return timed_host


# ---------------------------------------------------------------------------------------------------------------
# Running the cases
# ---------------------------------------------------------------------------------------------------------------
def _default_api():
    from . import ops
    return ops


def plan_variants(spec: CaseSpec, in_plugin: Sequence[str], requested: Sequence[str] | None,
                  device: tuple[str, int]) -> tuple[list[str], str | None, str]:
    """(variants to run, skip status or None, reason) for one case.

    Without ``requested``: on the CPU every plugin variant that applies (``fp32``); on a GPU the plugin's prompt
    kernels that apply (the decode family is the "old" side; force it with --variant to test it as "new"), and
    the decode kernels (``split``, ``flash``) for the decode cases. A format with no prompt kernel is a fallback skip; a variant missing from the plugin, or
    one that does not apply to the case, is "not applicable".
    """
    if requested:
        cands = list(requested)
    elif spec.op == "decode":
        cands = list(DECODE_KERNELS)
    elif device[0] == "cpu":
        cands = [v for v in in_plugin if v not in DECODE_KERNELS + ("fp64",)]
    else:
        cands = [v for v in in_plugin if v in PROMPT_KERNELS]
    run = [v for v in cands if v in in_plugin and applies(v, spec.fmt, spec.op)]
    if run:
        return run, None, ""
    if requested:
        missing = [v for v in requested if v not in in_plugin]
        if missing:
            return [], SKIP_NA, f"variant {', '.join(missing)} is not in the plugin"
        return [], SKIP_NA, f"{', '.join(requested)} does not run {spec.fmt} on the {spec.op} operation"
    if spec.op == "decode":
        return [], SKIP_NA, f"the plugin has no decode kernel for {spec.fmt}"
    return [], SKIP_FALLBACK, f"the prompt operation sends {spec.fmt} to the decode algorithm on this device"


def run_cases(cases: Sequence[CaseSpec], *, device: tuple[str, int] = ("cpu", 0), reps: int = 1,
              variants: Sequence[str] | None = None, head_dim: int = 256, group: int = 12, n_head_kv: int = 2,
              steps: bool = False, api: Any = None, emit: Callable[[str], None] | None = None) -> list[ParityResult]:
    """Run ``cases`` on ``device`` and return one result per (case, variant), skips included.

    ``api`` supplies ``qsa_prompt_attn``, ``qsa_decode_attn`` and ``plugin_variants`` (default: strata_kernels.ops);
    ``emit`` receives each output line (default: print).
    """
    from . import reference as R
    from .testing import make_case

    api = api or _default_api()
    emit = emit or (lambda s: print(s, flush=True))
    in_plugin = list(api.plugin_variants(device, (head_dim, group)))
    plans = [(spec, *plan_variants(spec, in_plugin, variants, device)) for spec in cases]
    timer = make_timer(device, reps)
    on_cpu = device[0] == "cpu"
    results: list[ParityResult] = []

    for spec, run, skip, reason in plans:
        base = dict(case=spec.number, name=spec.name, label=spec.label, fmt=spec.fmt, ctx=spec.ctx,
                    n_q=spec.n_q_effective, op=spec.op)
        if skip:
            r = ParityResult(**base, variant=",".join(variants or []), status=skip, notes=[reason])
            r.line = format_line(r, on_cpu)
            emit(r.line)
            results.append(r)
            continue

        case = make_case(spec.fmt, spec.ctx, spec.n_q, holes=spec.holes, width0=spec.width0,
                         real_scales=spec.real_scales, periodic=spec.periodic, n_head_kv=n_head_kv, group=group,
                         head_dim=head_dim, steps=steps)
        q, kv, ids, width = _place(case, device)
        n = case.n_q
        shape = (n, case.n_head, head_dim)
        widths = case.widths
        sample = sample_queries(n, widths)
        zero_rows = np.flatnonzero(R.count_valid(case.kv, case.ids, case.width) == 0)
        budgeted = [v for v in run if spec.fmt == "k8v4" and v in ROUNDS_V and spec.number in (7, 8)]
        if budgeted:
            ref, budget = R.qsa_attn_fp64_with_budget(case.q, case.kv, case.ids, case.width, sample)
            v_max = R.v_abs_max(case.kv)
        else:
            ref, budget, v_max = R.qsa_attn_fp64(case.q, case.kv, case.ids, case.width, sample), None, 0.0
        ref_scale = float(np.max(np.abs(ref))) if ref.size else 0.0

        old = _nan_filled(q, shape)

        def old_call() -> None:
            for b in range(0, n, OLD_BATCH):
                e = min(n, b + OLD_BATCH)
                api.qsa_decode_attn(q[b:e], kv, ids[b:e], width[b:e], variant="fp32", out=old[b:e])

        try:
            old_call()
            old_error = None
        except Exception as exc:  # noqa: BLE001 - any failure of the reference path fails the case
            old_error = f"the old path (fp32 decode, batches of {OLD_BATCH}) raised {type(exc).__name__}: {exc}"
        # On the CPU the variant is the fp32 kernel itself: timing the batched form of it compares nothing.
        t_old = timer(old_call) if old_error is None and not on_cpu else math.nan
        if old_error is None:
            err_old = float(np.max(np.abs(_host_rows(old, sample) - ref))) if sample.size else 0.0
            scale = _max_abs(old)
            old_finite = _all_finite(old)
            old_zero_ok = bool(np.all(_host_rows(old, zero_rows) == 0)) if zero_rows.size else True
        else:
            err_old, scale, old_finite, old_zero_ok = math.nan, math.nan, False, False

        case_results: list[ParityResult] = []
        outputs: dict[str, Any] = {}
        calls: dict[str, Callable[[], Any]] = {}
        for v in run:
            r = ParityResult(**base, variant=v, status=PASS, err_old=err_old, ref_scale=ref_scale, scale=scale,
                             t_old_ms=t_old)
            case_results.append(r)
            if old_error:
                r.status, r.failed_checks = FAIL, ["old path"]
                r.notes.append(old_error)
                continue
            new = _nan_filled(q, shape)
            if spec.op == "decode":
                call = (lambda v=v, new=new: api.qsa_decode_attn(q, kv, ids, width, variant=v, out=new))
            else:
                call = (lambda v=v, new=new: api.qsa_prompt_attn(q, kv, ids, width, variant=v, out=new))
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - a refusal of a variant the matrix runs is a failure
                r.status, r.failed_checks = FAIL, ["call"]
                r.notes.append(f"{v} raised {type(exc).__name__}: {exc}")
                continue
            first = _copy(new)
            r.t_new_ms = timer(call)
            if v in ("v2", "imma"):                      # kept for the IMMA-vs-v2 report (docs/verification.md)
                outputs[v], calls[v] = new, call
            _check(r, spec, new, old, ref, budget, sample, zero_rows, v_max, on_cpu, old_finite, old_zero_ok)
            if not _same_bits(first, new):
                r.failed_checks.append("deterministic")
                r.notes.append("a repeated call gave different bits (docs/operation.md: same bits run after run)")
            del first
            if r.failed_checks:
                r.status = FAIL

        if "v2" in outputs and "imma" in outputs:
            # docs/verification.md: two new variants compared are timed alternately twice and the second round is kept.
            for _ in range(2):
                t = {v: timer(calls[v]) for v in ("v2", "imma")}
            for r in case_results:
                if r.variant in t:
                    r.t_new_ms = t[r.variant]
            d = _max_abs(outputs["imma"], outputs["v2"])
            for r in case_results:
                if r.variant == "imma":
                    r.notes.append(f"imma vs v2 {_g(d)} ({_g(d / scale if scale > 0 else 0.0)} of scale)")

        for r in case_results:
            r.line = format_line(r, on_cpu)
            emit(r.line)
            for note in r.notes:
                emit(f"      {note}")
            results.append(r)
        del outputs, calls, old
    return results


def _check(r: ParityResult, spec: CaseSpec, new: Any, old: Any, ref: np.ndarray, budget: np.ndarray | None,
           sample: np.ndarray, zero_rows: np.ndarray, v_max: float, on_cpu: bool, old_finite: bool,
           old_zero_ok: bool) -> None:
    """The checks of docs/verification.md on one (case, variant); failures go to r.failed_checks with a note each."""
    fails, notes = r.failed_checks, r.notes
    new_s = _host_rows(new, sample)
    abs_err = np.abs(new_s - ref)
    r.err_new = float(np.max(abs_err)) if sample.size else 0.0
    r.diff = _max_abs(old, new)
    use_budget = budget is not None and r.variant in ROUNDS_V
    err_checked = float(np.max(abs_err - budget)) if use_budget and sample.size else r.err_new
    bound2 = 1e-4 * r.scale + ((2.0 ** -11) * v_max + 2.0 ** -25 if use_budget else 0.0)
    if use_budget:
        notes.append(f"K8V4 budget: max(|new - ref| - B) = {_g(err_checked)}; check 2 bound {_g(bound2)}")

    if r.variant not in REPORT_ONLY:                                      # reported only (format_line says so)
        bound1 = max(4 * r.err_old, 1e-6 * r.ref_scale)
        if not err_checked <= bound1:                                     # written so that NaN fails
            fails.append("1")
            notes.append(f"check 1: error vs FP64 {_g(err_checked)} > max(4 x old {_g(r.err_old)}, "
                         f"1e-6 x scale) = {_g(bound1)}")
        if not r.diff <= bound2:
            fails.append("2")
            notes.append(f"check 2: new vs old {_g(r.diff)} > {_g(bound2)}")

    finite = _all_finite(new)
    zero_ok = bool(np.all(_host_rows(new, zero_rows) == 0)) if zero_rows.size else True
    if not (finite and zero_ok and old_finite and old_zero_ok):
        fails.append("3")
        what = [w for w, ok in (("non-finite new output", finite), ("width-0/all-hole rows of new not exactly 0",
                                zero_ok), ("non-finite old output", old_finite),
                                ("width-0/all-hole rows of old not exactly 0", old_zero_ok)) if not ok]
        notes.append("check 3: " + ", ".join(what))

    if spec.periodic:
        p = _periodic_err(new, PERIOD)
        if not p <= 1e-6 * r.scale:
            fails.append("5")
            notes.append(f"check 5: query i differs from base query i mod {PERIOD} by {_g(p)} "
                         f"> 1e-6 x scale {_g(1e-6 * r.scale)}")

    if on_cpu and r.variant in DECODE_FAMILY:
        bound7 = 1e-5 * r.ref_scale
        if not (r.err_new <= bound7 and r.err_old <= bound7):
            fails.append("7")
            notes.append(f"check 7: fp32 vs FP64 old {_g(r.err_old)} / new {_g(r.err_new)} > 1e-5 x scale "
                         f"{_g(bound7)}")


# ---------------------------------------------------------------------------------------------------------------
# Summary, exit code, CLI
# ---------------------------------------------------------------------------------------------------------------
def summary_counts(results: Sequence[ParityResult]) -> dict[str, int]:
    return {"passed": sum(r.status == PASS for r in results),
            "fallback": sum(r.status == SKIP_FALLBACK for r in results),
            "failures": sum(r.status == FAIL for r in results),
            "not_applicable": sum(r.status == SKIP_NA for r in results)}


def summary_line(results: Sequence[ParityResult]) -> str:
    c = summary_counts(results)
    return (f"PASSED: {c['passed']}  SKIPPED (fallback): {c['fallback']}  FAILURES: {c['failures']}  "
            f"SKIPPED (not applicable): {c['not_applicable']}")


def exit_code(results: Sequence[ParityResult]) -> int:
    """1 with any failure; 77 when nothing ran or fell back (the whole test does not apply); else 0."""
    c = summary_counts(results)
    if c["failures"]:
        return 1
    if c["passed"] == 0 and c["fallback"] == 0:
        return 77
    return 0


def parse_device(text: str) -> tuple[str, int]:
    """'cpu', 'cuda', 'cuda:1', 'hip:0' -> (kind, index)."""
    kind, _, idx = text.strip().lower().partition(":")
    if kind not in ("cpu", "cuda", "hip") or (idx and not idx.isdigit()):
        raise ValueError(f"--device: expected cpu, cuda[:N] or hip[:N], got {text!r}")
    return kind, int(idx or 0)


def parse_case_numbers(text: str) -> list[int]:
    """'1,5,6' or '1-6,9' -> case numbers of docs/verification.md."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"--cases: expected numbers and ranges like 1,5-7, got {text!r}")
        out += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    known = {row.number for row in CASE_TABLE}
    bad = [n for n in out if n not in known]
    if bad or not out:
        raise ValueError(f"--cases: the cases are numbered 1..{max(known)} (docs/verification.md), got {text!r}")
    return sorted(set(out))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``strata-kernels parity`` (docs/verification.md)."""
    parser.add_argument("context", nargs="?", type=int, help="context of the full-size cases (default: 32768 "
                        "on a GPU, 4096 on the CPU)")
    parser.add_argument("queries", nargs="?", type=int, help="queries per chunk (default: 2048 on a GPU, 64 on "
                        "the CPU); clamped to <= context")
    parser.add_argument("reps", nargs="?", type=int, help="timed calls per measurement (default: 5 on a GPU, 1 "
                        "on the CPU, where the median of 3 measurements is kept)")
    parser.add_argument("--ctx", type=int, help="same as the positional context")
    parser.add_argument("--queries", dest="queries_opt", type=int, help="same as the positional queries")
    parser.add_argument("--reps", dest="reps_opt", type=int, help="same as the positional reps")
    parser.add_argument("--periodic-queries", type=int,
                        help="queries of case 11 (default 65541 on a GPU, 503 = two periods + 1 on the CPU)")
    parser.add_argument("--quick", action="store_true", help="a smoke test of a few seconds: ctx 2560, 16 queries, 1 rep, 252 periodic queries")
    parser.add_argument("--full", action="store_true", help="the spec's sizes even on the CPU (slow there)")
    parser.add_argument("--head-dim", type=int, default=256)
    parser.add_argument("--group", type=int, default=12, help="query heads per KV head (G)")
    parser.add_argument("--n-head-kv", type=int, default=2)
    parser.add_argument("--variant", help="comma-separated variants to test (default: every variant of the plugin "
                        "that applies to the case)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda[:N] or hip[:N]")
    parser.add_argument("--cases", help="subset of the cases of docs/verification.md, e.g. 1,5,6 or 1-6")
    parser.add_argument("--steps", action="store_true", help="pass steps [n_q, 4] instead of widths")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def _usage(msg: str) -> int:
    print(f"strata-kernels parity: {msg}", file=sys.stderr)
    return 2


def resolve_sizes(args: argparse.Namespace, device: tuple[str, int]) -> Sizes:
    base = QUICK_SIZES if args.quick else SPEC_SIZES if (args.full or device[0] != "cpu") else CPU_SIZES
    vals = {}
    for name, pos, opt in (("ctx", args.context, args.ctx), ("queries", args.queries, args.queries_opt),
                           ("reps", args.reps, args.reps_opt)):
        if pos is not None and opt is not None and pos != opt:
            raise ValueError(f"{name} given twice with different values ({pos} and {opt})")
        vals[name] = pos if pos is not None else opt if opt is not None else getattr(base, name)
    periodic = args.periodic_queries if args.periodic_queries is not None else base.periodic_queries
    if vals["ctx"] < 1:
        raise ValueError(f"context must be >= 1, got {vals['ctx']}")
    if vals["queries"] < 1:
        raise ValueError(f"queries must be >= 1, got {vals['queries']}")
    if vals["reps"] < 0:
        raise ValueError(f"reps must be >= 0, got {vals['reps']}")
    if periodic < 1:
        raise ValueError(f"--periodic-queries must be >= 1, got {periodic}")
    return Sizes(vals["ctx"], vals["queries"], vals["reps"], periodic)


def _device_ready(device: tuple[str, int]) -> str | None:
    """None if arrays can be placed on ``device``, else why not."""
    if device[0] == "cpu":
        return None
    try:
        import torch
    except ImportError:
        return f"torch is needed to place the test arrays on {device[0]} (pip install torch)"
    if not torch.cuda.is_available() or torch.cuda.device_count() <= device[1]:
        return f"no {device[0]} device {device[1]} is visible to torch"
    return None


def run(args: argparse.Namespace, api: Any = None) -> int:
    """``strata-kernels parity``: print a legend, one line per (case, variant) and the closing line;
    return the exit code (0, 1, 2 or 77)."""
    try:
        device = parse_device(args.device)
        sizes = resolve_sizes(args, device)
        numbers = parse_case_numbers(args.cases) if args.cases else None
        variants = [v.strip() for v in args.variant.split(",") if v.strip()] if args.variant else None
        unknown = [v for v in variants or [] if v not in KNOWN_VARIANTS or v == "fp64"]
        if unknown:
            raise ValueError(f"--variant: unknown variant {', '.join(unknown)}; expected some of "
                             f"{', '.join(v for v in KNOWN_VARIANTS if v != 'fp64')}")
        bad = geometry_why_not(args.head_dim, args.group)
        if bad or args.n_head_kv < 1:
            raise ValueError(f"geometry: {bad or f'--n-head-kv must be >= 1, got {args.n_head_kv}'}")
    except ValueError as exc:
        return _usage(str(exc))

    api = api or _default_api()
    why = _device_ready(device)
    in_plugin: list[str] = []
    if why is None:
        try:
            in_plugin = list(api.plugin_variants(device, (args.head_dim, args.group)))
        except GeometryMissing as exc:  # a plugin serves the device, none has this geometry: say how to build it
            return _usage(str(exc))
        except Exception as exc:  # noqa: BLE001 - no plugin for this device: the test does not apply
            why = f"no plugin serves {device[0]}:{device[1]} ({type(exc).__name__}: {exc})"
    if why is not None:
        print(f"SKIP: {why}")
        print("PASSED: 0  SKIPPED (fallback): 0  FAILURES: 0  SKIPPED (not applicable): 0")
        return 77
    try:
        dev_name = api.device_name(device)
    except Exception:  # noqa: BLE001 - the name is only for the header
        dev_name = device[0]
    print(f"strata-kernels parity on {dev_name} ({device[0]}:{device[1]}); plugin variants: {', '.join(in_plugin)}; "
          f"ctx {sizes.ctx}, {sizes.queries} queries, reps {sizes.reps}, periodic case {sizes.periodic_queries} "
          f"queries; HD {args.head_dim}, G {args.group}, n_head_kv {args.n_head_kv}")
    print(legend(device[0] == "cpu"), end="\n\n", flush=True)

    t0 = time.perf_counter()
    results = run_cases(expand_cases(sizes, numbers), device=device, reps=sizes.reps, variants=variants,
                        head_dim=args.head_dim, group=args.group, n_head_kv=args.n_head_kv, steps=args.steps,
                        api=api)
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        doc = {"device": list(device), "device_name": dev_name, "plugin_variants": in_plugin,
               "sizes": asdict(sizes), "geometry": {"head_dim": args.head_dim, "group": args.group,
                                                    "n_head_kv": args.n_head_kv},
               "summary": summary_counts(results), "exit_code": exit_code(results),
               "results": [asdict(r) for r in results]}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=float)
    print(summary_line(results), flush=True)
    return exit_code(results)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strata-kernels parity", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
