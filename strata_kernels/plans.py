"""Plans and the engine's hot path (docs/engine.md): a call's plugin, variant, geometry, scratch and error word are
resolved once, so a repeated call only compares shapes, dtypes and devices, then hands raw pointers to the loader.

Out-of-range ids, pages and widths are masked by every kernel and recorded in a per-device error word: host memory
the kernels write (mapped pinned memory on a GPU), allocated once per device. A GPU call never waits for the device:
the host reads the word (a plain memory read) before the next call on that device and in :func:`check_errors`, and
raises the ``ValueError`` then, naming the query and position; the word is reset, so later calls work.
``STRATA_KERNELS_CHECK_IDS=sync`` waits for each GPU call and raises at the offending call (debugging);
``STRATA_KERNELS_CHECK_IDS=0`` records nothing. Host (CPU) calls are synchronous and always raise at the call.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

import numpy as np

from . import _arrays as A
from . import ops as _ops
from .errors import StrataError, Unsupported

_NO_OFFENCE = 2**63 - 1
_ERROR_SLOTS = 256          # per device: one (ids/pages, width) word pair per distinct cap
_PLAIN_PLANS = 512          # cached plans of the plain calls (least recently used dropped first)
ENV_CHECK = "STRATA_KERNELS_CHECK_IDS"


def check_mode() -> str:
    """'lazy' (default), 'sync' (raise at the offending GPU call, after a stream sync) or 'off'."""
    v = os.environ.get(ENV_CHECK, "1").strip().lower()
    return "off" if v == "0" else "sync" if v == "sync" else "lazy"


# ---------------------------------------------------------------------------------------------------------------
# Per-device error words
# ---------------------------------------------------------------------------------------------------------------
class _ErrorWords:
    """The error words of one device: ``_ERROR_SLOTS`` pairs [smallest qi*cap+j, smallest qi] in host memory that the
    device's kernels write. A slot serves every call of one cap (the flat position decodes to query and position)."""

    def __init__(self, plugin: Any, device: tuple[str, int]):
        self.device = device
        self.host, self.dev = plugin.host_words(_ops._DEVICE_KIND_CODE[device[0]], device[1], _ERROR_SLOTS * 16)
        self.view = np.frombuffer((ctypes.c_int64 * (2 * _ERROR_SLOTS)).from_address(self.host), dtype=np.int64)
        self.view[:] = _NO_OFFENCE
        self.caps: dict[int, int] = {}
        self.lock = threading.Lock()

    def slot(self, cap: int) -> int:
        with self.lock:
            s = self.caps.get(cap)
            if s is None:
                if len(self.caps) >= _ERROR_SLOTS:
                    raise StrataError(f"more than {_ERROR_SLOTS} distinct cap values on {self.where()}: the error "
                                      f"words are full; use fewer cap values (pad ids rows)")
                s = self.caps[cap] = len(self.caps)
            return s

    def where(self) -> str:
        return f"{self.device[0]}:{self.device[1]}"

    def raise_pending(self) -> None:
        """Raise the first recorded offence (lowest slot) and reset its slot; no device sync."""
        v = self.view
        if (v == _NO_OFFENCE).all():
            return
        with self.lock:
            caps = {s: c for c, s in self.caps.items()}
        for s in range(_ERROR_SLOTS):
            pos, wq = int(v[2 * s]), int(v[2 * s + 1])
            if pos == _NO_OFFENCE and wq == _NO_OFFENCE:
                continue
            v[2 * s:2 * s + 2] = _NO_OFFENCE
            cap = caps.get(s, 0)
            when = (f"in an earlier call on {self.where()} (cap {cap}; reported at the first check after that call "
                    f"finished; set {ENV_CHECK}=sync to raise at the offending call); the output masked it")
            if wq != _NO_OFFENCE:
                raise ValueError(f"width: query {wq} had a width outside [0, cap = {cap}] {when}")
            qi, j = divmod(pos, cap) if cap else (pos, 0)
            raise ValueError(f"ids: query {qi}, position {j} selected a cell outside the cache or on a page outside "
                             f"the pools (expected 0 <= id < 4 * n_logical_pages and a page_table entry of -1 or in "
                             f"[0, n_phys_pages)) {when}")


_WORDS: dict[tuple[int, tuple[str, int]], _ErrorWords] = {}
_WORDS_LOCK = threading.Lock()


def _error_words(plugin: Any, device: tuple[str, int]) -> _ErrorWords | None:
    key = (id(plugin), device)
    w = _WORDS.get(key)
    if w is None and device[0] != "cpu" and plugin.has_host_words:
        with _WORDS_LOCK:
            w = _WORDS.get(key)
            if w is None:
                w = _WORDS[key] = _ErrorWords(plugin, device)
    return w


def check_errors() -> None:
    """Raise the ``ValueError`` of a recorded out-of-range id, page or width on any device, without a device sync:
    it sees what finished before the read (synchronise the stream first to include the calls still queued)."""
    for w in list(_WORDS.values()):
        w.raise_pending()


# ---------------------------------------------------------------------------------------------------------------
# Per-framework array facts on the hot path
# ---------------------------------------------------------------------------------------------------------------
class _Torch:
    """Array facts of torch tensors: (dtype, shape, device index or -1, contiguous, pointer) with no conversions."""

    arrays = False

    def __init__(self):
        import torch
        self.torch = torch
        self.f32, self.i32 = torch.float32, torch.int32
        self.raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)

    @staticmethod
    def device_index(x) -> int:
        # get_device() is -1 on the host and on "meta" too: is_cpu tells them apart (-2 never matches a plan).
        d = x.get_device()
        return d if d >= 0 or x.is_cpu else -2

    @staticmethod
    def contig(x) -> bool:
        return x.is_contiguous()

    def stream(self, index: int, stream: Any) -> int:
        if stream is not None:
            return _ops._stream_handle(None, stream)
        if index < 0:
            return 0
        if self.raw_stream is not None:
            return int(self.raw_stream(index))
        return int(self.torch.cuda.current_stream(index).cuda_stream)

    @staticmethod
    def ptr(x) -> int:
        return x.data_ptr()

    def scratch(self, like, floats: int):
        return self.torch.empty(floats, dtype=self.f32, device=like.device)


class _Generic:
    """CuPy and any DLPack array (slower: through _arrays)."""
    arrays = False
    f32 = np.dtype("float32")
    i32 = np.dtype("int32")

    @staticmethod
    def device_index(x) -> int:
        d = A.device(x)
        return -1 if d[0] == "cpu" else d[1]

    @staticmethod
    def stream(index: int, stream: Any) -> int:
        return 0 if stream is None else _ops._stream_handle(None, stream)

    contig = staticmethod(A.is_c_contiguous)

    @staticmethod
    def scratch(like, floats: int):
        return _ops._framework_alloc(like, (floats,), "float32")

    @staticmethod
    def ptr(x) -> int:
        fw = A.framework(x)
        if fw == "numpy":
            return x.__array_interface__["data"][0]
        if fw == "cupy":
            return int(x.data.ptr)
        if fw == "torch":
            return x.data_ptr()
        if A.device(x)[0] == "cpu":
            return np.from_dlpack(x).__array_interface__["data"][0]
        raise TypeError(f"arrays of {fw} on a device are not supported by plans: pass torch or CuPy arrays")


class _Numpy(_Generic):
    """numpy: always on the host; the loader reads the addresses (faster than .ctypes in Python)."""
    arrays = True

    @staticmethod
    def device_index(x) -> int:
        return -1

    @staticmethod
    def stream(index: int, stream: Any) -> int:
        return 0


class _Cupy(_Generic):
    @staticmethod
    def stream(index: int, stream: Any) -> int:
        if stream is not None:
            return _ops._stream_handle(None, stream)
        import cupy
        return int(cupy.cuda.get_current_stream().ptr)


_FACTS: dict[type, Any] = {}


def _facts_for(x: Any):
    f = _FACTS.get(type(x))
    if f is None:
        fw = A.framework(x)
        f = _FACTS[type(x)] = (_Torch() if fw == "torch" else _Cupy() if fw == "cupy" else _Numpy() if fw == "numpy"
                               else _Generic())
    return f


# ---------------------------------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------------------------------
_OPS = {"prompt": _ops._OP_PROMPT, "decode": _ops._OP_DECODE}


class Plan:
    """One attention operation on one KV cache, resolved once: plugin, variant rule, geometry, scratch, error word.

    ``run(q, ids, width, out=..., stream=None)`` checks only shapes, dtypes, devices and contiguity, allocates nothing
    when ``out`` is given, never waits for the device, and is CUDA-graph capturable. The scratch (chunk + merge and
    split decode) belongs to the plan, or to the caller through ``workspace=`` (a float32 array of at least
    ``workspace_floats`` on the device, which plans used on one stream may share): use a plan on one stream at a time.
    """

    _plain = False      # True for the plain calls' cached plans (made by _new_plan)

    def __init__(self, kv: Any, op: str = "decode", max_queries: int = 1, cap: int = 2048,
                 variant: str | None = None, *, n_head: int | None = None, workspace: Any = None,
                 _per_call_scratch: bool = False):
        if not isinstance(kv, _ops.KVCache):
            raise TypeError(f"kv: expected a strata_kernels.KVCache, got {type(kv).__name__}")
        if op not in _OPS:
            raise ValueError(f"op: expected 'prompt' or 'decode', got {op!r}")
        for name, v in (("max_queries", max_queries), ("cap", cap)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if variant == "auto":
            variant = None
        if variant is not None and not isinstance(variant, str):
            raise TypeError(f"variant: expected a variant name or None, got {type(variant).__name__}")
        if variant == "fp64":
            raise Unsupported("variant 'fp64' (the FP64 oracle) has no plan: call sk.qsa_*_attn with variant='fp64'")
        self.kv, self.op, self.max_queries, self.cap, self.variant = kv, op, max_queries, cap, variant
        self.head_dim = kv.head_dim
        self.device = kv.device
        self.n_head = n_head if n_head is not None else self._n_head_from_plugins()
        self.group = self.n_head // kv.n_head_kv
        if self.group * kv.n_head_kv != self.n_head:
            raise ValueError(f"n_head: expected a multiple of n_head_kv {kv.n_head_kv}, got {self.n_head}")
        self.plugin = _ops._plugin_for_call(_Shape(self.n_head, self.group, kv))
        self.mode = check_mode()
        self.on_host = self.device[0] == "cpu"
        self._dev_index = -1 if self.on_host else self.device[1]
        self._bound = self._bind(_OPS[op], variant)
        self._fallback = None
        self.words = None if self.on_host or self.mode == "off" else _error_words(self.plugin, self.device)
        self._legacy = not self.on_host and self.mode != "off" and self.words is None
        if self.on_host:
            self._bound.set_errors(0, 0, 0, True)
        elif self.words is not None:
            slot = self.words.slot(cap)
            self._bound.set_errors(self.words.dev + 16 * slot, self.words.host, 2 * _ERROR_SLOTS, False)
        self._sync = self.mode == "sync" and self.words is not None
        self._facts = _facts_for(kv.k)
        self._torch_fast = isinstance(self._facts, _Torch)
        self._tensor_type = self._facts.torch.Tensor if self._torch_fast else None
        self.workspace_floats = self._scratch_floats()
        self.workspace = None
        # A plan made by sk.plan owns its scratch (or uses the caller's); the direct calls' plans and the torch ops'
        # share one per (device, stream); a torch op's plan made while its stream captures a CUDA graph takes the
        # scratch per call from torch's stream-ordered allocator, the one thing a capture allows in its memory pool.
        self._scratch_per_call = bool(self.workspace_floats) and _per_call_scratch
        if self.workspace_floats and not self.on_host and not _per_call_scratch:
            self._set_workspace(workspace)

    # -- resolution ---------------------------------------------------------------------------------------------
    def _n_head_from_plugins(self) -> int:
        from .resolve import device_geometries, resolution_for
        _ops._plugin(self.device)       # no plugin at all for the device: the resolver's trace says why
        groups = sorted({g for hd, g in device_geometries(resolution_for(*self.device)) if hd == self.kv.head_dim})
        if len(groups) != 1:
            raise ValueError(f"n_head: the {self.device[0]} plugins have G in {groups} for head_dim "
                             f"{self.kv.head_dim}; pass n_head= to sk.plan")
        return groups[0] * self.kv.n_head_kv

    def _bind(self, op: int, variant: str | None):
        if not hasattr(self, "_kv_addr"):
            kv = self.kv
            ptr = _facts_for(kv.k).ptr
            addr = [0 if a is None else ptr(a) for a in (kv.page_table, kv.k, kv.v, kv.k_scale, kv.v_scale)]
            self._kv_addr = (kv.format_code, addr[0], kv.n_pages, *addr[1:], kv.n_head_kv, kv.head_dim)
            self._kv_phys = kv.n_phys_pages
        fmt, pt, n_pages, k, v, ks, vs, n_head_kv, head_dim = self._kv_addr
        return self.plugin.bind(op, variant, fmt, pt, n_pages, k, v, ks, vs, n_head_kv, head_dim, self.group,
                                self._kv_phys, _ops._DEVICE_KIND_CODE[self.device[0]], self.device[1])

    def _kv_for(self, kvargs) -> Any:
        """The KV cache of a call: the plan's, or (torch ops' plans, which keep no tensors) the call's own."""
        if self.kv is not None or kvargs is None:
            return self.kv
        from .torch_ops import view_of
        return view_of(*kvargs)

    def which(self, n_q: int | None = None) -> _ops.Which:
        """The variant a run of ``n_q`` queries would take, and why."""
        st, name, why = self._bound.which(n_q or self.max_queries, self.cap, 1)
        if st != 0:
            raise Unsupported(why)
        return _ops.Which(name, why)

    def _scratch_floats(self) -> int:
        """Scratch for max_queries: decode always (and grouped's, which a decode call of many queries runs); prompt
        when chunk + merge or split runs, and grouped's union."""
        if self.on_host:
            return 0
        if self.op == "prompt":
            try:
                name = self.which().variant
            except Unsupported:
                return 0
            if name == "grouped":  # its union of each group's selections, so that no call allocates
                return _ops.grouped_scratch_floats(self.max_queries, self.cap, self.group, self.head_dim,
                                                   self.kv.n_head_kv)  # one launch for all
            if not (name.startswith("fp32") or name == "split"):
                return 0
        return _ops.call_scratch_floats(_OPS[self.op], self.max_queries, self.cap, self.n_head, self.kv.head_dim,
                                        self.group, self.kv.n_head_kv)

    def _set_workspace(self, workspace: Any) -> None:
        if isinstance(workspace, _Shared):
            workspace = workspace.get(self.workspace_floats)
        if workspace is None:
            workspace = _ops._framework_alloc(self.kv.k, (self.workspace_floats,), "float32")
        _ops._check_dtype("workspace", workspace, ("float32",))
        _ops._check_contig("workspace", workspace)
        if A.device(workspace) != self.device:
            raise ValueError(f"workspace: expected an array on {self.device[0]}:{self.device[1]} like the KV cache, "
                             f"got {A.describe(workspace)}")
        n = int(np.prod(A.shape(workspace)))
        if n < self.workspace_floats:
            raise ValueError(f"workspace: expected at least {self.workspace_floats} float32 elements (plan."
                             f"workspace_floats), got {n}")
        self.workspace = workspace
        self._bound.set_scratch(_facts_for(workspace).ptr(workspace), n)

    # -- the call -----------------------------------------------------------------------------------------------
    def run(self, q: Any, ids: Any, width: Any, *, out: Any = None, stream: Any = None) -> Any:
        """Attention for ``q`` [n_q <= max_queries, n_head, head_dim] with ``ids`` [n_q, cap] and ``width`` [n_q]
        (or steps [n_q, 4]); writes ``out`` (allocated in q's framework when None) and returns it."""
        return self._run(q, ids, width, out, stream, q.shape, ids.shape)

    def _run(self, q, ids, width, out, stream, qs, ids_s, kvargs=None):
        if self._torch_fast and type(q) is self._tensor_type:
            return self._run_torch(q, ids, width, out, stream, qs, ids_s, kvargs)
        f = _facts_for(q)
        ws = width.shape
        dev = self._dev_index
        n_q = qs[0] if len(qs) == 3 else -1
        if (q.dtype != f.f32 or len(qs) != 3 or qs[1] != self.n_head or qs[2] != self.head_dim
                or not 0 < n_q <= self.max_queries or f.device_index(q) != dev or not f.contig(q)
                or ids.dtype != f.i32 or len(ids_s) != 2 or ids_s[0] != n_q or ids_s[1] != self.cap
                or f.device_index(ids) != dev or not f.contig(ids)
                or width.dtype != f.i32 or ws[0] != n_q or len(ws) > 2 or (len(ws) == 2 and ws[1] != 4)
                or f.device_index(width) != dev or not f.contig(width)):
            if n_q == 0:
                return _ops._check_out(out, _ops._check_call(q, self._kv_for(kvargs), ids, width, _OPS[self.op]))
            self._mismatch(q, ids, width, out, kvargs)
        if out is None:
            out = _ops._framework_alloc(q, tuple(qs), "float32")
        elif out.dtype != f.f32 or out.shape != qs or f.device_index(out) != dev or not f.contig(out) \
                or type(out) is not type(q):
            self._mismatch(q, ids, width, out, kvargs)
        if self._legacy:
            return self._run_legacy(q, ids, width, out, stream, kvargs)
        s = f.stream(dev, stream)
        # q or out off a 16-byte boundary: the loader launches nothing and answers MISALIGNED (_outcome says which)
        if f.arrays:  # numpy: the loader reads the addresses itself (faster than reading them here)
            r = self._bound.run_arrays(q, out, ids, width, 4 if len(ws) == 2 else 1, s)
        elif self._scratch_per_call:
            scratch = f.scratch(q, self.workspace_floats)
            r = self._bound.run(f.ptr(q), f.ptr(out), f.ptr(ids), f.ptr(width), n_q, self.cap,
                                4 if len(ws) == 2 else 1, s, f.ptr(scratch), self.workspace_floats)
        else:
            r = self._bound.run(f.ptr(q), f.ptr(out), f.ptr(ids), f.ptr(width), n_q, self.cap,
                                4 if len(ws) == 2 else 1, s)
        if r:
            self._outcome(r, q, ids, width, out, stream, s, len(ws) == 2, kvargs)
        elif self._sync:
            self.plugin.sync_stream(_ops._DEVICE_KIND_CODE[self.device[0]], self.device[1], s)
            self._raise_synced(q, ids, width, kvargs)
        return out

    def _run_torch(self, q, ids, width, out, stream, qs, ids_s, kvargs=None):
        """_run for torch tensors on this plan's device, the checks written out (no per-array calls)."""
        f = self._facts
        dev, f32, i32 = self._dev_index, f.f32, f.i32
        ws = width.shape
        n_q = qs[0] if len(qs) == 3 else -1
        on_dev = dev >= 0
        if (q.dtype != f32 or len(qs) != 3 or qs[1] != self.n_head or qs[2] != self.head_dim
                or not 0 < n_q <= self.max_queries or not q.is_contiguous()
                or (q.get_device() != dev if on_dev else not q.is_cpu)
                or ids.dtype != i32 or len(ids_s) != 2 or ids_s[0] != n_q or ids_s[1] != self.cap
                or not ids.is_contiguous() or (ids.get_device() != dev if on_dev else not ids.is_cpu)
                or width.dtype != i32 or ws[0] != n_q or len(ws) > 2 or (len(ws) == 2 and ws[1] != 4)
                or not width.is_contiguous() or (width.get_device() != dev if on_dev else not width.is_cpu)):
            if n_q == 0:
                return _ops._check_out(out, _ops._check_call(q, self._kv_for(kvargs), ids, width, _OPS[self.op]))
            self._mismatch(q, ids, width, out, kvargs)
        if out is None:
            out = f.torch.empty(qs, dtype=f32, device=q.device)
        elif (out.dtype != f32 or out.shape != qs or not out.is_contiguous() or type(out) is not type(q)
              or (out.get_device() != dev if on_dev else not out.is_cpu)):
            self._mismatch(q, ids, width, out, kvargs)
        s = (f.stream(dev, stream) if stream is not None or not on_dev or f.raw_stream is None
             else f.raw_stream(dev))
        return self._launch_torch(q, ids, width, out, n_q, 4 if len(ws) == 2 else 1, s, stream, kvargs)

    def _run_op(self, q, ids, width, out, n_q, steps, device, s, kvargs):
        """The torch ops' call (torch_ops): their plan's key holds every shape, the pools' addresses and the stream
        ``s`` of q's device ``device`` (-1: the host), so dtypes, contiguity and the other arrays' devices are what is
        left to compare (the dispatcher sends the CPU kernel host tensors only)."""
        f32, i32 = self._facts.f32, self._facts.i32
        if (q.dtype is not f32 or ids.dtype is not i32 or width.dtype is not i32 or out.dtype is not f32
                or not (q.is_contiguous() and ids.is_contiguous() and width.is_contiguous() and out.is_contiguous())
                or device != self._dev_index
                or device >= 0 and not ids.get_device() == width.get_device() == out.get_device() == device):
            self._mismatch(q, ids, width, out, kvargs)
        return self._launch_torch(q, ids, width, out, n_q, steps, s, None, kvargs)

    def _launch_torch(self, q, ids, width, out, n_q, steps, s, stream, kvargs):
        """The launch of a checked torch call on stream handle ``s``, then its outcome."""
        # (q or out off a 16-byte boundary: the loader answers MISALIGNED, the legacy path's checks refuse it)
        if self._legacy:
            return self._run_legacy(q, ids, width, out, stream, kvargs)
        qp, op = q.data_ptr(), out.data_ptr()
        if self._scratch_per_call:
            scratch = self._facts.torch.empty(self.workspace_floats, dtype=self._facts.f32, device=q.device)
            r = self._bound.run(qp, op, ids.data_ptr(), width.data_ptr(), n_q, self.cap, steps, s, scratch.data_ptr(),
                                self.workspace_floats)
        else:
            r = self._bound.run(qp, op, ids.data_ptr(), width.data_ptr(), n_q, self.cap, steps, s)
        if r:
            self._outcome(r, q, ids, width, out, stream, s, steps == 4, kvargs)
        elif self._sync:
            self.plugin.sync_stream(_ops._DEVICE_KIND_CODE[self.device[0]], self.device[1], s)
            self._raise_synced(q, ids, width, kvargs)
        return out

    def _mismatch(self, q, ids, width, out, kvargs=None):
        """Say precisely what differs: for a caller's plan, arrays on another device first (the plan's KV cache is
        not an argument of run, so "kv: expected the same device as q" would blame what the caller did not pass);
        then the full argument checks, then the plan's own facts."""
        if (not self._plain and self.kv is not None and hasattr(q, "shape") and hasattr(q, "dtype")
                and A.device(q) != self.device):
            raise ValueError(f"q: this plan was made for {self.device[0]}:{self.device[1]} (its KV cache's device), "
                             f"got {A.describe(q)}; a plan runs on one device: make one per device, with sk.plan on "
                             f"that device's KV cache")
        c = _ops._check_call(q, self._kv_for(kvargs), ids, width, _OPS[self.op])
        _ops._check_out(out, c) if out is not None else None
        if c.n_head != self.n_head:
            raise ValueError(f"q: expected n_head {self.n_head} (this plan), got {c.n_head}")
        if c.cap != self.cap:
            raise ValueError(f"ids: expected cap {self.cap} columns (this plan), got {c.cap}")
        if c.n_q > self.max_queries:
            raise ValueError(f"q: expected at most max_queries = {self.max_queries} queries (this plan), got {c.n_q}")
        if c.device != self.device:
            raise ValueError(f"q: expected arrays on {self.device[0]}:{self.device[1]} (this plan's KV cache), got "
                             f"{A.describe(q)}")
        raise TypeError(f"q, ids, width, out: an argument's type differs from this plan's: {A.describe(q)}, "
                        f"{A.describe(ids)}, {A.describe(width)}, {A.describe(out)}")

    def _outcome(self, r, q, ids, width, out, stream, s, steps, kvargs=None):
        from . import _loader
        st = r[0]
        if st == _loader.MISALIGNED:  # nothing launched: the checks name the argument (and raise)
            self._mismatch(q, ids, width, out, kvargs)
        if st == _loader.PENDING:
            self.words.raise_pending()
            # The word was reset meanwhile (another thread reported it): launch now.
            return self._run(q, ids, width, out, stream, q.shape, ids.shape, kvargs)
        if st == _loader.FLAGGED:
            c = self._call_facts(q, ids, width, steps, kvargs)
            _ops._raise_offence(int(r[2]), int(r[3]), c)
        if st == _loader.REFUSED and self.variant is None:
            # A refused kernel (shared-memory opt-in, split decode without room in the scratch) falls back to the
            # chunk + merge algorithm, as the engine does (docs/variants.md); nothing was launched.
            if self._fallback is None:
                fb = self._bind(_ops._OP_DECODE, "fp32")
                if self.words is not None:
                    fb.set_errors(self.words.dev + 16 * self.words.slot(self.cap), self.words.host,
                                  2 * _ERROR_SLOTS, False)
                self._fallback = fb
                # A prompt kernel refused at run time (rare): the fallback's scratch, 32 queries at a time.
                self._fallback_floats = min(self.max_queries, 32) * _ops.decode_scratch_floats(
                    self.cap, self.n_head, self.head_dim)
            f = _facts_for(q)
            scratch = self.workspace
            if scratch is None or int(np.prod(A.shape(scratch))) < self._fallback_floats:
                scratch = f.scratch(q, self._fallback_floats)
            r = self._fallback.run(f.ptr(q), f.ptr(out), f.ptr(ids), f.ptr(width), A.shape(q)[0], self.cap,
                                   4 if steps else 1, s, f.ptr(scratch), int(np.prod(A.shape(scratch))))
            if not r:
                return
            st = r[0]
        if st in (_loader.REFUSED, _loader.UNSUPPORTED):
            raise Unsupported(r[1])
        raise StrataError(f"{self.op} attention failed: {r[1]}")

    def _call_facts(self, q, ids, width, steps, kvargs=None) -> _ops._Call:
        n_q = A.shape(q)[0]
        return _ops._Call(q, self._kv_for(kvargs), ids, width, 4 if steps else 1, n_q, self.n_head, self.group, self.cap,
                          self.device)

    def _raise_synced(self, q, ids, width, kvargs=None) -> None:
        v = self.words.view
        slot = self.words.slot(self.cap)
        b0, b1 = int(v[2 * slot]), int(v[2 * slot + 1])
        if b0 == _NO_OFFENCE and b1 == _NO_OFFENCE:
            return
        v[2 * slot:2 * slot + 2] = _NO_OFFENCE
        _ops._raise_offence(b0, b1, self._call_facts(q, ids, width, len(A.shape(width)) == 2, kvargs))

    def _run_legacy(self, q, ids, width, out, stream, kvargs=None):
        """A plugin without host words (older builds, SYCL): a framework flag read after the call (synchronises)."""
        return _ops._call_arrays(_OPS[self.op], q, self._kv_for(kvargs), ids, width, self.variant, out, stream)

    def __repr__(self) -> str:
        kv = "the call's KV view" if self.kv is None else repr(self.kv)
        return (f"Plan({self.op}, {kv}, max_queries={self.max_queries}, cap={self.cap}, n_head={self.n_head}, "
                f"variant={self.variant!r}, workspace_floats={self.workspace_floats}, errors={self.mode})")


class _Shape:
    """The three facts _ops._plugin_for_call reads from a call."""

    def __init__(self, n_head: int, group: int, kv: Any):
        self.n_head, self.group, self.kv = n_head, group, kv


def plan(kv: Any, op: str = "decode", max_queries: int = 1, cap: int = 2048, variant: str | None = None, *,
         n_head: int | None = None, workspace: Any = None) -> Plan:
    """Resolve a repeated call once (see :class:`Plan`)."""
    return Plan(kv, op, max_queries, cap, variant, n_head=n_head, workspace=workspace)


# ---------------------------------------------------------------------------------------------------------------
# The plain calls: a cached plan per (op, KV cache, variant, queries, heads, cap, check setting)
# ---------------------------------------------------------------------------------------------------------------
_PLANS: dict = {}
_PLANS_LOCK = threading.Lock()
# The check setting is part of the key (tests and users switch it between calls); os.environ's own mapping is
# read directly: os.environ.get encodes the name on every call, which cost more than the rest of the key.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEY = os.environ.encodekey(ENV_CHECK) if _ENV_DATA is not None else None


def _env_check():
    return _ENV_DATA.get(_ENV_KEY) if _ENV_DATA is not None else os.environ.get(ENV_CHECK)


def call(op: int, q: Any, kv: Any, ids: Any, width: Any, variant: Any, out: Any, stream: Any) -> Any:
    """sk.qsa_prompt_attn / sk.qsa_decode_attn through a cached plan. The plans of one (device, stream) share one
    scratch (no allocation per call); the torch ops keep their own plans (torch_ops)."""
    try:
        qs, ids_s = q.shape, ids.shape
        f = _FACTS.get(type(q)) or _facts_for(q)
        key = (op, id(kv), variant, qs[0], qs[1], ids_s[-1], _env_check(), f.stream(f.device_index(q), stream))
        p = _PLANS.get(key)
    except (AttributeError, IndexError, TypeError):
        p = key = None
    if p is None or p.kv is not kv:
        p = _new_plan(op, q, kv, ids, width, variant, out, key)
        if p is None:
            return _ops._call_arrays(op, q, kv, ids, width, variant, out, stream)
    return p._run(q, ids, width, out, stream, qs, ids_s)


def _new_plan(op, q, kv, ids, width, variant, out, key, cache: dict | None = None, scratch: str = "shared"):
    """Full argument checks (the sentences of ops), then a plan kept in ``cache`` (the plain calls' by default);
    None where the array path serves the call. The key ends with the stream handle; ``scratch`` says where the plan's
    scratch comes from: "shared" (per device and stream), "outside" (the same, but allocated outside any CUDA-graph
    memory pool the calling thread allocates to: the torch ops) or "per_call"."""
    c = _ops._check_call(q, kv, ids, width, op)
    _ops._check_out(out, c) if out is not None else None
    if variant == "auto":
        variant = None
    if variant is not None and not isinstance(variant, str):
        raise TypeError(f"variant: expected a variant name or None, got {type(variant).__name__}")
    if key is None or c.n_q == 0 or variant == "fp64":
        return None
    if A.framework(q) == "torch":
        from . import torch_ops  # noqa: F401  (registers torch.ops.strata_kernels.* once torch is in use)
    per_call = scratch == "per_call"
    p = Plan(kv, "prompt" if op == _ops._OP_PROMPT else "decode", c.n_q, c.cap, variant, n_head=c.n_head,
             workspace=None if per_call else _Shared(c.device, key[-1], q, scratch == "outside"),
             _per_call_scratch=per_call)
    p._plain = True
    cache = _PLANS if cache is None else cache
    with _PLANS_LOCK:
        if len(cache) >= _PLAIN_PLANS:
            cache.pop(next(iter(cache)))  # the oldest
        cache[key] = p
    return p


_SHARED: dict[tuple, Any] = {}   # (device, stream) -> the largest scratch the direct calls' plans there have used


class _Shared:
    """The scratch of the direct calls and torch ops on one (device, stream): plans share the largest so far. A plan
    keeps the buffer it was given for its life (a captured graph holds its address); a larger need makes a new one for
    later plans. ``outside``: a torch buffer is allocated by another thread, so that no CUDA-graph memory pool that the
    calling thread allocates to owns it (torch.compile's cudagraph trees route a warm-up's allocations into their
    pool and refuse to record while an allocation they do not track lives there)."""

    def __init__(self, device, stream, like, outside: bool = False):
        self.key, self.like, self.outside = (device, stream), like, outside

    def get(self, floats: int):
        ws = _SHARED.get(self.key)
        if ws is None or int(np.prod(A.shape(ws))) < floats:
            if self.outside and A.framework(self.like) == "torch":
                ws = _torch_alloc_elsewhere(self.like, floats, self.key[1])
            else:
                ws = _ops._framework_alloc(self.like, (floats,), "float32")
            _SHARED[self.key] = ws
        return ws


def _torch_alloc_elsewhere(like, floats: int, stream: int):
    """A float32 torch buffer on ``like``'s device, allocated by a short-lived thread (outside the calling thread's
    pool routing, on that thread's default stream). ``record_stream`` tells the caching allocator that ``stream`` uses
    it, so that, should it ever be freed, it is not handed out again before that stream's work on it has finished."""
    import torch
    got: list = []

    def alloc():
        try:
            got.append(torch.empty(floats, dtype=torch.float32, device=like.device))
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            got.append(e)

    t = threading.Thread(target=alloc, name="strata-kernels-scratch")
    t.start()
    t.join()
    if isinstance(got[0], BaseException):
        raise got[0]
    buf = got[0]
    if stream and buf.is_cuda:
        buf.record_stream(torch.cuda.ExternalStream(stream, device=like.device))
    return buf


def clear() -> None:
    """Forget the plain calls' cached plans (tests; the error words stay, as the device does)."""
    with _PLANS_LOCK:
        _PLANS.clear()
        _SHARED.clear()
