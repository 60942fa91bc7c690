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


def _check_shape(arg: str, x: Any, expected: tuple, what: str) -> None:
    got = A.shape(x)
    if len(got) != len(expected) or any(e is not None and e != g for e, g in zip(expected, got)):
        exp = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{arg}: expected shape {exp} ({what}), got {list(got)}")


@dataclass(frozen=True, eq=False)
class KVCache:
    """A view of the paged KV pools of one layer (QSA_SPEC §2): ``[page][kv_head][4 cells][row payload]``.

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
        """int8 codes ``[P, n_kv, 4, D]``, fp16 scales ``[P, n_kv, 4, D//64]`` (QSA_SPEC §2.5)."""
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
        """ggml block_q4_0 rows, uint8 ``[P, n_kv, 4, D//32*18]`` (QSA_SPEC §2.6; K, V and q Hadamard-rotated)."""
        _check_dtype("k", k, ("uint8",))
        _check_dtype("v", v, ("uint8",))
        P, nkv, D = cls._pool_geometry("k", k, q4=True)
        _check_shape("v", v, (P, nkv, PAGE, D // 32 * 18), "Q4_0 V blocks, same as k")
        return cls._make("q4_0", k, v, None, None, page_table, nkv, D, P)

    @classmethod
    def k8v4(cls, k: Any, k_scale: Any, v: Any, page_table: Any) -> "KVCache":
        """int8 K codes + fp16 scales (§2.5), Q4_0 V blocks (§2.6): the K8V4 hybrid (§2.7)."""
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
        P, nkv, row = s
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
