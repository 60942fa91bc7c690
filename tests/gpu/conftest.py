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
    from strata_kernels.testing import to_torch

    return lambda case: to_torch(case, "cuda")
