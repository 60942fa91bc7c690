"""The FP64 oracle of QSA attention (docs/operation.md) in numpy, the exact dequantisation of the pools,
and the rounding budget of K8V4 variants that round V to fp16 (docs/verification.md).

Everything here runs on the host. Arrays may be numpy or anything ``np.asarray`` accepts (torch CPU tensors);
torch/cupy device arrays are copied to the host first.
"""
from __future__ import annotations

import contextlib
import ctypes
import math
from typing import Any, Iterable, Iterator

import numpy as np

from . import _arrays as A

PAGE = 4
# K8V4 budget terms (docs/verification.md): fp16_rn of a V value errs by at most 2^-11 relative, 2^-25 absolute
# (subnormals).
FP16_REL = 2.0 ** -11
FP16_ABS = 2.0 ** -25
# Rows dequantised per piece when a whole pool is scanned (bounds the float64 temporaries to ~128 MB at HD 256).
_SCAN_ROWS = 1 << 16


_BLAS_THREADS: tuple[Any, Any] | None | bool = False      # False: not looked up yet; None: not available


def _openblas_threads() -> tuple[Any, Any] | None:
    """(get, set) thread-count functions of the OpenBLAS numpy loaded (Linux), or None."""
    global _BLAS_THREADS
    if _BLAS_THREADS is not False:
        return _BLAS_THREADS
    _BLAS_THREADS = None
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln})
        for path in paths:
            lib = ctypes.CDLL(path)
            for pre, suf in (("scipy_", "64_"), ("scipy_", ""), ("", "64_"), ("", "")):
                get = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
                put = getattr(lib, f"{pre}openblas_set_num_threads{suf}", None)
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    _BLAS_THREADS = (get, put)
                    return _BLAS_THREADS
    except (OSError, AttributeError):
        pass
    return _BLAS_THREADS


@contextlib.contextmanager
def _single_threaded_blas() -> Iterator[None]:
    """The oracle's matrices are small (G x HD by HD x w): BLAS threads only contend with the plugin's threads or
    a busy machine (a 2-core machine under load ran them 40x slower), so run them on one thread when we can."""
    api = _openblas_threads()
    if api is None:
        yield
        return
    get, put = api
    old = get()
    put(1)
    try:
        yield
    finally:
        put(old)


_host = A.to_host


def _as_fp16(x: np.ndarray) -> np.ndarray:
    """fp16 values, whether stored as float16 or as uint16 bit patterns (docs/operation.md)."""
    return x.view(np.float16) if x.dtype == np.uint16 else x.astype(np.float16, copy=False)


def width_vector(width: Any) -> np.ndarray:
    """The widths as int64 [n_q]: ``width`` itself, or column 3 of a steps record [n_q, 4] (docs/operation.md)."""
    w = _host(width)
    if w.ndim == 2 and w.shape[1] == 4:
        w = w[:, 3]
    elif w.ndim != 1:
        raise ValueError(f"width: expected shape [n_q] (widths) or [n_q, 4] (steps), got {list(w.shape)}")
    return w.astype(np.int64)


def dequant_q4_0(blocks: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """ggml block_q4_0 bytes uint8 [..., NB*18] -> values [..., NB*32] (docs/operation.md): ``(nibble - 8) * d``.

    Element j < 16 of a block is the low nibble of ``qs[j]``, element j + 16 its high nibble. The product is exact
    in float32 and float64 (a 4-bit integer times an fp16).
    """
    b = np.asarray(blocks, dtype=np.uint8)
    nb = b.shape[-1] // 18
    b = b.reshape(b.shape[:-1] + (nb, 18))
    d = np.ascontiguousarray(b[..., 0:2]).view("<f2")[..., 0]          # little-endian fp16 scale per block
    qs = b[..., 2:]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(dtype)   # [..., NB, 32]
    vals = (nib - 8) * d.astype(dtype)[..., None]
    return vals.reshape(b.shape[:-2] + (nb * 32,))


class _RowReader:
    """Gathers pool rows by flat row index ``r = (page * n_head_kv + kvh) * 4 + cell % 4`` and dequantises them
    exactly into ``dtype`` (float32 or float64: every dequantised value is exact in both)."""

    def __init__(self, kv: Any, which: str, dtype: Any = np.float64):
        if which not in ("k", "v"):
            raise ValueError(f"which: expected 'k' or 'v', got {which!r}")
        fmt = kv.format
        self.kind = {"fp16": "fp16", "int8": "int8", "q4_0": "q4",
                     "k8v4": "int8" if which == "k" else "q4"}[fmt]
        self.dtype = dtype
        self.head_dim = D = kv.head_dim
        pool = _host(kv.k if which == "k" else kv.v)
        self.n_rows = pool.shape[0] * pool.shape[1] * pool.shape[2]
        if self.kind == "fp16":
            self.pool = _as_fp16(pool).reshape(self.n_rows, D)
        elif self.kind == "int8":
            self.pool = pool.reshape(self.n_rows, D)
            scale = _host(kv.k_scale if which == "k" else kv.v_scale)
            self.scale = _as_fp16(scale).reshape(self.n_rows, D // 64)
        else:
            self.pool = pool.reshape(self.n_rows, D // 32 * 18)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        D, dt = self.head_dim, self.dtype
        if self.kind == "fp16":
            return self.pool[rows].astype(dt)
        if self.kind == "int8":
            codes = self.pool[rows].astype(dt).reshape(rows.shape + (D // 64, 64))
            return (codes * self.scale[rows].astype(dt)[..., None]).reshape(rows.shape + (D,))
        return dequant_q4_0(self.pool[rows], dt)


def dequant_rows(kv: Any, which: str = "k") -> np.ndarray:
    """The whole K or V pool dequantised exactly: float64 [P, n_head_kv, 4, head_dim]."""
    rd = _RowReader(kv, which, np.float64)
    out = rd(np.arange(rd.n_rows))
    return out.reshape(kv.n_phys_pages, kv.n_head_kv, PAGE, kv.head_dim)


def v_abs_max(kv: Any) -> float:
    """max |V| over the dequantised V pool (every physical row, resident or not) - docs/verification.md."""
    rd = _RowReader(kv, "v", np.float64)
    m = 0.0
    for s in range(0, rd.n_rows, _SCAN_ROWS):
        m = max(m, float(np.max(np.abs(rd(np.arange(s, min(rd.n_rows, s + _SCAN_ROWS)))))))
    return m


def valid_mask(kv: Any, ids: Any, width: Any) -> np.ndarray:
    """bool [n_q, cap]: position j of query qi is a valid cell (docs/operation.md): j < width, the id in
    [0, 4 * n_logical_pages), its page-table entry in [0, n_phys_pages). Widths are clamped to [0, cap]."""
    ids_h = _host(ids).astype(np.int64)
    n_q, cap = ids_h.shape
    w = np.clip(width_vector(width), 0, cap)
    pt = _host(kv.page_table).astype(np.int64)
    n_cells = pt.shape[0] * PAGE
    in_width = np.arange(cap)[None, :] < w[:, None]
    id_ok = in_width & (ids_h >= 0) & (ids_h < n_cells)
    page = np.full(ids_h.shape, -1, dtype=np.int64)
    page[id_ok] = pt[ids_h[id_ok] // PAGE]
    return id_ok & (page >= 0) & (page < kv.n_phys_pages)


def count_valid(kv: Any, ids: Any, width: Any) -> np.ndarray:
    """int64 [n_q]: the number of valid cells of each query (0 = the output row must be exactly 0)."""
    return valid_mask(kv, ids, width).sum(axis=1)


def _attend(q: Any, kv: Any, ids: Any, width: Any, queries: Iterable[int] | None, dtype: Any,
            want_budget: bool, one_blas_thread: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    q_h = _host(q)
    if q_h.ndim != 3:
        raise ValueError(f"q: expected shape [n_q, n_head, head_dim], got {list(q_h.shape)}")
    n_q, n_head, D = q_h.shape
    nkv = kv.n_head_kv
    if D != kv.head_dim or n_head % nkv:
        raise ValueError(f"q: shape {list(q_h.shape)} does not fit the cache (head_dim {kv.head_dim}, "
                         f"n_head a multiple of n_head_kv {nkv})")
    G = n_head // nkv
    ids_h = _host(ids)
    if ids_h.ndim != 2 or ids_h.shape[0] != n_q:
        raise ValueError(f"ids: expected shape [n_q={n_q}, cap], got {list(ids_h.shape)}")
    cap = ids_h.shape[1]
    w_all = np.clip(width_vector(width), 0, cap)
    if w_all.shape[0] != n_q:
        raise ValueError(f"width: expected {n_q} entries, got {w_all.shape[0]}")
    pt = _host(kv.page_table).astype(np.int64)
    n_cells = pt.shape[0] * PAGE
    sel = np.arange(n_q) if queries is None else np.asarray(list(queries), dtype=np.int64).reshape(-1)

    k_rows, v_rows = _RowReader(kv, "k", dtype), _RowReader(kv, "v", dtype)
    sqrt_d = dtype(math.sqrt(D))
    out = np.zeros((sel.shape[0], n_head, D), dtype=dtype)
    budget = np.zeros((sel.shape[0], n_head, D), dtype=np.float64) if want_budget else None
    with _single_threaded_blas() if one_blas_thread else contextlib.nullcontext():
        _attend_rows(q_h, ids_h, w_all, pt, n_cells, sel, kv, k_rows, v_rows, sqrt_d, dtype, G, out, budget)
    return out, budget


def _attend_rows(q_h, ids_h, w_all, pt, n_cells, sel, kv, k_rows, v_rows, sqrt_d, dtype, G, out, budget) -> None:
    nkv, n_head, D = kv.n_head_kv, q_h.shape[1], q_h.shape[2]
    heads = np.arange(nkv, dtype=np.int64)[:, None]
    for o, qi in enumerate(sel):
        w = int(w_all[qi])
        if w == 0:
            continue
        c = ids_h[qi, :w].astype(np.int64)
        ok = (c >= 0) & (c < n_cells)
        page = np.full(w, -1, dtype=np.int64)
        page[ok] = pt[c[ok] // PAGE]
        ok &= (page >= 0) & (page < kv.n_phys_pages)
        if not ok.any():
            continue                      # nothing valid: the row stays exactly 0
        c, page = c[ok], page[ok]
        rows = (page[None, :] * nkv + heads) * PAGE + (c % PAGE)[None, :]      # [nkv, n], 64-bit
        K = k_rows(rows)                                                         # [nkv, n, D]
        V = v_rows(rows)
        qq = q_h[qi].astype(dtype).reshape(nkv, G, D)
        s = np.matmul(qq, K.transpose(0, 2, 1))                                  # [nkv, G, n]
        s /= sqrt_d                    # docs/operation.md divides by sqrt(HD) (exact for HD 64 and 256)
        s -= s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        l = e.sum(axis=-1, keepdims=True)
        out[o] = (np.matmul(e, V) / l).reshape(n_head, D)
        if budget is not None:
            b = FP16_REL * np.abs(V.astype(np.float64)) + FP16_ABS
            budget[o] = (np.matmul(e.astype(np.float64), b) / l).reshape(n_head, D)


def qsa_attn_numpy(q: Any, kv: Any, ids: Any, width: Any, queries: Iterable[int] | None = None, *,
                   dtype: Any = np.float32) -> np.ndarray:
    """The operation (docs/operation.md) in numpy at ``dtype`` (float32 = the plain-numpy baseline of the
    benchmark; float64 = the oracle): per query, gather the valid rows of each KV head once, dequantise, one matmul for the G heads,
    softmax after max subtraction, ``p @ V / l``. Returns ``dtype`` [len(queries), n_head, head_dim]."""
    dt = np.dtype(dtype).type
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype: expected float32 or float64, got {np.dtype(dtype).name}")
    # float32 is the benchmark's "plain numpy" baseline: leave BLAS threading as a numpy user would have it.
    return _attend(q, kv, ids, width, queries, dt, False, one_blas_thread=dt is np.float64)[0]


def qsa_attn_fp64(q: Any, kv: Any, ids: Any, width: Any, queries: Iterable[int] | None = None) -> np.ndarray:
    """The FP64 oracle (docs/operation.md): float64 [len(queries), n_head, head_dim] (all queries if None).

    Cells past the width, with an id outside ``[0, 4 * n_logical_pages)``, or whose page-table entry is not a
    physical page (-1 = not resident, or >= n_phys_pages) are excluded; a query with no valid cell gives exactly 0.
    Query head h reads KV head ``h // G``. Duplicate ids count twice.
    """
    return _attend(q, kv, ids, width, queries, np.float64, False)[0]


def qsa_attn_fp64_with_budget(q: Any, kv: Any, ids: Any, width: Any,
                              queries: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The oracle and :func:`k8v4_budget` from one pass (the softmax weights are shared)."""
    out, b = _attend(q, kv, ids, width, queries, np.float64, True)
    return out, b


def k8v4_budget(q: Any, kv: Any, ids: Any, width: Any, queries: Iterable[int] | None = None) -> np.ndarray:
    """Per-element rounding budget of a variant that rounds V to fp16 (docs/operation.md, docs/verification.md):
    ``B = sum_c p_c * (2^-11 |v_c| + 2^-25)`` with the FP64 softmax weights p. float64, same shape as the oracle."""
    return _attend(q, kv, ids, width, queries, np.float64, True)[1]
