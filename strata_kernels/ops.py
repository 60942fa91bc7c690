"""The public calls: KV-cache views, argument checks, dispatch to the resolved plugin."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import _arrays as A
from .errors import Unsupported  # noqa: F401  (re-exported through the package)

FORMATS = ("fp16", "int8", "q4_0", "k8v4")
FORMAT_CODES = {"fp16": 0, "int8": 1, "q4_0": 2, "k8v4": 3}
PAGE = 4


def _fail_type(arg: str, expected: str, x: Any) -> TypeError:
    return TypeError(f"{arg}: expected {expected}, got {A.describe(x)}")


def _check_dtype(arg: str, x: Any, allowed: tuple[str, ...]) -> None:
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{arg}: expected an array (numpy, torch, cupy, ...), got {type(x).__name__}")
    if A.dtype_name(x) not in allowed:
        raise _fail_type(arg, " or ".join(allowed), x)


def _check_contig(arg: str, x: Any) -> None:
    if not A.is_c_contiguous(x):
        raise ValueError(f"{arg}: expected a C-contiguous array, got a strided view {A.describe(x)}; "
                         f"pass a contiguous copy (.contiguous() / np.ascontiguousarray)")


def _check_aligned(arg: str, x: Any) -> None:
    """q and out are read and written in 16-byte vectors (the plugin ABI's alignment): a view that starts inside a
    16-byte word (for example one float past a fresh array's start) is refused here, before any kernel sees it."""
    off = A.data_ptr(x) % 16
    if off:
        raise ValueError(f"{arg}: expected data aligned to 16 bytes (the kernels move it in 16-byte vectors), got "
                         f"{A.describe(x)} starting {off} bytes past a 16-byte boundary; pass a fresh array (.clone() "
                         f"/ .copy())")


def _check_shape(arg: str, x: Any, expected: tuple, what: str) -> None:
    got = A.shape(x)
    if len(got) != len(expected) or any(e is not None and e != g for e, g in zip(expected, got)):
        exp = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{arg}: expected shape {exp} ({what}), got {list(got)}")


@dataclass(frozen=True, eq=False)
class KVCache:
    """A view of the paged KV pools of one layer (docs/operation.md): ``[page][kv_head][4 cells][row payload]``.

    Build it with :meth:`int8`, :meth:`fp16`, :meth:`q4_0` or :meth:`k8v4`; the arrays are not copied.
    """
    format: str
    k: Any
    v: Any
    k_scale: Any
    v_scale: Any
    page_table: Any
    n_head_kv: int
    head_dim: int
    n_phys_pages: int

    @property
    def format_code(self) -> int:
        return FORMAT_CODES[self.format]

    @property
    def n_pages(self) -> int:
        """Logical pages (entries of the page table)."""
        return A.shape(self.page_table)[0]

    @property
    def arrays(self) -> dict[str, Any]:
        return {n: a for n, a in (("k", self.k), ("v", self.v), ("k_scale", self.k_scale),
                                  ("v_scale", self.v_scale), ("page_table", self.page_table)) if a is not None}

    @property
    def device(self) -> tuple[str, int]:
        return A.device(self.k)

    # -- constructors -------------------------------------------------------------------------------------
    @classmethod
    def int8(cls, k: Any, k_scale: Any, v: Any, v_scale: Any, page_table: Any) -> "KVCache":
        """int8 codes ``[P, n_kv, 4, D]``, fp16 scales ``[P, n_kv, 4, D//64]`` (docs/operation.md)."""
        _check_dtype("k", k, ("int8",))
        _check_dtype("v", v, ("int8",))
        P, nkv, D = cls._pool_geometry("k", k)
        _check_shape("v", v, (P, nkv, PAGE, D), "int8 V codes, same as k")
        cls._check_scales("k_scale", k_scale, P, nkv, D)
        cls._check_scales("v_scale", v_scale, P, nkv, D)
        return cls._make("int8", k, v, k_scale, v_scale, page_table, nkv, D, P)

    @classmethod
    def fp16(cls, k: Any, v: Any, page_table: Any) -> "KVCache":
        """fp16 rows ``[P, n_kv, 4, D]`` (float16, or uint16 holding fp16 bits)."""
        _check_dtype("k", k, ("float16", "uint16"))
        _check_dtype("v", v, ("float16", "uint16"))
        P, nkv, D = cls._pool_geometry("k", k)
        _check_shape("v", v, (P, nkv, PAGE, D), "fp16 V rows, same as k")
        return cls._make("fp16", k, v, None, None, page_table, nkv, D, P)

    @classmethod
    def q4_0(cls, k: Any, v: Any, page_table: Any) -> "KVCache":
        """ggml block_q4_0 rows, uint8 ``[P, n_kv, 4, D//32*18]`` (docs/operation.md; K, V and q Hadamard-rotated)."""
        _check_dtype("k", k, ("uint8",))
        _check_dtype("v", v, ("uint8",))
        P, nkv, D = cls._pool_geometry("k", k, q4=True)
        _check_shape("v", v, (P, nkv, PAGE, D // 32 * 18), "Q4_0 V blocks, same as k")
        return cls._make("q4_0", k, v, None, None, page_table, nkv, D, P)

    @classmethod
    def k8v4(cls, k: Any, k_scale: Any, v: Any, page_table: Any) -> "KVCache":
        """int8 K codes + fp16 scales, Q4_0 V blocks: the K8V4 hybrid (docs/operation.md)."""
        _check_dtype("k", k, ("int8",))
        _check_dtype("v", v, ("uint8",))
        P, nkv, D = cls._pool_geometry("k", k)
        _check_shape("v", v, (P, nkv, PAGE, D // 32 * 18), "Q4_0 V blocks of the K rows' head_dim")
        cls._check_scales("k_scale", k_scale, P, nkv, D)
        return cls._make("k8v4", k, v, k_scale, None, page_table, nkv, D, P)

    # -- helpers ------------------------------------------------------------------------------------------
    @staticmethod
    def _pool_geometry(arg: str, x: Any, q4: bool = False) -> tuple[int, int, int]:
        s = A.shape(x)
        if len(s) != 4 or s[2] != PAGE:
            raise ValueError(f"{arg}: expected shape [pages, n_head_kv, {PAGE}, row] (4 cells per page), got {list(s)}")
        P, nkv, _, row = s
        if q4:
            if row % 18 != 0 or (row // 18) % 2 != 0:
                raise ValueError(f"{arg}: a Q4_0 row is head_dim/32 blocks of 18 bytes (head_dim a multiple of 64); "
                                 f"got a row of {row} bytes")
            D = row // 18 * 32
        else:
            D = row
        if D % 64 != 0 or not 64 <= D <= 256:
            raise ValueError(f"{arg}: head_dim must be 64, 128, 192 or 256, got {D}")
        if P < 1 or nkv < 1:
            raise ValueError(f"{arg}: expected at least one page and one KV head, got shape {list(s)}")
        _check_contig(arg, x)
        return P, nkv, D

    @staticmethod
    def _check_scales(arg: str, x: Any, P: int, nkv: int, D: int) -> None:
        _check_dtype(arg, x, ("float16", "uint16"))
        _check_shape(arg, x, (P, nkv, PAGE, D // 64), "fp16 scale per 64-dim group")
        _check_contig(arg, x)

    @classmethod
    def _make(cls, fmt, k, v, k_scale, v_scale, page_table, nkv, D, P) -> "KVCache":
        _check_contig("v", v)
        _check_dtype("page_table", page_table, ("int32",))
        if len(A.shape(page_table)) != 1:
            raise ValueError(f"page_table: expected shape [n_logical_pages], got {list(A.shape(page_table))}")
        _check_contig("page_table", page_table)
        dev = A.device(k)
        for name, arr in (("v", v), ("k_scale", k_scale), ("v_scale", v_scale), ("page_table", page_table)):
            if arr is not None and A.device(arr) != dev:
                raise ValueError(f"{name}: expected the same device as k ({dev[0]}:{dev[1]}), "
                                 f"got {A.describe(arr)}")
        return cls(fmt, k, v, k_scale, v_scale, page_table, nkv, D, P)

    def __repr__(self) -> str:
        return (f"KVCache.{self.format}(pages={self.n_phys_pages}, n_head_kv={self.n_head_kv}, "
                f"head_dim={self.head_dim}, logical_pages={self.n_pages}, device={self.device[0]})")


# ---------------------------------------------------------------------------------------------------------------
# The calls
# ---------------------------------------------------------------------------------------------------------------
import json as _json
import os as _os
import sys as _sys
from typing import NamedTuple

from .errors import GeometryMissing, StrataError

_OP_PROMPT, _OP_DECODE = 0, 1
_INT64_MAX = 2**63 - 1
_MAX_QUERIES_PER_LAUNCH = 65535
_SCRATCH_BUDGET_FLOATS = 1 << 26
_DEVICE_KIND_CODE = {"cpu": 0, "cuda": 1, "hip": 2, "sycl": 3}


class Which(NamedTuple):
    """The variant a call would run and the dispatcher's reason."""
    variant: str
    reason: str


def _plugin(dev: tuple[str, int], geometry: tuple[int, int] | None = None):
    from .resolve import plugin_for
    return plugin_for(dev[0], dev[1], geometry)


def plugin_variants(device: tuple[str, int] = ("cpu", 0), geometry: tuple[int, int] | None = None) -> list[str]:
    """The variants compiled into the plugin that serves ``device`` (for ``geometry`` (head_dim, G) when given)."""
    return list(_json.loads(_plugin(device, geometry).manifest)["variants"])


def plugin_manifest(device: tuple[str, int] = ("cpu", 0)) -> dict:
    return _json.loads(_plugin(device).manifest)


def device_name(device: tuple[str, int] = ("cpu", 0)) -> str:
    p = _plugin(device)
    info = p.probe(_DEVICE_KIND_CODE.get(device[0], -1), device[1])
    return info["name"] or device[0]


def _framework_alloc(like: Any, shape: tuple[int, ...], dtype: str, fill: float | int | None = None) -> Any:
    """An array of q's framework on q's device (torch: the caching allocator; numpy on the host)."""
    fw = A.framework(like)
    if fw == "torch":
        import torch
        t = torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
        return t.fill_(fill) if fill is not None else t
    if fw == "cupy":
        import cupy
        with cupy.cuda.Device(A.device(like)[1]):
            return cupy.full(shape, fill, dtype=dtype) if fill is not None else cupy.empty(shape, dtype=dtype)
    import numpy as np
    if A.device(like)[0] != "cpu":
        raise TypeError(f"q: arrays of {fw} on {A.device(like)[0]} need out= (the package cannot allocate "
                        f"device memory for this framework)")
    return np.full(shape, fill, dtype=dtype) if fill is not None else np.empty(shape, dtype=dtype)


_to_host = A.to_host


def _stream_handle(q: Any, stream: Any) -> int:
    if stream is not None:
        for attr in ("cuda_stream", "ptr", "handle"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    if A.framework(q) == "torch" and A.device(q)[0] in ("cuda", "hip"):
        import torch
        return int(torch.cuda.current_stream(q.device).cuda_stream)
    if A.framework(q) == "cupy":
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)
    return 0


@dataclass
class _Call:
    q: Any
    kv: KVCache
    ids: Any
    width: Any
    width_stride: int
    n_q: int
    n_head: int
    group: int
    cap: int
    device: tuple[str, int]


def _check_call(q: Any, kv: Any, ids: Any, width: Any, op: int) -> _Call:
    if not isinstance(kv, KVCache):
        raise TypeError(f"kv: expected a strata_kernels.KVCache (KVCache.int8/.fp16/.q4_0/.k8v4), "
                        f"got {type(kv).__name__}")
    _check_dtype("q", q, ("float32",))
    qs = A.shape(q)
    if len(qs) != 3:
        raise ValueError(f"q: expected shape [n_q, n_head, head_dim], got {list(qs)}")
    n_q, n_head, hd = qs
    if hd != kv.head_dim:
        raise ValueError(f"q: head_dim {hd} does not match the KV cache's head_dim {kv.head_dim}")
    if n_head % kv.n_head_kv != 0 or n_head == 0:
        raise ValueError(f"q: n_head {n_head} is not a positive multiple of the cache's n_head_kv {kv.n_head_kv} "
                         f"(expected n_head = G * n_head_kv, e.g. {12 * kv.n_head_kv} for G = 12)")
    group = n_head // kv.n_head_kv
    _check_contig("q", q)
    _check_aligned("q", q)
    _check_dtype("ids", ids, ("int32",))
    ish = A.shape(ids)
    if len(ish) != 2 or ish[0] != n_q:
        raise ValueError(f"ids: expected shape [n_q={n_q}, cap], got {list(ish)}")
    cap = ish[1]
    if cap < 1 and n_q > 0:
        raise ValueError(f"ids: expected cap >= 1 (row length), got shape {list(ish)}")
    _check_contig("ids", ids)
    _check_dtype("width", width, ("int32",))
    wsh = A.shape(width)
    if wsh == (n_q,):
        stride = 1
    elif wsh == (n_q, 4):
        stride = 4
    else:
        raise ValueError(f"width: expected shape [n_q={n_q}] (widths) or [n_q, 4] (steps), got {list(wsh)}")
    _check_contig("width", width)
    dev = A.device(q)
    for name, arr in (("ids", ids), ("width", width), ("kv", kv.k)):
        if A.device(arr) != dev:
            raise ValueError(f"{name}: expected the same device as q ({dev[0]}:{dev[1]}), got {A.describe(arr)}")
    if dev[0] == "cpu" and n_q:
        import numpy as np
        w = np.asarray(_to_host(width)).reshape(n_q, stride)[:, stride - 1]
        bad = np.flatnonzero((w < 0) | (w > cap))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"width: query {i} has width {int(w[i])}, expected 0 <= width <= cap = {cap}")
    return _Call(q, kv, ids, width, stride, n_q, n_head, group, cap, dev)


def _check_out(out: Any, c: _Call) -> Any:
    if out is None:
        return _framework_alloc(c.q, (c.n_q, c.n_head, c.kv.head_dim), "float32")
    _check_dtype("out", out, ("float32",))
    if A.shape(out) != (c.n_q, c.n_head, c.kv.head_dim):
        raise ValueError(f"out: expected shape {[c.n_q, c.n_head, c.kv.head_dim]} (same as q), got {list(A.shape(out))}")
    _check_contig("out", out)
    _check_aligned("out", out)
    if A.device(out) != c.device or A.framework(out) != A.framework(c.q):
        raise ValueError(f"out: expected {A.framework(c.q)} on {c.device[0]}:{c.device[1]} like q, got {A.describe(out)}")
    return out


def decode_scratch_floats(cap: int, n_head: int, head_dim: int) -> int:
    """Floats of decode scratch per query (docs/operation.md)."""
    return -(-cap // 64) * n_head * (head_dim + 2) + 64


def call_scratch_floats(op: int, n_q: int, cap: int, n_head: int, head_dim: int, group: int, n_head_kv: int) -> int:
    """Scratch floats the chunk + merge family and the split / flash decode take for a call (or plan) of ``n_q``
    queries: the prompt fallback runs 32 queries at a time as the engine does, decode as many as fit a 256 MB budget;
    a decode call of many queries may run grouped (docs/variants.md), so decode also covers grouped's scratch."""
    per = decode_scratch_floats(cap, n_head, head_dim)
    n = 32 if op == _OP_PROMPT else max(32, _SCRATCH_BUDGET_FLOATS // per)
    floats = min(n_q, n, _MAX_QUERIES_PER_LAUNCH) * per
    if op == _OP_DECODE:
        floats = max(floats, grouped_scratch_floats(n_q, cap, group, head_dim, n_head_kv))
    return floats


def grouped_scratch_floats(n_q: int, cap: int, group: int, head_dim: int = 256, n_head_kv: int = 1) -> int:
    """Floats of scratch the grouped prompt kernel takes from the caller for ``n_q`` queries (its union of each group's
    selections: physical cell and membership word per entry, plus the running union where shared memory cannot hold
    it; and the partial results of the work units it runs in pieces, at most min(512, 8 x units) pieces of 64 rows, or
    of 128 in the pair form that INT8 prompts at (256, 12) take on sm_90); with less it uses a buffer of the plugin's
    own."""
    from .targets import GROUPED_PAIR_GEOMETRY, grouped_queries

    def form(rows: int) -> int:
        nq = grouped_queries(group, rows)
        groups = -(-n_q // nq)
        pieces = min(512, 8 * groups * n_head_kv)
        return (groups * nq * cap * 16 + groups * 4 + 64) // 4 + pieces * (rows * head_dim + 2 * rows) + 4
    # there the CUDA dispatch may run the pair form (128-row units; cuda/dispatch.inc.j2, pair_form)
    return max(form(64), form(128)) if (head_dim, group) == GROUPED_PAIR_GEOMETRY else form(64)


def _raise_offence(pos: int, width_query: int, c: _Call) -> None:
    """The ValueError of an offence the kernels recorded (bad[0] = pos, bad[1] = width_query), read off the arrays."""
    import numpy as np
    if width_query != _INT64_MAX:
        qi = width_query
        w = int(np.asarray(_to_host(c.width)).reshape(c.n_q, c.width_stride)[qi, c.width_stride - 1])
        raise ValueError(f"width: query {qi} has width {w}, expected 0 <= width <= cap = {c.cap}")
    if pos != _INT64_MAX:
        qi, j = divmod(pos, c.cap)
        cell = int(np.asarray(_to_host(c.ids))[qi, j])
        n_cells = c.kv.n_pages * PAGE
        if not 0 <= cell < n_cells:
            raise ValueError(f"ids: query {qi}, position {j} holds cell {cell}, outside the cache "
                             f"(expected 0 <= id < {n_cells} = 4 * n_logical_pages)")
        page = int(np.asarray(_to_host(c.kv.page_table))[cell // PAGE])
        raise ValueError(f"page_table: entry {cell // PAGE} (cell {cell}, query {qi}, position {j}) is {page}, "
                         f"expected -1 or a physical page in [0, {c.kv.n_phys_pages})")


def _call_arrays(op: int, q, kv, ids, width, variant, out, stream):
    """The call through the loader's array interface with a per-call flag read back at once (synchronises a GPU):
    the FP64 oracle, empty calls, and plugins without host words (older builds, SYCL)."""
    if A.framework(q) == "torch":
        from . import torch_ops  # noqa: F401  (registers torch.ops.strata_kernels.* once torch is in use)
    c = _check_call(q, kv, ids, width, op)
    out = _check_out(out, c)
    if variant == "auto":
        variant = None
    if variant is not None and not isinstance(variant, str):
        raise TypeError(f"variant: expected a variant name or None, got {type(variant).__name__}")
    if c.n_q == 0:
        return out
    if variant == "fp64":
        return _fp64(c, out)
    plugin = _plugin_for_call(c)
    from . import _loader
    bad = _framework_alloc(q, (2,), "int64", _INT64_MAX)
    scratch = None
    if c.device[0] != "cpu" and _needs_scratch(plugin, op, variant, c):
        # Chunk + merge (and split decode) scratch from the caller's framework (torch: its caching allocator).
        floats = call_scratch_floats(op, c.n_q, c.cap, c.n_head, kv.head_dim, c.group, kv.n_head_kv)
        scratch = _framework_alloc(q, (floats,), "float32")
    st, msg = plugin.call(op, variant, kv.format_code, c.q, out, c.ids, c.width, c.width_stride,
                          kv.page_table, kv.k, kv.v, kv.k_scale, kv.v_scale, kv.n_head_kv, kv.head_dim, c.group,
                          kv.n_phys_pages, scratch, bad, 0, _stream_handle(q, stream))
    if st == _loader.REFUSED and variant is None:
        # A refused kernel (shared-memory opt-in, split decode without room in the scratch) falls back to the chunk +
        # merge algorithm, as the engine does (docs/variants.md).
        return _call_arrays(_OP_DECODE, q, kv, ids, width, "fp32", out, stream)
    if st in (_loader.REFUSED, _loader.UNSUPPORTED):
        raise Unsupported(msg)
    if st != _loader.OK:
        raise StrataError(f"{'prompt' if op == _OP_PROMPT else 'decode'} attention failed: {msg}")
    if _os.environ.get("STRATA_KERNELS_CHECK_IDS", "1") != "0":
        import numpy as np
        b = np.asarray(_to_host(bad)).reshape(-1)
        _raise_offence(int(b[0]), int(b[1]), c)
    return out


_IS_COMPILING = None    # torch.compiler.is_compiling once torch is in use (set by torch_ops)
_CALL_OP = None         # torch_ops.call_op (set by torch_ops)
_PLAN_CALL = None       # plan.call, bound on first use (plans imports this module)


def _call(op: int, q, kv, ids, width, variant, out, stream):
    global _PLAN_CALL
    c = _IS_COMPILING
    if c is not None and c():
        # Inside torch.compile: the registered op, so the call stays in the graph (torch_ops).
        return _CALL_OP(op, q, kv, ids, width, variant, out)
    if _PLAN_CALL is None:
        from .plans import call as _PLAN_CALL
    return _PLAN_CALL(op, q, kv, ids, width, variant, out, stream)


_MANIFESTS: dict[int, dict] = {}


def _manifest(plugin) -> dict:
    m = _MANIFESTS.get(id(plugin))
    if m is None:
        m = _MANIFESTS[id(plugin)] = _json.loads(plugin.manifest)
    return m


def _needs_scratch(plugin, op: int, variant: str | None, c: _Call) -> bool:
    """Only the chunk + merge family and the split decode use scratch; the prompt kernels need none."""
    if op == _OP_DECODE:
        return True
    if variant is None:
        st, variant, _ = plugin.which(op, None, c.kv.format_code, c.q, c.ids, c.width, c.width_stride,
                                      c.kv.page_table, c.kv.n_head_kv, c.kv.head_dim, c.group, c.kv.n_phys_pages)
    return variant.startswith("fp32") or variant == "split"


def _plugin_for_call(c: _Call):
    """The plugin for the call's device and (head_dim, G): a geometry must be instantiated in some installed plugin
    (docs/operation.md: no fallback exists for others); the error names the command that builds it."""
    try:
        return _plugin(c.kv.device, (c.kv.head_dim, c.group))
    except GeometryMissing as e:
        fits = [g * c.kv.n_head_kv for hd, g in e.available if hd == c.kv.head_dim]
        hint = f" (n_head in {fits} would fit n_head_kv {c.kv.n_head_kv})" if fits else ""
        raise GeometryMissing(f"q: n_head {c.n_head} with n_head_kv {c.kv.n_head_kv} gives G = {c.group} at head_dim "
                              f"{c.kv.head_dim}{hint}, but {e}", e.available) from None


def _fp64(c: _Call, out: Any) -> Any:
    if c.device[0] != "cpu":
        raise Unsupported("variant 'fp64' (the FP64 oracle) runs on host arrays only")
    import numpy as np
    from .reference import qsa_attn_fp64
    w = np.asarray(_to_host(c.width)).reshape(c.n_q, c.width_stride)[:, c.width_stride - 1]
    res = qsa_attn_fp64(_to_host(c.q), c.kv, _to_host(c.ids), w)
    host = np.asarray(res, dtype=np.float32)
    if A.framework(out) == "torch":
        import torch
        out.copy_(torch.from_numpy(host))
    else:
        out[...] = host
    return out


def qsa_prompt_attn(q: Any, kv: KVCache, ids: Any, width: Any, *, variant: str | None = None, out: Any = None,
                    stream: Any = None) -> Any:
    """Prompt (prefill) QSA attention: float32 [n_q, n_head, D] in q's framework and device (docs/operation.md)."""
    return _call(_OP_PROMPT, q, kv, ids, width, variant, out, stream)


def qsa_decode_attn(q: Any, kv: KVCache, ids: Any, width: Any, *, variant: str | None = None, out: Any = None,
                    stream: Any = None) -> Any:
    """Decode QSA attention (chunk + merge, or the split decode when enabled); same contract as the prompt call."""
    return _call(_OP_DECODE, q, kv, ids, width, variant, out, stream)


def which(q: Any, kv: KVCache, ids: Any, width: Any, *, path: str = "prompt", variant: str | None = None) -> Which:
    """The variant the call would run on these arguments, and why (nothing is launched)."""
    if path not in ("prompt", "decode"):
        raise ValueError(f"path: expected 'prompt' or 'decode', got {path!r}")
    c = _check_call(q, kv, ids, width, _OP_PROMPT if path == "prompt" else _OP_DECODE)
    if variant == "fp64":
        return Which("fp64", "forced: the FP64 oracle on the host")
    plugin = _plugin_for_call(c)
    from . import _loader
    st, name, why = plugin.which(_OP_PROMPT if path == "prompt" else _OP_DECODE, variant, kv.format_code, c.q,
                                 c.ids, c.width, c.width_stride, kv.page_table, kv.n_head_kv, kv.head_dim,
                                 c.group, kv.n_phys_pages)
    if st != _loader.OK:
        raise Unsupported(why)
    return Which(name, why)


if "torch" in _sys.modules:
    # torch is already in use: register the ops now, so a first call inside torch.compile finds them.
    from . import torch_ops  # noqa: E402,F401
