"""torch ops (imported only when torch is): ``torch.ops.strata_kernels.qsa_prompt_attn`` / ``qsa_decode_attn``
(return a new tensor) and ``qsa_prompt_attn_out`` / ``qsa_decode_attn_out`` (write ``out``), registered through
``torch.library.Library`` with fake implementations, so torch.compile (also ``mode="reduce-overhead"``, CUDA graphs)
traces and captures them. Their kernels take the package's plan path (plans keyed by the pools' addresses)."""
from __future__ import annotations

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


# The ops' plans, keyed by the pools' addresses and shapes (addresses are unique across devices). They keep no
# tensor: torch.compile's CUDA graphs copy inputs into their memory pool and allow no untracked live allocation there,
# so the pools' views are made per call only where a sentence needs them (argument and out-of-range errors).
_PLANS: dict = {}


def _run(op: int, q, fmt: str, k, k_scale, v, v_scale, page_table, ids, width, variant, out):
    qs, ids_s = q.shape, ids.shape
    key = (op, fmt, k.data_ptr(), v.data_ptr(), None if k_scale is None else k_scale.data_ptr(),
           None if v_scale is None else v_scale.data_ptr(), page_table.data_ptr(), k.shape, page_table.shape,
           variant, qs[0], qs[1], ids_s[-1] if len(ids_s) else None, plans._env_check(), None)
    p = _PLANS.get(key)
    kvargs = (fmt, k, k_scale, v, v_scale, page_table)
    if p is None:
        kv = view_of(*kvargs)
        p = plans._new_plan(op, q, kv, ids, width, variant, out, key, _PLANS)
        if p is None:
            return ops._call_arrays(op, q, kv, ids, width, variant, out, None)
        p.kv = None
    return p._run(q, ids, width, out, None, qs, ids_s, kvargs)


_lib = torch.library.Library("strata_kernels", "FRAGMENT")


def _define(name: str, op: int) -> None:
    _lib.define(f"{name}({_ARGS}, str? variant=None) -> Tensor")
    _lib.define(f"{name}_out({_ARGS}, Tensor(a!) out, str? variant=None) -> ()")

    def functional(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant=None):
        return _run(op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, None)

    def into(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, out, variant=None):
        _run(op, q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant, out)

    for key in ("CPU", "CUDA"):
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
