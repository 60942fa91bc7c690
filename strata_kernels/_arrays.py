"""Framework-neutral facts about an array (numpy, torch, cupy, jax, anything with DLPack) without importing
any framework: its framework, dtype name, shape, device and contiguity."""
from __future__ import annotations

from typing import Any

# DLPack device types (dlpack.h).
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM, _DL_ROCM_HOST, _DL_ONEAPI = 1, 2, 3, 10, 11, 14
_DL_KIND = {_DL_CPU: "cpu", _DL_CUDA_HOST: "cpu", _DL_ROCM_HOST: "cpu", _DL_CUDA: "cuda", _DL_ROCM: "hip",
            _DL_ONEAPI: "sycl"}


def framework(x: Any) -> str:
    mod = type(x).__module__.split(".")[0]
    return {"numpy": "numpy", "torch": "torch", "cupy": "cupy", "jax": "jax", "jaxlib": "jax"}.get(mod, mod)


def dtype_name(x: Any) -> str:
    """'float32', 'int8', 'float16', ... for numpy, torch, cupy and jax arrays."""
    d = str(getattr(x, "dtype", type(x).__name__))
    return d.removeprefix("torch.")


def shape(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


def device(x: Any) -> tuple[str, int]:
    """('cpu', 0), ('cuda', i), ('hip', i), ('sycl', i)."""
    fw = framework(x)
    if fw == "numpy":
        return ("cpu", 0)
    if fw == "torch":
        dev = x.device
        if dev.type == "cpu":
            return ("cpu", 0)
        if dev.type == "cuda":
            import torch  # already imported: x is a tensor
            return ("hip" if getattr(torch.version, "hip", None) else "cuda", dev.index or 0)
        return (dev.type, dev.index or 0)
    dl = getattr(x, "__dlpack_device__", None)
    if dl is not None:
        kind, idx = dl()
        return (_DL_KIND.get(int(kind), f"dlpack{int(kind)}"), int(idx))
    return ("cpu", 0)


def is_c_contiguous(x: Any) -> bool:
    fw = framework(x)
    if fw == "numpy":
        return bool(x.flags["C_CONTIGUOUS"])
    if fw == "torch":
        return bool(x.is_contiguous())
    flags = getattr(x, "flags", None)
    if flags is not None:
        try:
            return bool(flags["C_CONTIGUOUS"])
        except (KeyError, TypeError):
            pass
    return True


def data_ptr(x: Any) -> int:
    """The address of x's first element (numpy, torch, cupy); 0 where it is not known here (jax)."""
    fw = framework(x)
    if fw == "numpy":
        return int(x.ctypes.data)
    if fw == "torch":
        return int(x.data_ptr())
    if fw == "cupy":
        return int(x.data.ptr)
    return 0


def describe(x: Any) -> str:
    """'numpy float32 (3, 24, 256) on cpu' - for error messages."""
    try:
        dev = device(x)
        return f"{framework(x)} {dtype_name(x)} {shape(x)} on {dev[0]}" + (f":{dev[1]}" if dev[0] != "cpu" else "")
    except Exception:  # noqa: BLE001 - only for messages
        return type(x).__name__


def to_host(x: Any):
    """A numpy view or copy of x on the host (torch/cupy device arrays are copied)."""
    import numpy as np
    fw = framework(x)
    if fw == "torch":
        return x.detach().cpu().numpy()
    if fw == "cupy":
        return x.get()
    return np.asarray(x)
