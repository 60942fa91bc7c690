"""torch ops (imported only when torch is): ``torch.ops.strata_kernels.qsa_prompt_attn`` / ``qsa_decode_attn``
(return a new tensor) and ``qsa_prompt_attn_out`` / ``qsa_decode_attn_out`` (write ``out``), registered through
``torch.library.Library`` with fake implementations, so torch.compile (also ``mode="reduce-overhead"``, CUDA graphs)
traces and captures them. Their kernels take the package's plan path (plans keyed by the pools' addresses).

The kernels are what the dispatcher calls per op call, so they do as little as they can: one tuple of what identifies a
plan (the pools' addresses, every shape, the stream) looked up in a dict, then the plan's dtype, contiguity and device
comparisons and the launch (``Plan._run_op``). Everything else is resolved once, when a key is new."""
from __future__ import annotations

import os

import torch

from . import ops, plans

_FORMATS = {"int8", "fp16", "q4_0", "k8v4"}
_ARGS = ("Tensor q, str fmt, Tensor k, Tensor? k_scale, Tensor v, Tensor? v_scale, Tensor page_table, Tensor ids, "
         "Tensor width")


def view_of(fmt: str, k, k_scale, v, v_scale, page_table) -> ops.KVCache:
    """The KVCache view of these pools (checked)."""
    if fmt == "int8":
        return ops.KVCache.int8(k, k_scale, v, v_scale, page_table)
    if fmt == "fp16":
        return ops.KVCache.fp16(k, v, page_table)
    if fmt == "q4_0":
        return ops.KVCache.q4_0(k, v, page_table)
    if fmt == "k8v4":
        return ops.KVCache.k8v4(k, k_scale, v, page_table)
    raise ValueError(f"fmt: expected one of {sorted(_FORMATS)}, got {fmt!r}")


# The ops' plans, keyed by the pools' addresses and every shape (addresses are unique across devices) and the stream.
# They keep no tensor: torch.compile's CUDA graphs copy inputs into their memory pool and allow no untracked live
# allocation there, so the pools' views are made per call only where a sentence needs them (argument and
# out-of-range errors), and the scratch is allocated outside that pool (plans._Shared).
_PLANS: dict = {}
if plans._ENV_DATA is not None:       # the check setting, read as plans._env_check does, without its call
    _env_get, _ENV_KEY = plans._ENV_DATA.get, plans._ENV_KEY
else:
    _env_get, _ENV_KEY = os.environ.get, plans.ENV_CHECK
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _new(key, op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, out, device):
    """A plan for a new key (the full argument checks first), or None where the array path serves the call. A plan
    made while q's stream captures a CUDA graph takes its scratch per call from the capture's pool."""
    kv = view_of(fmt, k, k_scale, v, v_scale, page_table)
    capturing = device >= 0 and torch.cuda.is_current_stream_capturing()
    p = plans._new_plan(op, q, kv, ids, width, variant, out, key, _PLANS, "per_call" if capturing else "outside")
    if p is not None:
        p.kv = None
    return p


# What the kernels have seen pass: per (pools, q's shape, stream, ...) the last few (check, plan, n_q, steps), where
# check compares ids', width's and out's shapes and strides and all four tensors' dtypes and devices with those of a
# call that passed the plan's checks, in one C++ call (dynamo's TensorGuards; 0.4 us against 0.9 us for the same
# facts read one by one in Python). A torch without it takes the plan's checks on every call.
try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - every torch this package supports has it
    _TensorGuards = None
_SEEN: dict = {}
_SEEN_PER_KEY = 4


def _check_like(q, ids, width, out):
    """A function telling whether four tensors have these four's metadata, or None where this torch lacks one."""
    if _TensorGuards is None:
        return None
    try:
        return _TensorGuards(q, ids, width, out, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
    except Exception:  # noqa: BLE001 - an API change in torch: the plan's own checks serve
        return None


def _first_call(key, op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, out, device, s):
    """A call whose tensors' metadata are not in _SEEN: the plan by the full key (made and checked when new), its
    checks, the launch, and then the metadata recorded as seen."""
    qs, ws = q.shape, width.shape
    full = key[:-1] + (ids.shape, ws, out.shape, key[-1])  # the stream stays last (plans._new_plan reads it there)
    p = _PLANS.get(full) or _new(full, op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, out,
                                 device)
    if p is None:
        ops._call_arrays(op, q, view_of(fmt, k, k_scale, v, v_scale, page_table), ids, width, variant, out, None)
        return
    steps = 4 if len(ws) == 2 else 1
    p._run_op(q, ids, width, out, qs[0], steps, device, s, (fmt, k, k_scale, v, v_scale, page_table))
    check = _check_like(q, ids, width, out)
    if check is not None:
        if len(_SEEN) >= plans._PLAIN_PLANS:
            _SEEN.pop(next(iter(_SEEN)), None)  # the oldest
        seen = _SEEN.setdefault(key, [])
        if len(seen) >= _SEEN_PER_KEY:
            del seen[0]
        seen.append((check, p, qs[0], steps))


def _kernels(op: int, on_device: bool):
    """The CPU or CUDA kernels (``..._out`` and functional) of one operation."""
    f32 = torch.float32

    def into(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, out, variant=None):
        if on_device:
            device = q.get_device()
            s = _raw_stream(device) if device >= 0 else 0
        else:
            device, s = -1, 0
        # on_device: a call the dispatcher sent the CUDA kernel never finds a host plan, whatever q's device says.
        key = (op, on_device, fmt, variant, k.data_ptr(), v.data_ptr(), page_table.data_ptr(),
               None if k_scale is None else k_scale.data_ptr(), None if v_scale is None else v_scale.data_ptr(),
               k.shape, page_table.shape, q.shape, _env_get(_ENV_KEY), s)
        for check, p, n_q, steps in _SEEN.get(key, ()):
            if check(q, ids, width, out):
                p._launch_torch(q, ids, width, out, n_q, steps, s, None, (fmt, k, k_scale, v, v_scale, page_table))
                return
        _first_call(key, op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, out, device, s)

    def functional(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant=None):
        out = torch.empty(q.shape, dtype=f32, device=q.device)
        into(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, out, variant)
        return out

    return into, functional


_lib = torch.library.Library("strata_kernels", "FRAGMENT")


def _define(name: str, op: int) -> None:
    _lib.define(f"{name}({_ARGS}, str? variant=None) -> Tensor")
    _lib.define(f"{name}_out({_ARGS}, Tensor(a!) out, str? variant=None) -> ()")
    for key, on_device in (("CPU", False), ("CUDA", True)):
        into, functional = _kernels(op, on_device)
        _lib.impl(name, functional, key)
        _lib.impl(f"{name}_out", into, key)

    torch.library.register_fake(f"strata_kernels::{name}", lib=_lib)(
        lambda q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant=None: torch.empty_like(q))
    torch.library.register_fake(f"strata_kernels::{name}_out", lib=_lib)(
        lambda q, fmt, k, k_scale, v, v_scale, page_table, ids, width, out, variant=None: None)


_define("qsa_prompt_attn", ops._OP_PROMPT)
_define("qsa_decode_attn", ops._OP_DECODE)
qsa_prompt_attn = torch.ops.strata_kernels.qsa_prompt_attn.default
qsa_decode_attn = torch.ops.strata_kernels.qsa_decode_attn.default
qsa_prompt_attn_out = torch.ops.strata_kernels.qsa_prompt_attn_out.default
qsa_decode_attn_out = torch.ops.strata_kernels.qsa_decode_attn_out.default


def call_op(op: int, q, kv: ops.KVCache, ids, width, variant, out):
    """sk.qsa_*_attn inside torch.compile: the registered op, so the call stays in the graph."""
    base = torch.ops.strata_kernels.qsa_prompt_attn if op == ops._OP_PROMPT else torch.ops.strata_kernels.qsa_decode_attn
    base_out = (torch.ops.strata_kernels.qsa_prompt_attn_out if op == ops._OP_PROMPT
                else torch.ops.strata_kernels.qsa_decode_attn_out)
    args = (q, kv.format, kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table, ids, width)
    if out is None:
        return base(*args, variant)
    base_out(*args, out, variant)
    return out


ops._CALL_OP = call_op
ops._IS_COMPILING = torch.compiler.is_compiling
