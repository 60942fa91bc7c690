"""The parity data recipe (docs/verification.md): synthetic KV pools, page table, queries and selections, plus the KV
writers' quantisation rule for Q4_0. One function, :func:`make_case`, used by the tests, the parity harness
and the benchmark, so every target sees identical data for a given (format, context, queries, seed).

The generator is ``np.random.RandomState(seed)``: MT19937 seeded exactly like ``std::mt19937(seed)``. The
distributions are this harness's own (upstream's C++ harness is not reproduced bit for bit); the draw order is fixed:
K pool (codes, then scales), V pool (codes, then scales), page-table shuffle, queries, selections.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .ops import FORMAT_CODES, FORMATS, PAGE, KVCache

# The selection geometry of docs/operation.md: width = min(n_kv, idx_top_k + idx_block - 1).
SELECTION_WIDTH = 2051
RECENT = 512                 # newest cells every sparse query keeps (docs/verification.md)
DRIFT_DIVISOR = 32           # older / 32 replacements per later sparse query (~3 % drift)
PERIOD = 251                 # base queries of the > 65,535-query case (docs/verification.md)
PERIODIC_WIDTH_MOD = 200     # base query j has width 1 + (j mod 200)
SEED_BASE, SEED_REAL, SEED_PERIODIC = 1234, 1234 + 100, 777


def format_name(fmt: str | int) -> str:
    """'fp16', 'int8', 'q4_0' or 'k8v4' from a name or a format code 0..3 (docs/verification.md)."""
    if isinstance(fmt, (int, np.integer)) and not isinstance(fmt, bool):
        if 0 <= int(fmt) < len(FORMATS):
            return FORMATS[int(fmt)]
    elif isinstance(fmt, str) and fmt.lower() in FORMAT_CODES:
        return fmt.lower()
    raise ValueError(f"fmt: expected one of {', '.join(FORMATS)} or a format code 0..3, got {fmt!r}")


def default_seed(fmt: str | int, *, real_scales: bool = False, periodic: bool = False) -> int:
    """1234 + fmt; 1234 + 100 + fmt for the real-scale K8V4 cases; 777 + fmt for the periodic case."""
    code = FORMAT_CODES[format_name(fmt)]
    if periodic:
        return SEED_PERIODIC + code
    return (SEED_REAL if real_scales else SEED_BASE) + code


# ---------------------------------------------------------------------------------------------------------------
# Q4_0 blocks
# ---------------------------------------------------------------------------------------------------------------
def pack_q4_0(d: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    """ggml block_q4_0 bytes from fp16 scales d [..., NB] and 4-bit codes [..., NB, 32] -> uint8 [..., NB*18].

    Bytes 0-1: d (fp16, little-endian); byte 2 + j: element j in the low nibble, element j + 16 in the high one.
    """
    d16 = np.asarray(d).astype("<f2")
    n = np.asarray(nibbles, dtype=np.uint8)
    qs = (n[..., :16] & 0x0F) | ((n[..., 16:] & 0x0F) << 4)
    return _pack_q4_qs(d16, qs)


def _pack_q4_qs(d16: np.ndarray, qs: np.ndarray) -> np.ndarray:
    lead, nb = d16.shape[:-1], d16.shape[-1]
    out = np.empty(lead + (nb, 18), dtype=np.uint8)
    out[..., 0:2] = np.ascontiguousarray(d16.astype("<f2")).view(np.uint8).reshape(lead + (nb, 2))
    out[..., 2:] = qs
    return out.reshape(lead + (nb * 18,))


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    """The KV writer's Q4_0 rule (docs/operation.md) on float32 values [..., D] (D a multiple of 32) -> uint8
    [..., D/32*18].

    Per 32-block: ``mval`` = the value of largest |x| (ties -> the larger value); ``d = mval / -8`` (signed
    scale); ``id = 1/d`` (0 if d = 0); ``q = clamp(trunc(x*id + 8.5), 0, 15)`` in float32 (product rounded, then
    the add: no fused multiply-add); d is stored as fp16 but the codes use the unrounded d. No rotation here: the
    caller rotates before quantising when it wants to (docs/operation.md).
    """
    xf = np.asarray(x, dtype=np.float32)
    if xf.shape[-1] % 32:
        raise ValueError(f"x: the last dimension must be a multiple of 32 (Q4_0 blocks), got {xf.shape[-1]}")
    nb = xf.shape[-1] // 32
    xb = xf.reshape(xf.shape[:-1] + (nb, 32))
    ax = np.abs(xb)
    amax = ax.max(axis=-1, keepdims=True)
    mval = np.where(ax == amax, xb, np.float32(-np.inf)).max(axis=-1)      # ties -> the larger value
    d = mval / np.float32(-8.0)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0.0))
    t = (xb * inv[..., None].astype(np.float32)).astype(np.float32) + np.float32(8.5)
    q = np.clip(np.trunc(t), 0, 15).astype(np.uint8)
    return pack_q4_0(d.astype(np.float16), q)


# ---------------------------------------------------------------------------------------------------------------
# Pools (docs/verification.md): each draws its codes first, then its scales
# ---------------------------------------------------------------------------------------------------------------
def _int8_pool(rs: np.random.RandomState, lead: tuple[int, ...], D: int) -> tuple[np.ndarray, np.ndarray]:
    codes = rs.randint(-127, 128, size=lead + (D,), dtype=np.int8)
    scales = rs.uniform(0.005, 0.03, size=lead + (D // 64,)).astype(np.float16)
    return codes, scales


def _fp16_pool(rs: np.random.RandomState, lead: tuple[int, ...], D: int, sigma: float) -> np.ndarray:
    return (rs.standard_normal(lead + (D,)) * sigma).astype(np.float16)


def _q4_random_pool(rs: np.random.RandomState, lead: tuple[int, ...], D: int) -> np.ndarray:
    nb = D // 32
    qs = rs.randint(0, 256, size=lead + (nb, 16), dtype=np.uint8)
    mag = np.exp(rs.uniform(np.log(0.01), np.log(1.0), size=lead + (nb,)))
    sign = rs.randint(0, 256, size=lead + (nb,), dtype=np.uint8)
    d = np.where(sign & 1, -mag, mag).astype(np.float16)
    return _pack_q4_qs(d, qs)


def _q4_exact_pool(rs: np.random.RandomState, lead: tuple[int, ...], D: int) -> np.ndarray:
    # d = k/1024 with k in [6, 31]: (n - 8) * d = m/1024 with |m| <= 248 is exact in fp16, so a kernel that rounds
    # V to fp16 (docs/operation.md) reads the same values as the FP64 reference.
    nb = D // 32
    qs = rs.randint(0, 256, size=lead + (nb, 16), dtype=np.uint8)
    k = rs.randint(6, 32, size=lead + (nb,))
    return _pack_q4_qs((k / 1024.0).astype(np.float16), qs)


def _q4_real_pool(rs: np.random.RandomState, lead: tuple[int, ...], D: int) -> np.ndarray:
    # Realistic V: each row N(0, sigma), sigma log-uniform in [0.1, 2] drawn per row, quantised by the writer.
    sigma = np.exp(rs.uniform(np.log(0.1), np.log(2.0), size=lead))
    x = rs.standard_normal(lead + (D,)) * sigma[..., None]
    return quantize_q4_0(x.astype(np.float32))


# ---------------------------------------------------------------------------------------------------------------
# Selections (docs/verification.md)
# ---------------------------------------------------------------------------------------------------------------
def make_selections(rs: np.random.RandomState, ctx: int, n_q: int) -> tuple[np.ndarray, np.ndarray]:
    """ids int32 [n_q, cap] and widths int32 [n_q] for queries at positions ``ctx - n_q + i`` (docs/verification.md).

    Identity ``0 .. n_kv-1`` while ``n_kv <= 2051``; after that the 512 newest cells plus ``w - 512`` older cells:
    the first sparse query takes the first ones of a shuffle of ``[0, n_kv - 512)``, each later one replaces
    ``older / 32`` random members by random cells of that range (skipped when the cell is already a member).
    Entries past the width are 0.
    """
    cap = min(ctx, SELECTION_WIDTH)
    ids = np.zeros((n_q, cap), dtype=np.int32)
    width = np.empty(n_q, dtype=np.int32)
    members: np.ndarray | None = None
    present: np.ndarray | None = None
    for i in range(n_q):
        n_kv = ctx - n_q + i + 1
        w = min(n_kv, SELECTION_WIDTH)
        width[i] = w
        if w == n_kv:
            ids[i, :w] = np.arange(w, dtype=np.int32)
            continue
        old_range = n_kv - RECENT
        older = w - RECENT
        if members is None:
            members = rs.permutation(old_range)[:older].astype(np.int64)
            present = np.zeros(ctx, dtype=bool)
            present[members] = True
        else:
            k = older // DRIFT_DIVISOR
            slot = rs.randint(0, older, size=k)
            cell = rs.randint(0, old_range, size=k)
            # Sequential on purpose: whether a replacement is skipped depends on the earlier ones.
            for s, c in zip(slot.tolist(), cell.tolist()):
                if present[c]:
                    continue
                present[members[s]] = False
                members[s] = c
                present[c] = True
        ids[i, :older] = np.sort(members)
        ids[i, older:w] = np.arange(old_range, n_kv, dtype=np.int32)
    return ids, width


# ---------------------------------------------------------------------------------------------------------------
# The case
# ---------------------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Case:
    """One parity input: q float32 [n_q, n_head, D], the KV cache (numpy pools), ids int32 [n_q, cap] and the
    widths (int32 [n_q], or steps int32 [n_q, 4] with the width in column 3)."""
    q: np.ndarray
    kv: KVCache
    ids: np.ndarray
    width: np.ndarray
    fmt: str
    ctx: int
    n_q: int
    seed: int
    name: str
    label: str = ""
    holes: bool = False
    width0: bool = False
    real_scales: bool = False
    periodic: bool = False

    @property
    def cap(self) -> int:
        return int(self.ids.shape[1])

    @property
    def widths(self) -> np.ndarray:
        """int32 [n_q], whichever form ``width`` has."""
        return self.width[:, 3] if self.width.ndim == 2 else self.width

    @property
    def n_head(self) -> int:
        return int(self.q.shape[1])

    @property
    def group(self) -> int:
        return self.n_head // self.kv.n_head_kv


def case_label(fmt: str | int, *, holes: bool = False, width0: bool = False, real_scales: bool = False,
               periodic: bool = False) -> str:
    """The format as the output lines print it: 'int8', 'k8v4 real', 'fp16 holes', 'int8 width-0', ..."""
    parts = [format_name(fmt)]
    parts += [tag for on, tag in ((real_scales, "real"), (holes, "holes"), (width0, "width-0"),
                                  (periodic, "periodic")) if on]
    return " ".join(parts)


def make_case(fmt: str | int, ctx: int, n_q: int, seed: int | None = None, holes: bool = False, *,
              width0: bool = False, real_scales: bool = False, periodic: bool = False, n_head_kv: int = 2,
              group: int = 12, head_dim: int = 256, steps: bool = False) -> Case:
    """The synthetic data of docs/verification.md for one case.

    ``fmt``: 'fp16', 'int8', 'q4_0', 'k8v4' or a code 0..3. ``holes``: logical pages p % 7 == 6 and the last page
    are not resident. ``width0``: queries i % 5 == 2 get width 0. ``real_scales`` (K8V4 only): V blocks quantised
    by the writer's rule from N(0, sigma) rows. ``periodic``: the > 65,535-query construction (251 base queries
    with identity selections of width 1 + (j mod 200); query i copies base i mod 251; n_q is not clamped).
    ``seed`` defaults to the spec's (1234 + fmt, 1334 + fmt for real scales, 777 + fmt periodic).
    """
    name = format_name(fmt)
    code = FORMAT_CODES[name]
    if real_scales and name != "k8v4":
        raise ValueError(f"real_scales: realistic V scales exist only for the K8V4 cases, got format {name}")
    if int(ctx) < 1:
        raise ValueError(f"ctx: expected a context of at least 1 cell, got {ctx}")
    if int(n_q) < 1:
        raise ValueError(f"n_q: expected at least 1 query, got {n_q}")
    if head_dim % 64 or not 64 <= head_dim <= 256:
        raise ValueError(f"head_dim: expected 64, 128, 192 or 256, got {head_dim}")
    if not 1 <= group <= 16 or n_head_kv < 1:
        raise ValueError(f"group / n_head_kv: expected 1 <= group <= 16 and n_head_kv >= 1, got {group}, {n_head_kv}")
    ctx, n_q = int(ctx), int(n_q)
    if not periodic:
        n_q = min(n_q, ctx)
    if seed is None:
        seed = default_seed(code, real_scales=real_scales, periodic=periodic)
    rs = np.random.RandomState(seed)
    D, n_head = head_dim, group * n_head_kv
    pages = -(-ctx // PAGE)
    lead = (pages, n_head_kv, PAGE)

    # 1-2. K pool, then V pool (each: codes, then scales).
    if name == "fp16":
        k = _fp16_pool(rs, lead, D, 1.5)
        v = _fp16_pool(rs, lead, D, 1.0)
    elif name == "int8":
        k, k_scale = _int8_pool(rs, lead, D)
        v, v_scale = _int8_pool(rs, lead, D)
    elif name == "q4_0":
        k = _q4_random_pool(rs, lead, D)
        v = _q4_random_pool(rs, lead, D)
    else:
        k, k_scale = _int8_pool(rs, lead, D)
        v = _q4_real_pool(rs, lead, D) if real_scales else _q4_exact_pool(rs, lead, D)

    # 3. Page table: a shuffled identity permutation; holes are set afterwards (no draws).
    page_table = np.arange(pages, dtype=np.int32)
    rs.shuffle(page_table)
    if holes:
        page_table[np.arange(pages) % 7 == 6] = -1
        page_table[pages - 1] = -1

    # 4-5. Queries, then selections.
    cap = min(ctx, SELECTION_WIDTH)
    if periodic:
        base_q = (rs.standard_normal((PERIOD, n_head, D)) * 2.0).astype(np.float32)
        base_w = np.minimum(1 + np.arange(PERIOD) % PERIODIC_WIDTH_MOD, cap).astype(np.int32)
        base_ids = np.where(np.arange(cap)[None, :] < base_w[:, None], np.arange(cap)[None, :], 0).astype(np.int32)
        src = np.arange(n_q) % PERIOD
        q, ids, wid = base_q[src], base_ids[src], base_w[src]
    else:
        q = (rs.standard_normal((n_q, n_head, D)) * 2.0).astype(np.float32)
        ids, wid = make_selections(rs, ctx, n_q)
    if width0:
        wid[np.arange(n_q) % 5 == 2] = 0

    if steps:
        width = np.zeros((n_q, 4), dtype=np.int32)
        width[:, 3] = wid
    else:
        width = np.ascontiguousarray(wid, dtype=np.int32)

    if name == "fp16":
        kv = KVCache.fp16(k, v, page_table)
    elif name == "int8":
        kv = KVCache.int8(k, k_scale, v, v_scale, page_table)
    elif name == "q4_0":
        kv = KVCache.q4_0(k, v, page_table)
    else:
        kv = KVCache.k8v4(k, k_scale, v, page_table)

    label = case_label(name, holes=holes, width0=width0, real_scales=real_scales, periodic=periodic)
    return Case(q=np.ascontiguousarray(q), kv=kv, ids=np.ascontiguousarray(ids), width=width, fmt=name, ctx=ctx,
                n_q=n_q, seed=int(seed), name=f"{label}, ctx {ctx}, {n_q} queries", label=label, holes=holes,
                width0=width0, real_scales=real_scales, periodic=periodic)


def to_torch(case: Case, device: Any = "cuda") -> tuple[Any, KVCache, Any, Any]:
    """``(q, kv, ids, width)`` of ``case`` as torch tensors on ``device`` (a ``torch.device`` or its name: ``"cuda"``,
    ``"cuda:1"``, ``"cpu"``; torch names HIP devices ``cuda`` too), the cache built by its format's constructor.
    Needs torch. On a GPU the arrays are copied there; on the CPU the tensors share the case's memory (contiguous
    arrays, as :func:`make_case` builds them)."""
    import torch
    dev = torch.device(device)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    kv = getattr(KVCache, case.kv.format)(**{name: t(a) for name, a in case.kv.arrays.items()})
    return t(case.q), kv, t(case.ids), t(case.width)


def corrupt(case: Case, what: str, query: int, position: int) -> str:
    """Put one bad entry into ``case`` and return the start of the error a checked call on it raises: ``"ids"``: the id
    at (query, position) becomes cell 10**8, past any test cache; ``"page_table"``: the page entry of that id's page
    becomes 10**6, past any test pool."""
    if what == "ids":
        case.ids[query, position] = 10**8
        return f"ids: query {query}, position {position} holds cell 100000000"
    if what == "page_table":
        page = int(case.ids[query, position]) // PAGE
        case.kv.page_table[page] = 10**6
        return f"page_table: entry {page} "
    raise ValueError(f"what: expected 'ids' or 'page_table', got {what!r}")


def random_rows(case: Case, seed: int, full_width: bool = False) -> Case:
    """Replace ``case``'s selections with random ascending ones over its whole cache, of random widths (0 .. cap) or
    of the full width, drawn from ``numpy.random.default_rng(seed)``: neighbouring queries then share few cells, so a
    group's union is several times one selection (the grouped kernels' large-union paths). Returns ``case``."""
    rng = np.random.default_rng(seed)
    n_cells = case.kv.n_pages * PAGE
    for qi in range(case.n_q):
        w = case.cap if full_width else int(rng.integers(0, case.cap + 1))
        case.ids[qi, :w] = np.sort(rng.choice(n_cells, size=w, replace=False)).astype(np.int32)
        case.width[qi] = w
    return case


def in_threads(call: Callable[[int], Any], n_threads: int, repeats: int = 3) -> list:
    """``call(i)`` ``repeats`` times on each of ``n_threads`` threads at once; the last result per thread. The first
    exception of any thread is raised here."""
    import threading
    results, errors = [None] * n_threads, []

    def work(i: int) -> None:
        try:
            for _ in range(repeats):
                results[i] = call(i)
        except Exception as e:  # noqa: BLE001 - raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
