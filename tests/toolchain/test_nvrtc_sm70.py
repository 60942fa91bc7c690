"""sm_70 (Volta) device code to a real cubin with NVRTC 12.9 from PyPI: CUDA 13's nvcc cannot target Volta, so
this is how CI proves the sm_70 target's kernels compile to machine code (QSA_SPEC §5.1; issue: CUDA backend)."""
import os
import re
import sys
from pathlib import Path

import pytest

from strata_kernels import codegen, targets

sys.path.insert(0, str(Path(__file__).parent))
from nvrtc import Nvrtc, cubin_arch, find_libnvrtc  # noqa: E402

pytestmark = pytest.mark.toolchain

# The few standard headers the kernels' device code includes, as NVRTC has none of its own.
_HEADERS = {
    "stdint.h": "typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;\n"
                "typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;\n"
                "typedef unsigned long long uint64_t; typedef unsigned long long uintptr_t;\n",
    "stddef.h": "/* size_t is built into NVRTC */\n",
    "cfloat": "#define FLT_MAX 3.402823466e+38F\n",
}
_HEADERS["cstdint"] = '#include "stdint.h"\nnamespace std { using ::int64_t; using ::int32_t; using ::uint8_t; }\n'


def _runtime_include() -> str | None:
    try:
        import nvidia.cuda_runtime as m  # type: ignore
    except ImportError:
        return None
    for p in m.__path__:
        inc = os.path.join(p, "include")
        if os.path.isfile(os.path.join(inc, "cuda_fp16.h")):
            return inc
    return None


@pytest.fixture(scope="module")
def nvrtc():
    lib = find_libnvrtc("12")
    if not lib:
        pytest.skip("NVRTC 12.x not installed (pip install 'nvidia-cuda-nvrtc-cu12==12.9.*')")
    inc = _runtime_include()
    if not inc:
        pytest.skip("CUDA 12 runtime headers not installed (pip install 'nvidia-cuda-runtime-cu12==12.9.*')")
    return Nvrtc(lib), inc


def _sources(tmp_path):
    t = targets.all_targets()["sm_70"]
    r = codegen.render_target(targets.Selection(t, False), tmp_path)
    codegen.copy_abi_header(tmp_path)
    return [p for p in r.sources if not p.name.startswith("plugin")]


@pytest.mark.parametrize("variant", targets.all_targets()["sm_70"].all_variants)
def test_sm70_kernels_compile_to_a_volta_cubin(nvrtc, tmp_path, variant):
    rtc, runtime_inc = nvrtc
    srcs = [p for p in _sources(tmp_path) if p.name.startswith(f"{variant}_")]
    assert srcs
    for src in srcs:
        opts = ["--gpu-architecture=sm_70", "-std=c++17", "--fmad=false", f"-I{tmp_path / 'include'}",
                f"-I{runtime_inc}", "-default-device"]
        ok, log, cubin = rtc.compile(src.read_text(), src.name, opts, _HEADERS)
        errors = [l for l in log.splitlines() if "error" in l]
        assert ok and not errors, f"{src.name}: NVRTC {rtc.version} failed:\n{log[-3000:]}"
        assert cubin_arch(cubin) == 70, f"{src.name}: cubin is not sm_70 code"
        # Every kernel of the file is in the cubin (templates are instantiated for NVRTC explicitly).
        kernels = set(re.findall(rb"\.text\.([A-Za-z0-9_]+)", cubin))
        assert kernels, f"{src.name}: no kernel code in the cubin"
