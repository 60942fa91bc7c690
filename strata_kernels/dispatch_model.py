"""The automatic variant choice of docs/variants.md, for devices that need not be present (``explain --simulate``).

The plugins decide for real (``templates/*/dispatch.inc.j2``, reported by ``which()``); this module states the same
rules in Python so the resolver can say which variant a simulated device would run. Tests hold the two together:
tests/cpu (the CPU plugin), tests/toolchain/test_dispatch_model.py (the HIP plugin entries on a fake HIP runtime)
and tests/gpu (the CUDA plugin on the device present) compare this model with ``which()`` case by case.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .targets import VARIANT_RULES, grouped_queries

FORMATS = ("fp16", "int8", "q4_0", "k8v4")          # the ABI's format codes 0..3
_FMT_NAME = {"fp16": "FP16", "int8": "INT8", "q4_0": "Q4_0", "k8v4": "K8V4"}
WMMA_GATE_GFX11 = ("gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151")


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "")[:1] == "1"


def _cc(arch: str) -> int:
    digits = "".join(ch for ch in arch[len("sm_"):] if ch.isdigit())
    return int(digits) if digits else -1


# Shared memory one block may opt in to, per NVIDIA compute capability (the CUDA programming guide's table); the
# plugins read the device's own attribute instead.
SMEM_OPTIN_KB = {80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227, 103: 227, 110: 227, 120: 99, 121: 99}
# and a multiprocessor's shared memory (the same table)
SMEM_SM_KB = {80: 164, 86: 100, 87: 164, 89: 100, 90: 228, 100: 228, 103: 228, 110: 228, 120: 100, 121: 100}


def grouped_smem_bytes(head_dim: int = 256) -> int:
    """Shared memory per block of the grouped kernel (the bound that cuda/dispatch.inc.j2 checks)."""
    return 656 * head_dim + 62720


# The union pre-pass's windows (cuda/grouped_union.inc.j2 defines them for the kernel and the plugin's dispatch):
# GROUPED_UNION_WORDS words of membership bits, as many bits a cell as the power of two at or above a group's queries;
# ids spanning GROUPED_UNION_MAX_WINDOWS windows or more take the search or the merge path instead.
GROUPED_UNION_WORDS = 8192
GROUPED_UNION_MAX_WINDOWS = 12
GROUPED_UNION_THREADS = 512
# the ONE form's 32-bit positions: it takes groups of at most this many row positions (nq x cap)
GROUPED_UNION_ONE_MAX_ENTRIES = 1 << 24
# past grouped_union_cb_max windows, where the running union does not fit, the ONE form takes batches of that many
# windows, up to this many batches
GROUPED_UNION_MAX_BATCHES = 64


def grouped_union_batched(nq: int) -> bool:
    """Whether groups of ``nq`` queries have the ONE form's batches built (G 1-4: their running union outgrows
    shared memory at the spec's caps)."""
    return nq >= 16


def grouped_union_window_cells(nq: int) -> int:
    """Cells in one window of the union pre-pass for groups of ``nq`` queries (32768 at G 8-12)."""
    bits = next(b for b in (1, 2, 4, 8, 16, 32) if nq <= b)
    return GROUPED_UNION_WORDS * (32 // bits)


def grouped_union_cb_max(nq: int) -> int:
    """The largest cluster (8, 4, 2 blocks a group; 1: none) whose ranks split a window's words evenly over their
    threads in whole 4-cell pages: the union pre-pass's ONE form covers caches of up to that many windows."""
    cpw = grouped_union_window_cells(nq) // GROUPED_UNION_WORDS  # cells a word
    return next((cb for cb in (8, 4, 2) if GROUPED_UNION_WORDS // cb % GROUPED_UNION_THREADS == 0
                 and GROUPED_UNION_WORDS // cb // GROUPED_UNION_THREADS * cpw % 4 == 0), 1)


def grouped_union_one_smem(nq: int, cap: int, nwin: int, cb: int) -> int:
    """Shared memory of the pre-pass's ONE form at cluster size ``cb`` over ``nwin`` windows: every window's part of
    the bits (a batch's: at most ``cb`` windows), then the staging of a part's entries."""
    return min(nwin, cb) * (GROUPED_UNION_WORDS // cb) * 4 + min(nq * cap, grouped_union_window_cells(nq) // cb) * 8


def grouped_union_one_cb(nq: int, cap: int, nwin: int, groups: int, sms: int, per_sm: int, fits: bool) -> int:
    """The launcher's cluster for the ONE form (1: none): the largest CB of at least ``nwin`` windows whose clusters
    fit the blocks the multiprocessors hold (two a multiprocessor over several windows where its registers, MANY at
    CB 8 takes one, and its shared memory allow); where the running union does not fit in shared memory (``fits``
    false), CB below ``nwin`` too, CB windows a batch (where grouped_union_batched, at most GROUPED_UNION_MAX_BATCHES
    batches), and where none fits the multiprocessors the smallest (several waves). As cuda/grouped_union.inc.j2."""
    c, least = grouped_union_cb_max(nq), 1
    while c > 1:
        bat = nwin > c  # batches of c windows
        if bat and (fits or not grouped_union_batched(nq) or -(-nwin // c) > GROUPED_UNION_MAX_BATCHES):
            break
        two = ((bat or nwin > 1) and c != 8 and 2 * (grouped_union_one_smem(nq, cap, nwin, c) + 3328
                                                   + (4 * nq * GROUPED_UNION_MAX_BATCHES if bat else 0)) <= per_sm)
        if groups * c <= sms * (2 if two else 1):
            return c
        least = c
        c //= 2
    return 1 if fits else least


# The decode rule measured on the H200 (docs/results/2026-12-02-h200-decode2/, docs/results/2026-12-03-h200-decode-
# grouped/): flash is the fastest per-query decode that passes parity (INT8, 1-256 queries: split takes 17-61 % more
# CUDA-graph time), so it is the sm_80+ default; a call's queries share one cache, so where they make at least
# DECODE_GROUPED_PAIRS (query, KV head) pairs (flash's work; Q4_0 DECODE_GROUPED_PAIRS_Q4) per window of the union
# pre-pass (32768 cells at G 8-12; at most 12 windows), grouped's one gather of each group's union is faster (head_dim
# 128 and 256, where its shared memory fits). STRATA_QSA_SPLIT_ATTN=1 still forces split, STRATA_DECODE_GROUPED=0
# gives flash everywhere (the plugin's dispatch.inc.j2: the same rule, with the measurements).
DECODE_GROUPED_PAIRS = 72
DECODE_GROUPED_PAIRS_Q4 = 152
# Targets whose union pre-pass runs in thread block clusters (the `cluster` feature of backends/cuda.toml, built by
# nvcc; the cuda12 driver-API form has none): there caches of up to DECODE_FLAT_WINDOWS windows count as one window
# (cuda/dispatch.inc.j2 has the measurements).
CLUSTER_CCS = frozenset({90})
DECODE_FLAT_WINDOWS = 4
# and caches of more windows, whose union the search path takes (its cost does not grow with the cache), need
# DECODE_LONG_PAIRS pairs there, whatever their windows, except those a ONE form of the pre-pass covers (at most
# grouped_union_cb_max windows and the groups' clusters within the multiprocessors), which count as one window
# (cuda/dispatch.inc.j2 has the measurements); FP16 needs DECODE_LONG_PAIRS_FP16, Q4_0 DECODE_LONG_PAIRS_Q4
DECODE_LONG_PAIRS = 142
DECODE_LONG_PAIRS_FP16 = 92
DECODE_LONG_PAIRS_Q4 = 472


def grouped_blocks(n_q: int, group: int, n_head_kv: int) -> int:
    """Blocks of the grouped kernel's grid: one per (group of NQ = min(64 / G, 32) queries, KV head)."""
    return -(-n_q // grouped_queries(max(group, 1))) * n_head_kv


def _cuda_wish(op: str, fmt: str, cc: int, env: Mapping[str, str], n_q: int,
               shape: tuple[int, int, int, int] | None = None, has_grouped: bool = True,
               cells: int = 0, cap: int = 0) -> tuple[str, str]:
    if op == "decode":
        if _flag(env, "STRATA_QSA_SPLIT_ATTN") and fmt == "int8" and cc >= 80:
            return "split", "STRATA_QSA_SPLIT_ATTN=1, INT8, sm_80+: the split decode"
        pre75 = env.get("STRATA_ATTN_PRE75", "")[:1]
        if (cc < 75 and pre75 != "0") or _flag(env, "STRATA_ATTN_DAILY"):
            return "fp32_pre75", "chunk + merge, two-cells-per-step form"
        if _flag(env, "STRATA_ATTN_LANECELL"):
            return "fp32_lanecell", "chunk + merge, lane-per-cell form"
        if env.get("STRATA_DECODE_FLASH", "")[:1] == "0":
            return "fp32", "STRATA_DECODE_FLASH=0: chunk + merge"
        if cc >= 80:
            off = env.get("STRATA_DECODE_GROUPED", "")[:1] == "0"
            if shape and not off and has_grouped:
                head_dim, group, n_head_kv, sms = shape
                per = grouped_queries(max(group, 1))
                blocks = grouped_blocks(n_q, group, n_head_kv) if group and n_head_kv else 0
                uwc = grouped_union_window_cells(per)
                windows = min(max(-(-cells // uwc), 1), GROUPED_UNION_MAX_WINDOWS)
                flat = DECODE_FLAT_WINDOWS if cc in CLUSTER_CCS else 1
                cbm = grouped_union_cb_max(per)
                one = cc in CLUSTER_CCS and windows <= cbm and sms > 0 and -(-n_q // per) * cbm <= sms
                union_fast = _union_fast(cc, per, cap, cells, n_q, sms)
                bar = DECODE_GROUPED_PAIRS_Q4 if fmt == "q4_0" else DECODE_GROUPED_PAIRS
                long_bar = ({"q4_0": DECODE_LONG_PAIRS_Q4, "fp16": DECODE_LONG_PAIRS_FP16}.get(fmt, DECODE_LONG_PAIRS)
                            if cc in CLUSTER_CCS else 0)
                need = bar if windows <= flat or one else long_bar or bar * windows
                pairs = n_q * n_head_kv
                could = head_dim in (128, 256) and SMEM_OPTIN_KB.get(cc, 0) * 1024 >= grouped_smem_bytes() \
                    and pairs >= need
                if could and not union_fast:
                    return "flash", (f"sm_80+: flash (grouped's union pre-pass would run in global memory here: {per} "
                                     f"queries a group x cap {cap} exceed shared memory outside its cluster form; "
                                     "STRATA_DECODE_GROUPED=0 gives flash too)")
                if could:
                    return "grouped", (f"sm_80+, {n_q} queries: grouped ({pairs} (query, KV head) pairs, at least "
                                       f"{need} for a {cells}-cell cache; {blocks} blocks of {per} queries: one "
                                       "gather of each group's union serves all its queries; STRATA_DECODE_GROUPED=0 "
                                       "gives flash)")
            return "flash", ("sm_80+: flash (flash-decoding, all four formats; the fastest decode that passes "
                             f"parity{'; STRATA_DECODE_GROUPED=0' if off else ''})")
        return "fp32", "chunk + merge"
    if _flag(env, "STRATA_PROMPT_ATTN_OLD"):
        return "fp32", "STRATA_PROMPT_ATTN_OLD=1: the decode algorithm"
    emulate = env.get("STRATA_EMULATE_CC", "")
    try:
        emulated = int(emulate) if emulate else 0
    except ValueError:
        emulated = 0
    eff = 75 if env.get("STRATA_QSA_WARP") in ("1", "attn") else (emulated if emulated > 0 else cc)
    if cc < 0:
        return "fp32", "device query failed: the decode algorithm"
    if eff < 70:
        return "fp32", "compute capability below 7.0: the decode algorithm"
    volta, turing = eff < 75, eff < 80
    if fmt == "q4_0":
        if env.get("STRATA_PROMPT_ATTN_Q4", "")[:1] == "0":
            return "fp32", "STRATA_PROMPT_ATTN_Q4=0: the decode algorithm"
        if turing:
            return "fp32", "Q4_0 below sm_80: the decode algorithm"
        if "STRATA_PROMPT_ATTN_V1" in env:
            return "v1", "STRATA_PROMPT_ATTN_V1 is set: v1"
        return _grouped_or("Q4_0", "v1", cc, env, n_q, shape, cells, cap)
    if fmt == "int8":
        if volta:
            return "v70", "INT8 on Volta: v70"
        if "STRATA_PROMPT_ATTN_V1" in env:
            return "v1", "STRATA_PROMPT_ATTN_V1 is set: v1"
        if turing:
            if _flag(env, "STRATA_PA_V2T") and cc == 75:
                return "v2t", "STRATA_PA_V2T=1 on sm_75: v2t"
            return "v1", "INT8 on the Turing branch: v1"
        if _flag(env, "STRATA_PROMPT_ATTN_IMMA"):
            return "imma", "STRATA_PROMPT_ATTN_IMMA=1: imma"
        return _grouped_or("INT8", "v2", cc, env, n_q, shape, cells, cap)
    # FP16 and K8V4 (v1 modes 0 and 3)
    name, mode = ("K8V4", 3) if fmt == "k8v4" else ("FP16", 0)
    if volta:
        return "v70", f"{name} on Volta: v70"
    if "STRATA_PROMPT_ATTN_V1" in env:
        return "v1", "STRATA_PROMPT_ATTN_V1 is set: v1"
    if turing:
        return "v1", f"{name}: v1 mode {mode}"
    return _grouped_or(name, "v1", cc, env, n_q, shape, cells, cap)


def _union_fast(cc: int, per: int, cap: int, cells: int, n_q: int, sms: int) -> bool:
    """Whether grouped's union pre-pass has a path outside global memory (the plugin's grouped_union_fast): a group's
    running union (per x cap x 8 bytes) fits in shared memory, or the launcher's ONE cluster form takes the cache."""
    if per * cap * 8 + 1024 <= SMEM_OPTIN_KB.get(cc, 0) * 1024:
        return True
    nwin = -(-cells // grouped_union_window_cells(per))
    return (cc in CLUSTER_CCS and sms > 0 and per * cap <= GROUPED_UNION_ONE_MAX_ENTRIES
            and grouped_union_one_cb(per, cap, nwin, -(-n_q // per), sms, SMEM_SM_KB.get(cc, 0) * 1024, False) > 1)


def _grouped_or(fmt: str, other: str, cc: int, env: Mapping[str, str], n_q: int, shape, cells: int = 0,
                cap: int = 0) -> tuple[str, str]:
    """INT8, FP16, K8V4 and Q4_0 prompts on sm_80+: grouped where it was verified and pays, else `other` (v2 / v1)."""
    if env.get("STRATA_PROMPT_ATTN_GROUPED", "")[:1] == "0":
        return other, f"STRATA_PROMPT_ATTN_GROUPED=0: {other}"
    head_dim, group, n_head_kv, sms = shape if shape else (256, 0, 0, 0)
    if head_dim not in (128, 256):
        return other, (f"{fmt} on sm_80+: {other} (grouped is chosen automatically at head_dim 128 and 256, where it "
                       "was verified)")
    need, have = grouped_smem_bytes(), SMEM_OPTIN_KB.get(cc, 0) * 1024
    if have < need:
        return other, (f"{fmt} on sm_80+: {other} (grouped needs {need // 1024} KB of shared memory per block, the "
                       f"device allows {have // 1024} KB)")
    # any grid where the union pre-pass has a fast path; a quarter of the multiprocessors where it runs in global
    # memory (dispatch.inc.j2 has the measurements)
    blocks = grouped_blocks(n_q, group, n_head_kv) if group and n_head_kv else 0
    if (sms and group and n_head_kv and blocks * 4 < sms
            and not _union_fast(cc, grouped_queries(group), cap, cells, n_q, sms)):
        return other, (f"{fmt} on sm_80+: {other} (grouped would run {blocks} blocks, fewer than a quarter of the "
                       f"{sms} multiprocessors, with its union pre-pass in global memory)")
    return "grouped", f"{fmt} on sm_80+ with {have // 1024} KB of shared memory per block: grouped"


def _hip_pre75(gfx: str, env: Mapping[str, str]) -> bool:
    pre75 = env.get("STRATA_ATTN_PRE75", "")[:1]
    return pre75 != "0" if gfx.startswith("gfx103") else pre75 == "1"


def _hip_chunk_form(gfx: str, env: Mapping[str, str], what: str) -> tuple[str, str]:
    if _hip_pre75(gfx, env):
        return "fp32_pre75", f"{what}, two-cells-per-step (#540) form on {gfx}"
    if _flag(env, "STRATA_ATTN_LANECELL"):
        return "fp32_lanecell", f"{what}, lane-per-cell form"
    return "fp32", what


def _hip_wish(op: str, fmt: str, gfx: str, env: Mapping[str, str], n_q: int) -> tuple[str, str]:
    if op == "decode":
        return _hip_chunk_form(gfx, env, "chunk + merge")
    if _flag(env, "STRATA_PROMPT_ATTN_OLD"):
        return _hip_chunk_form(gfx, env, "STRATA_PROMPT_ATTN_OLD=1: the decode algorithm")
    wmma = _flag(env, "STRATA_HIP_WMMA")
    gate = gfx.startswith("gfx12") or gfx in WMMA_GATE_GFX11
    rdna2 = env.get("STRATA_PROMPT_ATTN_RDNA2") == "1"
    if fmt == "int8":
        if wmma and gate:
            if _flag(env, "STRATA_HIP_WMMA_I8"):
                return "wmma_i8", f"STRATA_HIP_WMMA=1 and STRATA_HIP_WMMA_I8=1 on {gfx}: the int8 WMMA prompt kernel"
            try:
                min_t = int(env.get("STRATA_PF_SWITCH_MIN_T", "0") or 0)
            except ValueError:
                min_t = 0
            if _flag(env, "STRATA_PA_FAST") and n_q >= min_t:
                return "wmma_fast", f"STRATA_HIP_WMMA=1 and STRATA_PA_FAST=1 on {gfx}: the single-FP16 WMMA form"
            return "wmma", f"STRATA_HIP_WMMA=1 on {gfx}: the WMMA prompt kernel"
        if rdna2 and _hip_pre75(gfx, env):
            return "rdna2", f"STRATA_PROMPT_ATTN_RDNA2=1 and the pre-75 condition on {gfx}: the RDNA2 prompt kernel"
    if fmt != "int8":
        what = f"{_FMT_NAME[fmt]} KV has no prompt kernel on AMD: the decode algorithm"
    elif wmma:
        what = f"STRATA_HIP_WMMA=1, but {gfx} is not a WMMA arch of the gate: the decode algorithm"
    elif rdna2:
        what = f"STRATA_PROMPT_ATTN_RDNA2=1, but the pre-75 condition does not hold on {gfx}: the decode algorithm"
    else:
        what = "INT8 on AMD without STRATA_HIP_WMMA / STRATA_PROMPT_ATTN_RDNA2: the decode algorithm"
    return _hip_chunk_form(gfx, env, what)


def _runnable(variant: str, kind: str, arch: str, fmt: str, op: str) -> str | None:
    """Why ``variant`` cannot run this call on this device (the plugins' forced-variant checks), or None."""
    rule = VARIANT_RULES.get(variant)
    if rule is None:
        return f"unknown variant '{variant}'"
    if FORMATS.index(fmt) not in rule["formats"]:
        return f"variant '{variant}' does not take {_FMT_NAME[fmt]} KV"
    if op not in rule["ops"]:
        return f"variant '{variant}' serves the {'/'.join(rule['ops'])} operation only"
    if kind == "cuda" and _cc(arch) < rule["min_cc"]:
        return f"variant '{variant}' needs compute capability {rule['min_cc'] // 10}.{rule['min_cc'] % 10} or newer"
    if kind == "hip":
        if rule["min_cc"] > 0:
            return f"variant '{variant}' needs NVIDIA compute capability {rule['min_cc'] // 10}.{rule['min_cc'] % 10}"
        if variant.startswith("wmma") and not arch.startswith(("gfx11", "gfx12")):
            return f"variant '{variant}' needs the WMMA matrix cores of gfx11 or gfx12"
    return None


def choose(kind: str, arch: str, op: str, fmt: str, variants: Sequence[str], *,
           env: Mapping[str, str] | None = None, n_q: int = 1,
           shape: tuple[int, int, int, int] | None = None, cells: int = 0, cap: int = 0) -> tuple[str, str]:
    """(variant, reason) that a plugin holding ``variants`` would run for ``op`` on ``fmt`` KV on the device
    ``kind``/``arch`` (``sm_86``, ``gfx1100``, …) under the switches in ``env`` (default: this process's).
    ``shape``: (head_dim, G, n_head_kv, multiprocessors) of a call, for the CUDA INT8 prompt rule's head_dim and grid
    checks (and the decode rule's grouped blocks); without it the rule answers for head_dim 256 and a grid that fills
    the device, and the decode operation for flash. ``cells``: the cache's logical cells (4 x its page-table
    entries), for the decode rule's union windows. ``cap``: the selections' row length (ids' second dimension), for
    whether the decode rule's union pre-pass keeps its running union in shared memory (0: assume it does)."""
    if op not in ("prompt", "decode"):
        raise ValueError(f"op must be 'prompt' or 'decode', got {op!r}")
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, got {fmt!r}")
    env = os.environ if env is None else env
    if kind == "cpu":
        return "fp32", f"{op} on the CPU: the FP32 chunk + merge algorithm"
    if kind == "sycl":
        if _flag(env, "STRATA_ATTN_LANECELL") and "fp32_lanecell" in variants:
            return "fp32_lanecell", "SYCL, STRATA_ATTN_LANECELL=1: the lane-per-cell chunk kernel"
        return "fp32", "SYCL: chunk + merge"
    if kind == "cuda":
        wish, reason = _cuda_wish(op, fmt, _cc(arch), env, n_q, shape, "grouped" in variants, cells, cap)
        if wish not in variants or _runnable(wish, kind, arch, fmt, op):
            return "fp32", f"{reason}; '{wish}' is not in the plugin, so the FP32 chunk + merge algorithm runs"
        return wish, reason
    if kind == "hip":
        gfx = arch.split(":")[0]
        wish, reason = _hip_wish(op, fmt, gfx, env, n_q)
        if wish != "fp32":
            if wish not in variants:
                return "fp32", f"{reason}; '{wish}' is not in the plugin, so the FP32 chunk + merge algorithm runs"
            why = _runnable(wish, kind, gfx, fmt, op)
            if why:
                return "fp32", f"{reason}; but {why}, so the FP32 chunk + merge algorithm runs"
        return wish, reason
    raise ValueError(f"unknown device kind {kind!r}")


def summary(kind: str, arch: str, variants: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One line: the variant per format for the prompt operation, and the decode operation's."""
    prompt = " · ".join(f"{f} {choose(kind, arch, 'prompt', f, variants, env=env)[0]}" for f in FORMATS)
    decode = sorted({choose(kind, arch, "decode", f, variants, env=env)[0] for f in FORMATS},
                    key=lambda v: (v != "fp32", v))
    int8_decode = choose(kind, arch, "decode", "int8", variants, env=env)[0]
    dec = "/".join(decode) if len(decode) == 1 else f"int8 {int8_decode}, others fp32"
    # calls of many queries (the decode rule's grouped blocks; head_dim 256, G 12, 2 KV heads, 4096 queries)
    many = [f for f in FORMATS if choose(kind, arch, "decode", f, variants, env=env, n_q=4096,
                                         shape=(256, 12, 2, 132))[0] == "grouped"]
    if many:
        dec += f" (grouped for calls of many queries: {'/'.join(many)})"
    return f"prompt: {prompt}; decode: {dec}"
