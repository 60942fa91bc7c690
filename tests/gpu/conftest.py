import pytest


def _cuda():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device"
    return torch, ""


@pytest.fixture(scope="session")
def torch_cuda():
    torch, why = _cuda()
    if torch is None:
        pytest.skip(f"GPU tests need a CUDA device and torch: {why}")
    return torch


@pytest.fixture(scope="session")
def to_cuda(torch_cuda):
    """A parity case moved to the GPU as torch tensors (pools, page table, q, ids, width)."""
    import strata_kernels as sk

    def move(case):
        torch = torch_cuda
        kv = case.kv
        t = lambda a: None if a is None else torch.from_numpy(a).cuda()  # noqa: E731
        builders = {
            "int8": lambda: sk.KVCache.int8(t(kv.k), t(kv.k_scale), t(kv.v), t(kv.v_scale), t(kv.page_table)),
            "fp16": lambda: sk.KVCache.fp16(t(kv.k), t(kv.v), t(kv.page_table)),
            "q4_0": lambda: sk.KVCache.q4_0(t(kv.k), t(kv.v), t(kv.page_table)),
            "k8v4": lambda: sk.KVCache.k8v4(t(kv.k), t(kv.k_scale), t(kv.v), t(kv.page_table)),
        }
        return t(case.q), builders[kv.format](), t(case.ids), t(case.width)

    return move
