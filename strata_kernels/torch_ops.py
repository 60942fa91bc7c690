"""torch.library custom ops (imported only when torch is): ``torch.ops.strata_kernels.qsa_prompt_attn`` and
``qsa_decode_attn``, with fake implementations so torch.compile can trace shapes without running a kernel."""
from __future__ import annotations

import torch

from . import ops

_FORMATS = {"int8", "fp16", "q4_0", "k8v4"}


def _kv(fmt: str, k, k_scale, v, v_scale, page_table) -> ops.KVCache:
    if fmt == "int8":
        return ops.KVCache.int8(k, k_scale, v, v_scale, page_table)
    if fmt == "fp16":
        return ops.KVCache.fp16(k, v, page_table)
    if fmt == "q4_0":
        return ops.KVCache.q4_0(k, v, page_table)
    if fmt == "k8v4":
        return ops.KVCache.k8v4(k, k_scale, v, page_table)
    raise ValueError(f"fmt: expected one of {sorted(_FORMATS)}, got {fmt!r}")


def _define(name: str, fn):
    @torch.library.custom_op(f"strata_kernels::{name}", mutates_args=())
    def op(q: torch.Tensor, fmt: str, k: torch.Tensor, k_scale: torch.Tensor | None, v: torch.Tensor,
           v_scale: torch.Tensor | None, page_table: torch.Tensor, ids: torch.Tensor, width: torch.Tensor,
           variant: str | None = None) -> torch.Tensor:
        return fn(q, _kv(fmt, k, k_scale, v, v_scale, page_table), ids, width, variant=variant)

    @op.register_fake
    def _(q, fmt, k, k_scale, v, v_scale, page_table, ids, width, variant=None):
        return torch.empty_like(q)

    return op


qsa_prompt_attn = _define("qsa_prompt_attn", ops.qsa_prompt_attn)
qsa_decode_attn = _define("qsa_decode_attn", ops.qsa_decode_attn)
