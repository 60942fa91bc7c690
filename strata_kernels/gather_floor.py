"""The read-only gather floor of the bench (issue 10): a kernel that reads exactly the bytes a prompt kernel must
gather — the K and V codes and scales of every selected, resident cell — and does nothing else, so its time is
the least any kernel that reads them that way can take on this device, measured in the same run.

Two forms: ``per-query`` (one block per (query, KV head), each reading its own selection, as the per-query
kernels do) and ``grouped`` (one block per (group of n consecutive queries, KV head) reading the union of their
selections once, as the grouped kernel does). INT8 KV only; CUDA through CuPy's runtime compiler.
"""
from __future__ import annotations

from typing import Any

import numpy as np

PAGE = 4

_SOURCE = r"""
extern "C" __global__ void gather_floor(const int *cells, const long long *offs, const int4 *k, const int4 *v,
                                        const unsigned short *ks, const unsigned short *vs, int pieces, int ng,
                                        int n_head_kv, unsigned int *sink) {
    const long long b = offs[blockIdx.x], e = offs[blockIdx.x + 1];
    const int kvh = blockIdx.y, p = threadIdx.x % pieces;
    unsigned int acc = 0;
    for (long long i = b + threadIdx.x / pieces; i < e; i += blockDim.x / pieces) {
        const int pc = cells[i];
        const long long r = ((long long)(pc >> 2) * n_head_kv + kvh) * 4 + (pc & 3);
        const int4 x = k[r * pieces + p], y = v[r * pieces + p];
        acc ^= x.x ^ x.y ^ x.z ^ x.w ^ y.x ^ y.y ^ y.z ^ y.w;
        if (p < ng) acc ^= ks[r * ng + p] ^ ((unsigned int)vs[r * ng + p] << 16);
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // never true in practice; keeps the loads
}
"""


def units(ids: np.ndarray, widths: np.ndarray, page_table: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(cells, offsets): per unit of ``group`` consecutive queries, the sorted union of their resident selected
    cells as physical cells (page * 4 + id % 4); group 1 = each query's own selection, duplicates kept."""
    n_q = ids.shape[0]
    n_cells = page_table.shape[0] * PAGE
    parts, offs = [], [0]
    for q0 in range(0, n_q, group):
        sel = [ids[q, :int(widths[q])] for q in range(q0, min(n_q, q0 + group))]
        c = np.concatenate(sel) if sel else np.zeros(0, np.int32)
        c = c[(c >= 0) & (c < n_cells)]
        if group > 1:
            c = np.unique(c)
        pg = page_table[c // PAGE]
        c = c[pg >= 0]
        parts.append((page_table[c // PAGE].astype(np.int64) * PAGE + c % PAGE).astype(np.int32))
        offs.append(offs[-1] + parts[-1].size)
    return (np.concatenate(parts) if parts else np.zeros(0, np.int32)), np.asarray(offs, np.int64)


class GatherFloor:
    """Callable: one launch of the floor kernel over a case's INT8 pools on a CUDA device."""

    def __init__(self, case: Any, device: tuple[str, int], group: int):
        try:
            import cupy as cp
        except ImportError as exc:
            raise ImportError("cupy is not installed (the gather floor is a CuPy kernel)") from exc
        if device[0] != "cuda":
            raise ValueError(f"the gather floor runs on CUDA devices, not {device[0]}")
        kv = case.kv
        if kv.format != "int8":
            raise ValueError(f"the gather floor reads INT8 pools, not {kv.format}")
        self.cp = cp
        widths = np.asarray(case.width).reshape(case.n_q, -1)[:, -1]
        cells, offs = units(np.asarray(case.ids), widths, np.asarray(kv.page_table), group)
        with cp.cuda.Device(device[1]):
            put = lambda a: cp.asarray(np.ascontiguousarray(a))  # noqa: E731
            self.args = (put(cells), put(offs), put(kv.k.view(np.int32)), put(kv.v.view(np.int32)),
                         put(kv.k_scale.view(np.uint16)), put(kv.v_scale.view(np.uint16)))
            self.sink = cp.zeros(1, cp.uint32)
            self.kernel = cp.RawKernel(_SOURCE, "gather_floor")
        self.pieces = kv.head_dim // 16
        self.ng = kv.head_dim // 64
        self.n_head_kv = kv.n_head_kv
        self.grid = (offs.size - 1, kv.n_head_kv)
        self.device = device[1]
        self.bytes = int(cells.size) * kv.n_head_kv * (2 * kv.head_dim + 4 * self.ng)

    def __call__(self) -> None:
        cp = self.cp
        with cp.cuda.Device(self.device):
            self.kernel(self.grid, (256,), self.args + (np.int32(self.pieces), np.int32(self.ng),
                                                        np.int32(self.n_head_kv), self.sink))
