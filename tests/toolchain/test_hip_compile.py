"""Compile checks for the HIP targets: every rendered source of every HIP target in ``backends/hip.toml``.

Each target's tree is rendered once; every source is compiled twice, as a real HIP build compiles it:

* the device pass to AMDGPU assembly for the target's gfx, which must hold real ISA for that gfx (kernel
  descriptors, wave32, vector instructions) and call nothing that a device library would not provide;
* the host pass to an object (the launch stubs, the dispatch and the plugin entry against the HIP headers).

No GPU is needed. The toolchain is clang (18+, with the AMDGPU backend) plus the HIP headers — Debian/Ubuntu:
``apt-get install clang-19 lld-19 libamdhip64-dev rocm-device-libs``, or a ROCm install (``ROCM_PATH``). Where the
ROCm device libraries lack the gfx (Debian's ROCm 5.2 has none for gfx11/gfx12), the device pass runs with
``-nogpulib`` and a small stand-in for the five work-item/fence functions HIP's headers take from the device
libraries; on gfx1030, where both ways work, they give the same instructions.
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata_kernels import codegen, targets

pytestmark = pytest.mark.toolchain

HIP_TARGETS = targets.load_table(targets.backends_dir() / "hip.toml")
PLUGIN_SOURCE = "plugin"  # the plugin entry's stem (codegen.render_target)


def rendered_source_names(t: targets.Target) -> list[str]:
    """The files codegen renders for ``t``: one per (variant, geometry), then the plugin entry."""
    ext = t.backend.source_ext
    return [f"{v}_{g.head_dim}_{g.group}{ext}" for v in t.all_variants for g in t.geometries] + [PLUGIN_SOURCE + ext]


CASES = [(t.name, s) for t in HIP_TARGETS for s in rendered_source_names(t)]
CASE_IDS = [f"{t}-{s}" for t, s in CASES]


# ------------------------------------------------------------------------------- toolchain (from toolchains.py)

@dataclass(frozen=True)
class HipToolchain:
    clang: str                  # clang++ with the AMDGPU backend
    version: str                # "19.1"
    hip_root: Path              # <hip_root>/include/hip/hip_runtime.h
    hip_version: str            # from hip/hip_version.h
    device_libs: Path | None    # directory of ocml.bc, ockl.bc, oclc_isa_version_<N>.bc

    def has_device_libs(self, gfx: str) -> bool:
        """The ROCm device libraries exist for ``gfx`` (clang refuses to link them otherwise)."""
        return self.device_libs is not None and (self.device_libs / f"oclc_isa_version_{gfx[3:]}.bc").is_file()

    def common_flags(self, gfx: str) -> list[str]:
        return ["-x", "hip", f"--offload-arch={gfx}", "-std=c++17", "-fno-gpu-rdc", f"--hip-path={self.hip_root}"]

    def device_flags(self, gfx: str) -> list[str]:
        """Device pass to assembly; with the device libraries when they cover ``gfx``, else ``-nogpulib``."""
        libs = [f"--rocm-device-lib-path={self.device_libs}"] if self.has_device_libs(gfx) else ["-nogpulib"]
        return self.common_flags(gfx) + libs + ["--offload-device-only", "-S", "-O3"]

    def host_flags(self, gfx: str) -> list[str]:
        return self.common_flags(gfx) + ["-nogpulib", "--offload-host-only", "-c", "-O2", "-fPIC"]


def find_hip_toolchain() -> tuple[HipToolchain | None, str]:
    """strata_kernels.toolchains.hip_clang(), as this test's record; else None and why."""
    from strata_kernels import toolchains
    tc = toolchains.hip_clang()
    if not tc.available:
        return None, tc.reason
    libs = tc.extra.get("device_libs")
    return HipToolchain(tc.path, tc.version, Path(tc.extra["hip_root"]), tc.extra["hip_version"],
                        Path(libs) if libs else None), ""


# Stand-ins for the device-library functions that HIP's own headers (threadIdx, blockIdx, __syncthreads) call,
# built from clang builtins, for a -nogpulib compile check only; a real build links the device libraries.
DEVICE_LIB_STANDINS = r"""
#if defined(__HIP_DEVICE_COMPILE__)
extern "C" __device__ __attribute__((always_inline)) size_t __ockl_get_local_id(unsigned int d) {
    return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y()
                                                              : __builtin_amdgcn_workitem_id_z();
}
extern "C" __device__ __attribute__((always_inline)) size_t __ockl_get_group_id(unsigned int d) {
    return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y()
                                                               : __builtin_amdgcn_workgroup_id_z();
}
extern "C" __device__ __attribute__((always_inline)) size_t __ockl_get_local_size(unsigned int d) {
    return d == 0 ? __builtin_amdgcn_workgroup_size_x() : d == 1 ? __builtin_amdgcn_workgroup_size_y()
                                                                 : __builtin_amdgcn_workgroup_size_z();
}
extern "C" __device__ __attribute__((always_inline)) size_t __ockl_get_num_groups(unsigned int d) {
    const size_t n = d == 0 ? __builtin_amdgcn_grid_size_x() : d == 1 ? __builtin_amdgcn_grid_size_y()
                                                                      : __builtin_amdgcn_grid_size_z();
    const size_t b = __ockl_get_local_size(d);
    return (n + b - 1) / b;
}
#if defined(__CLK_LOCAL_MEM_FENCE)  /* HIP 5.x headers: __syncthreads fences through the OpenCL library */
#define STRATA_STANDIN_FENCE(scope)                                                              \
    switch (o) {                                                                                 \
        case __memory_order_acquire: __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, scope); break;     \
        case __memory_order_release: __builtin_amdgcn_fence(__ATOMIC_RELEASE, scope); break;     \
        case __memory_order_acq_rel: __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, scope); break;     \
        case __memory_order_seq_cst: __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, scope); break;     \
        default: break;                                                                          \
    }
extern "C" __device__ __attribute__((always_inline)) void __atomic_work_item_fence(
        __cl_mem_fence_flags, __memory_order o, __memory_scope s) {
    switch (s) {
        case __memory_scope_work_item: break;
        case __memory_scope_sub_group: STRATA_STANDIN_FENCE("wavefront") break;
        case __memory_scope_work_group: STRATA_STANDIN_FENCE("workgroup") break;
        case __memory_scope_device: STRATA_STANDIN_FENCE("agent") break;
        default: STRATA_STANDIN_FENCE("") break;
    }
}
#undef STRATA_STANDIN_FENCE
#endif
#endif
"""

# Names a device library provides (ocml, ockl, oclc, the OpenCL fence): the only calls a -nogpulib pass may leave.
DEVICE_LIB_NAME = re.compile(r"^(__ocml_|__ockl_|__oclc_|__atomic_work_item_fence$)")


# ------------------------------------------------------------------------------------------------ checks

def isa_problems(asm: str, gfx: str, *, kernels_expected: bool, libs_linked: bool) -> list[str]:
    """What is wrong with ``asm`` as the device code for ``gfx`` (empty when it is real ISA for it)."""
    problems = []
    if not re.search(rf'^\s*\.amdgcn_target\s+"amdgcn-amd-amdhsa--{re.escape(gfx)}(:[^"]*)?"', asm, re.M):
        problems.append(f'no .amdgcn_target "amdgcn-amd-amdhsa--{gfx}" directive')
    kernels = re.findall(r"^\s*\.amdhsa_kernel\s+(\S+)", asm, re.M)
    if kernels_expected:
        if not kernels:
            problems.append("no kernel descriptor (.amdhsa_kernel)")
        wave32 = len(re.findall(r"^\s*\.amdhsa_wavefront_size32\s+1\b", asm, re.M))
        if wave32 != len(kernels):
            problems.append(f"{len(kernels) - wave32} of {len(kernels)} kernels are not wave32 (the kernels assume "
                            "32-lane waves)")
        if len(re.findall(r"^\s+v_\w+", asm, re.M)) == 0 or not re.search(r"^\s+s_endpgm", asm, re.M):
            problems.append("no vector instructions or no s_endpgm: the kernels have no code")
    refs = set(re.findall(r"([A-Za-z_.$][\w.$]*)@(?:rel32|gotpcrel32|gotpcrel|abs32)", asm))
    defined = set(re.findall(r"^([A-Za-z_.$][\w.$]*):", asm, re.M))
    unresolved = sorted(refs - defined)
    bad = unresolved if libs_linked else [u for u in unresolved if not DEVICE_LIB_NAME.match(u)]
    if bad:
        problems.append(f"calls to functions defined nowhere: {', '.join(bad)}")
    return problems


# ------------------------------------------------------------------------------------------------ fixtures

@dataclass
class Compiled:
    ok: bool
    cmd: list[str]
    output: Path
    log: str
    seconds: float


def _compile(cmd: list[str], output: Path, cwd: Path) -> Compiled:
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        ok, log = p.returncode == 0 and output.is_file(), p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        ok, log = False, "timed out after 600 s"
    return Compiled(ok, cmd, output, log, time.perf_counter() - t0)


@pytest.fixture(scope="module")
def hip_toolchain() -> HipToolchain:
    tc, why = find_hip_toolchain()
    if tc is None:
        pytest.skip(f"HIP compile checks need a HIP toolchain: {why}")
    return tc


def _selected(request) -> set[tuple[str, str, str]]:
    """The (target, source, pass) compiles that the collected tests of this module will ask for (``-k`` aware)."""
    kinds = {"test_device_pass_is_real_isa": "device", "test_host_pass_compiles": "host"}
    out = set()
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if cs and getattr(item, "module", None) is request.module and item.originalname in kinds:
            out.add((cs.params["target_name"], cs.params["source"], kinds[item.originalname]))
    return out


@pytest.fixture(scope="module")
def compiled(hip_toolchain, tmp_path_factory, request):
    """Render each HIP target once, then compile the selected sources in parallel; {(target, source, pass): Future}."""
    tc = hip_toolchain
    wanted = _selected(request)
    gen = tmp_path_factory.mktemp("genhip")
    work = tmp_path_factory.mktemp("hip_objects")
    standins = work / "device_lib_standins.inc"
    standins.write_text(DEVICE_LIB_STANDINS)
    codegen.copy_abi_header(gen)
    include = gen / "include"
    jobs: dict[tuple[str, str, str], Future] = {}
    pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
    for t in HIP_TARGETS:
        if not any(w[0] == t.name for w in wanted):
            continue
        rendered = codegen.render_target(targets.Selection(t, False), gen)
        names = [p.name for p in rendered.sources]
        assert names == rendered_source_names(t), f"codegen rendered {names} for {t.name}; the test expects " \
                                                  f"{rendered_source_names(t)}: update rendered_source_names"
        gfx = t.arch
        for src in rendered.sources:
            stem = f"{t.name}-{src.stem}"
            if (t.name, src.name, "device") in wanted:
                device_src = src
                if not tc.has_device_libs(gfx):
                    device_src = work / f"{stem}.device.hip"
                    device_src.write_text(f'#include "{src}"\n#include "{standins}"\n')
                asm = work / f"{stem}.s"
                cmd = [tc.clang, *tc.device_flags(gfx), "-I", str(include), str(device_src), "-o", str(asm)]
                jobs[(t.name, src.name, "device")] = pool.submit(_compile, cmd, asm, work)
            if (t.name, src.name, "host") in wanted:
                obj = work / f"{stem}.o"
                cmd = [tc.clang, *tc.host_flags(gfx), "-I", str(include), str(src), "-o", str(obj)]
                jobs[(t.name, src.name, "host")] = pool.submit(_compile, cmd, obj, work)
    yield jobs
    pool.shutdown(wait=True, cancel_futures=True)


def _failure(c: Compiled) -> str:
    tail = "\n".join(c.log.splitlines()[-40:])
    return f"compile failed:\n  {' '.join(c.cmd)}\n{tail}"


# ------------------------------------------------------------------------------------------------ tests

@pytest.mark.parametrize("target_name, source", CASES, ids=CASE_IDS)
def test_device_pass_is_real_isa(target_name, source, compiled, hip_toolchain, record_property):
    """The device pass yields ISA for the target's exact gfx: descriptors, wave32, code, nothing unresolved."""
    gfx = next(t.arch for t in HIP_TARGETS if t.name == target_name)
    c = compiled[(target_name, source, "device")].result()
    record_property("seconds", round(c.seconds, 2))
    assert c.ok, _failure(c)
    libs = hip_toolchain.has_device_libs(gfx)
    problems = isa_problems(c.output.read_text(), gfx, kernels_expected=not source.startswith(PLUGIN_SOURCE + "."),
                            libs_linked=libs)
    assert not problems, (f"{source} for {gfx} ({'device libs' if libs else '-nogpulib'}): "
                          + "; ".join(problems) + f"\n  {' '.join(c.cmd)}")


@pytest.mark.parametrize("target_name, source", CASES, ids=CASE_IDS)
def test_host_pass_compiles(target_name, source, compiled, record_property):
    """The host pass compiles against the HIP headers and defines the symbol the plugin needs from it."""
    gfx = next(t.arch for t in HIP_TARGETS if t.name == target_name)
    c = compiled[(target_name, source, "host")].result()
    record_property("seconds", round(c.seconds, 2))
    assert c.ok, _failure(c)
    data = c.output.read_bytes()
    stem = source.rsplit(".", 1)[0]
    if stem == PLUGIN_SOURCE:
        for needed in (b"strata_plugin_entry", b"STRATA_MANIFEST_BEGIN", b'"gfx":["' + gfx.encode()):
            assert needed in data, f"the plugin entry object for {target_name} lacks {needed.decode()!r}"
    else:
        assert f"strata_{stem}".encode() in data, f"{source}: no kernel entry strata_{stem} in the host object"
