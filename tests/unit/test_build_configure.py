"""When a build directory configured for one target list can be configured again in place (its objects kept) and
when it must start afresh (docs/building.md)."""
from strata_kernels.build import _same_but_cuda

BASE = ["cmake", "-S", "gen", "-B", "cmake", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release"]
NVCC = "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc"


def test_adding_or_dropping_the_cuda_targets_configures_in_place():
    # "cpu" then "cpu;sm_89" (and back): only the CUDA compiler argument comes and goes.
    assert _same_but_cuda(BASE, BASE + [NVCC])
    assert _same_but_cuda(BASE + [NVCC], BASE)


def test_anything_else_starts_afresh():
    assert not _same_but_cuda(None, BASE)                                             # no record of the old one
    assert not _same_but_cuda(BASE + [NVCC], BASE + ["-DCMAKE_CUDA_COMPILER=/opt/cuda-12/bin/nvcc"])  # other nvcc
    assert not _same_but_cuda(BASE, BASE + ["-DPython_EXECUTABLE=/usr/bin/python3"])  # another Python
    assert not _same_but_cuda(BASE, BASE[:-1] + ["-DCMAKE_BUILD_TYPE=Debug"])
