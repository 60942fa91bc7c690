"""Compile checks for the HIP targets: every rendered source of every HIP target in ``backends/hip.toml``.

Each target's tree is rendered once; every source is compiled twice, as a real HIP build compiles it:

* the device pass to AMDGPU assembly for the target's gfx, which must hold real ISA for that gfx (kernel
  descriptors, wave32, vector instructions) and call nothing that a device library would not provide;
* the host pass to an object (the launch stubs, the dispatch and the plugin entry against the HIP headers).

Every prebuilt (head_dim, G) pair is compiled on the first target of each feature set (gfx1030, gfx1100, gfx1200) and
the first pair on the others (gfx1101, gfx1201), whose kernel sources are the first's with another name (checked
below): the static checks (tile sizes, LDS) and the code are the same, so compiling them at every pair again would
cost ~75 s of the 2-core CI machine for nothing new (README "Geometries").

wmma_i8's device code must run both products on v_wmma_i32_16x16x16_iu8 without spilling; and the WMMA kernels
(wmma_i8, with wmma as the control) run on the host in a SIMT emulation of the documented fragment layouts and are
checked against the FP64 oracle, since no AMD GPU is at hand.

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


def rendered_source_names(t: targets.Target, geometries: tuple[targets.Geometry, ...] | None = None) -> list[str]:
    """The files codegen renders for ``t``: one per (variant, geometry), then the plugin entry."""
    ext = t.backend.source_ext
    pairs = t.geometries if geometries is None else geometries
    return [f"{v}_{g.head_dim}_{g.group}{ext}" for v in t.all_variants for g in pairs] + [PLUGIN_SOURCE + ext]


def feature_set_leader(t: targets.Target) -> targets.Target:
    """The first HIP target with ``t``'s features and variants (``t`` itself when it is the first)."""
    return next(o for o in HIP_TARGETS if (o.features, o.all_variants) == (t.features, t.all_variants))


def compiled_geometries(t: targets.Target) -> tuple[targets.Geometry, ...]:
    """The pairs compiled here for ``t``: all of them on a feature set's first target, the first on the others."""
    return t.geometries if feature_set_leader(t) is t else t.geometries[:1]


CASES = [(t.name, s) for t in HIP_TARGETS for s in rendered_source_names(t, compiled_geometries(t))]
CASE_IDS = [f"{t}-{s}" for t, s in CASES]
# wmma_i8's device code on every target that carries it (the gfx11 and gfx12 ones).
WMMA_I8_CASES = [(t.name, f"wmma_i8_{g.head_dim}_{g.group}{t.backend.source_ext}")
                 for t in HIP_TARGETS if "wmma_i8" in t.all_variants for g in compiled_geometries(t)]


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

def kernel_resources(asm: str) -> dict[str, int]:
    """The resource counts of the (single) kernel in ``asm``, from its code-object metadata and descriptor."""
    out = {}
    for key, pattern in (("vgprs", r"^\s+\.vgpr_count:\s+(\d+)"), ("sgprs", r"^\s+\.sgpr_count:\s+(\d+)"),
                         ("vgpr_spills", r"^\s+\.vgpr_spill_count:\s+(\d+)"),
                         ("sgpr_spills", r"^\s+\.sgpr_spill_count:\s+(\d+)"),
                         ("scratch_bytes", r"^\s+\.amdhsa_private_segment_fixed_size\s+(\d+)"),
                         ("lds_bytes", r"^\s+\.amdhsa_group_segment_fixed_size\s+(\d+)")):
        found = re.findall(pattern, asm, re.M)
        assert len(found) == 1, f"expected one {key} entry in the kernel's metadata, found {found}"
        out[key] = int(found[0])
    return out


def kernels_spilling(asm: str) -> dict[str, dict[str, int]]:
    """The kernels of ``asm`` that use scratch memory or spill registers, with those counts (code-object metadata)."""
    out = {}
    for entry in re.split(r"\n  - ", asm[asm.find("amdhsa.kernels:"):])[1:]:
        keys = dict(re.findall(r"^    \.(\w+):\s+(\S+)", entry, re.M))
        counts = {k: int(keys.get(k, 0))
                  for k in ("private_segment_fixed_size", "vgpr_spill_count", "sgpr_spill_count")}
        if any(counts.values()):
            out[keys.get("name", "?")] = counts
    return out


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
    kinds = {"test_device_pass_is_real_isa": "device", "test_host_pass_compiles": "host",
             "test_wmma_i8_runs_on_the_int8_matrix_cores": "device"}
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

def test_a_feature_set_renders_one_kernel_source_per_pair(tmp_path):
    """Why gfx1101 and gfx1201 compile only their first pair here: every kernel source of a target is its feature
    set's first target's with the name changed, at every pair (their VGPRs, LDS and scratch, measured at the eight
    prebuilt pairs, were equal too). A template that tests the arch instead of a feature would break this."""
    codegen.copy_abi_header(tmp_path)
    followers = [t for t in HIP_TARGETS if feature_set_leader(t) is not t]
    assert followers, "every HIP target is its own feature set: compiled_geometries then compiles all pairs"
    for t in followers:
        lead = feature_set_leader(t)
        assert t.geometries == lead.geometries, f"{t.name} and {lead.name} ship different pairs"
        mine = codegen.render_target(targets.Selection(t, False), tmp_path)
        theirs = codegen.render_target(targets.Selection(lead, False), tmp_path)
        for a, b in zip(mine.sources, theirs.sources):
            if a.stem == PLUGIN_SOURCE:
                continue  # the entry names its own gfx (and compiles for every target above)
            assert a.name == b.name
            assert a.read_text().replace(t.name, lead.name).replace(t.arch, lead.arch) == b.read_text(), \
                f"{t.name}'s {a.name} differs from {lead.name}'s by more than the name: compile every pair for it"


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
    # Spills stay bounded: none, at every prebuilt pair (measured; on AMD a spill is a round trip to scratch memory).
    spilling = kernels_spilling(c.output.read_text())
    assert not spilling, f"{source} for {gfx}: kernels use scratch or spill registers: {spilling}"


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


# v_wmma_i32_16x16x16_iu8's assembly spells the signedness flags of the builtin as neg_lo bits: [A signed, B signed, 0].
IU8_WMMA = re.compile(r"^\s+v_wmma_i32_16x16x16_iu8\s+[^\n]*?(?:neg_lo:\[(\d),(\d),(\d)\])?\s*$", re.M)


@pytest.mark.parametrize("target_name, source", WMMA_I8_CASES, ids=[f"{t}-{s}" for t, s in WMMA_I8_CASES])
def test_wmma_i8_runs_on_the_int8_matrix_cores(target_name, source, compiled, record_property):
    """wmma_i8 (the exact 24-bit split on v_wmma_i32_16x16x16_iu8): both products on the int8 matrix cores, with the
    h and l limbs signed (s8 x s8) and the m limb unsigned (u8 x s8), no fp16 WMMA, and no scratch or spills."""
    c = compiled[(target_name, source, "device")].result()
    assert c.ok, _failure(c)
    asm = c.output.read_text()
    forms = [m.groups() for m in IU8_WMMA.finditer(asm)]
    assert forms, f"{source} for {target_name}: no v_wmma_i32_16x16x16_iu8 in the device code"
    signed = sum(1 for f in forms if f == ("1", "1", "0"))
    unsigned_a = sum(1 for f in forms if f == ("0", "1", "0"))
    assert signed + unsigned_a == len(forms), f"{source}: an iu8 WMMA with unsigned K/V codes (B) or other flags: " \
                                              f"{sorted(set(forms), key=str)}"
    # Per chunk and wave: q·k 2 tiles x 4 k-steps, p·V 4 n-tiles x 2 k-steps, each as h, l (signed A) and m (unsigned
    # A); the compiler may duplicate code (loop peeling), never drop a product, so the 2:1 ratio holds.
    assert unsigned_a >= 16 and signed == 2 * unsigned_a, f"{source}: {signed} signed-A and {unsigned_a} unsigned-A " \
                                                          "iu8 WMMAs; expected at least 32 and 16, in a 2:1 ratio"
    assert not re.search(r"^\s+v_wmma_f", asm, re.M), f"{source}: wmma_i8 must not use a floating-point WMMA"
    res = kernel_resources(asm)
    for k, v in res.items():
        record_property(k, v)
    print(f"{target_name} {source}: {len(forms)} iu8 WMMAs, {res['vgprs']} VGPRs, {res['sgprs']} SGPRs, "
          f"{res['lds_bytes']} B LDS")
    assert res["scratch_bytes"] == 0 and res["vgpr_spills"] == 0 and res["sgpr_spills"] == 0, \
        f"{source} for {target_name} spills to scratch: {res}"


# ------------------------------------------------------------------------------- the WMMA kernels, emulated on the host
#
# No AMD GPU runs here, so the kernels' index math is checked in a SIMT emulation: the generated source is compiled
# as host C++ against stand-ins for the HIP names it uses (one std::thread per work-item, one block at a time, wave
# shuffles and the WMMA builtins as wave-collective operations through exchange buffers). The WMMA stand-ins
# implement the documented fragment layouts of QSA_SPEC §4.7 (and, for v_wmma_i32_16x16x16_iu8, the same layout in
# bytes: AMD's matrix instruction calculator for gfx11, the RDNA4 layout for gfx12), refuse gfx11 operands that are
# not replicated across the half-waves, and check that no int32 sum overflows. `wmma` runs as the control: its
# layouts were checked on hardware (gfx1201), so it passing means the emulation's layout model is the hardware's.

SIMT_EMULATOR_H = r"""
#pragma once
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
typedef void *hipStream_t;
typedef int hipError_t;
#define hipSuccess 0
inline hipError_t hipGetLastError() { return 0; }
inline const char *hipGetErrorString(hipError_t) { return "no error"; }
struct __half { uint16_t bits; };
inline __half __ushort_as_half(uint16_t b) { return {b}; }
inline float __half2float(__half h) { _Float16 f; std::memcpy(&f, &h.bits, 2); return float(f); }
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    const unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

namespace strata_emu {
constexpr int NT = 128, NW = NT / 32;

class Barrier {
  public:
    explicit Barrier(int n) : n_(n) {}
    void wait() {
        std::unique_lock<std::mutex> lock(m_);
        const unsigned long gen = gen_;
        if (++count_ == n_) {
            count_ = 0;
            ++gen_;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return gen_ != gen; });
        }
    }
  private:
    std::mutex m_;
    std::condition_variable cv_;
    int n_, count_ = 0;
    unsigned long gen_ = 0;
};

inline thread_local dim3 t_tid, t_bid;
inline Barrier *block_bar;
inline Barrier *wave_bar[NW];
struct alignas(16) Slot { unsigned char b[64]; };
inline Slot xa[NW][32], xb[NW][32], xc[NW][32];
inline int wv() { return int(t_tid.x) / 32; }
inline int ln() { return int(t_tid.x) % 32; }
inline void wbar() { wave_bar[wv()]->wait(); }

[[noreturn]] inline void fail(const char *what) {
    std::fprintf(stderr, "emulation: %s (wave %d, lane %d, block %u,%u)\n", what, wv(), ln(), t_bid.x, t_bid.y);
    std::fflush(stderr);
    std::_Exit(3);
}

template <class T> T shfl(T v, int src) {
    static_assert(sizeof(T) <= sizeof(Slot), "value too wide");
    std::memcpy(xa[wv()][ln()].b, &v, sizeof(T));
    wbar();
    T r;
    std::memcpy(&r, xa[wv()][src & 31].b, sizeof(T));
    wbar();
    return r;
}

inline unsigned long long ballot(bool p) {
    xa[wv()][ln()].b[0] = p;
    wbar();
    unsigned long long m = 0;
    for (int l = 0; l < 32; ++l) m |= (unsigned long long)(xa[wv()][l].b[0] != 0) << l;
    wbar();
    return m;
}

// The fragment layouts (QSA_SPEC §4.7), GFX = 11 or 12: A lane l holds row l % 16 at k = kbase + e (e = the
// element: an fp16 value, or byte e % 4 of dword e / 4 of a packed int8 operand); B column l % 16 likewise; D
// element i of lane l is D[drow][l % 16].
inline int kbase(int gfx, int l) { return gfx == 12 ? 8 * (l / 16) : 0; }
inline int drow(int gfx, int l, int i) { return gfx == 12 ? 8 * (l / 16) + i : 2 * i + l / 16; }

template <int GFX, class AB, class CD, class ElemFn, class Acc>
CD wmma(const AB &a, const AB &b, const CD &c, int elems, int elem_bytes, ElemFn elem, Acc) {
    const int w = wv(), l = ln();
    std::memcpy(xa[w][l].b, &a, sizeof(AB));
    std::memcpy(xb[w][l].b, &b, sizeof(AB));
    std::memcpy(xc[w][l].b, &c, sizeof(CD));
    wbar();
    if (GFX == 11 && l < 16 && (std::memcmp(xa[w][l].b, xa[w][l + 16].b, sizeof(AB)) ||
                                std::memcmp(xb[w][l].b, xb[w][l + 16].b, sizeof(AB))))
        fail("gfx11 WMMA operand differs between lanes l and l + 16");
    Acc A[16][16], B[16][16], C[16][16];
    for (int L = 0; L < 32; ++L)
        for (int e = 0; e < elems; ++e) {
            const int k = kbase(GFX, L) + e;
            A[L % 16][k] = elem(xa[w][L].b + elem_bytes * e, true);
            B[k][L % 16] = elem(xb[w][L].b + elem_bytes * e, false);
        }
    for (int L = 0; L < 32; ++L)
        for (int i = 0; i < 8; ++i) {
            typename std::remove_cv<typename std::remove_reference<decltype(c[0])>::type>::type v;
            std::memcpy(&v, xc[w][L].b + 4 * i, 4);
            C[drow(GFX, L, i)][L % 16] = Acc(v);
        }
    CD d;
    for (int i = 0; i < 8; ++i) {
        const int r = drow(GFX, l, i), col = l % 16;
        Acc s = C[r][col];
        for (int k = 0; k < 16; ++k) s += A[r][k] * B[k][col];
        d[i] = s;
        if (Acc(d[i]) != s && std::is_integral<Acc>::value) fail("int32 overflow in an iu8 WMMA");
    }
    wbar();
    return d;
}

template <int GFX, class AB, class CD>
CD wmma_iu8(bool a_signed, const AB &a, bool b_signed, const AB &b, const CD &c, bool clamp) {
    static_assert(sizeof(AB) == (GFX == 12 ? 8 : 16), "iu8 operand size");
    if (clamp) fail("clamp is not emulated");
    auto elem = [&](const unsigned char *p, bool is_a) -> int64_t {
        return (is_a ? a_signed : b_signed) ? int64_t(int8_t(*p)) : int64_t(*p);
    };
    return wmma<GFX>(a, b, c, int(sizeof(AB)), 1, elem, int64_t());
}

template <int GFX, class AB, class CD>
CD wmma_f16(const AB &a, const AB &b, const CD &c) {
    static_assert(sizeof(AB) == (GFX == 12 ? 16 : 32), "f16 operand size");
    auto elem = [](const unsigned char *p, bool) -> double { _Float16 h; std::memcpy(&h, p, 2); return double(h); };
    return wmma<GFX>(a, b, c, int(sizeof(AB) / 2), 2, elem, double());
}

template <class Args>
void launch(void (*kernel)(Args), dim3 grid, int threads, Args a) {
    if (threads != NT) fail("the emulation runs 128-thread blocks only");
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            Barrier bb(NT), w0(32), w1(32), w2(32), w3(32);
            block_bar = &bb;
            wave_bar[0] = &w0, wave_bar[1] = &w1, wave_bar[2] = &w2, wave_bar[3] = &w3;
            std::vector<std::thread> ts;
            for (int t = 0; t < NT; ++t)
                ts.emplace_back([=] {
                    t_tid = dim3(unsigned(t));
                    t_bid = dim3(bx, by);
                    kernel(a);
                });
            for (auto &t : ts) t.join();
        }
}
}  // namespace strata_emu

#define threadIdx (strata_emu::t_tid)
#define blockIdx (strata_emu::t_bid)
#define __syncthreads() (strata_emu::block_bar->wait())
#define __shfl(v, s, w) strata_emu::shfl((v), (s))
#define __shfl_xor(v, m, w) strata_emu::shfl((v), strata_emu::ln() ^ (m))
#define __ballot(p) strata_emu::ballot(p)
#define __builtin_amdgcn_wave_barrier() strata_emu::wbar()
#define __builtin_amdgcn_fence(...) ((void)0)
#define __builtin_amdgcn_exp2f(x) std::exp2(x)
#define __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(sa, a, sb, b, c, cl) strata_emu::wmma_iu8<11>(sa, a, sb, b, c, cl)
#define __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(sa, a, sb, b, c, cl) \
    strata_emu::wmma_iu8<12>(sa, a, sb, b, c, cl)
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c) strata_emu::wmma_f16<11>(a, b, c)
#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(a, b, c) strata_emu::wmma_f16<12>(a, b, c)
"""

# Reads the case's arrays (raw files written by the test), calls the kernel entry once, writes out and the flag.
SIMT_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "strata_plugin.h"
int ENTRY(const strata_attn_args *, char *, size_t);

template <class T> std::vector<T> load(const char *dir, const char *name, size_t n) {
    std::vector<T> v(n);
    char path[4096];
    std::snprintf(path, sizeof(path), "%s/%s.bin", dir, name);
    FILE *f = std::fopen(path, "rb");
    if (!f || std::fread(v.data(), sizeof(T), n, f) != n) {
        std::fprintf(stderr, "cannot read %s\n", path);
        std::exit(2);
    }
    std::fclose(f);
    return v;
}

int main(int argc, char **argv) {  // dir n_q cap n_pages n_phys_pages n_head_kv head_dim group
    const char *dir = argv[1];
    const long long n_q = std::atoll(argv[2]), cap = std::atoll(argv[3]), n_pages = std::atoll(argv[4]),
                    n_phys = std::atoll(argv[5]);
    const int n_kv = std::atoi(argv[6]), hd = std::atoi(argv[7]), g = std::atoi(argv[8]);
    const size_t rows = size_t(n_phys) * n_kv * 4, nqh = size_t(n_q) * n_kv * g * hd;
    auto q = load<float>(dir, "q", nqh);
    auto ids = load<int32_t>(dir, "ids", size_t(n_q) * cap);
    auto width = load<int32_t>(dir, "width", size_t(n_q));
    auto pt = load<int32_t>(dir, "page_table", size_t(n_pages));
    auto k = load<int8_t>(dir, "k", rows * hd), v = load<int8_t>(dir, "v", rows * hd);
    auto ks = load<uint16_t>(dir, "k_scale", rows * (hd / 64)), vs = load<uint16_t>(dir, "v_scale", rows * (hd / 64));
    std::vector<float> out(nqh);
    std::memset(out.data(), 0xff, out.size() * sizeof(float));  // NaN: unwritten outputs are caught (§6.4)
    int64_t bad[2] = {INT64_MAX, INT64_MAX};
    strata_attn_args a;
    std::memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.device = {STRATA_DEV_HIP, 0};
    a.format = STRATA_FMT_INT8;
    a.head_dim = hd, a.group = g, a.n_head_kv = n_kv, a.n_q = n_q, a.cap = cap;
    a.n_pages = n_pages, a.n_phys_pages = n_phys, a.width_stride = 1;
    a.q = q.data(), a.out = out.data(), a.ids = ids.data(), a.width = width.data(), a.page_table = pt.data();
    a.k = k.data(), a.v = v.data(), a.k_scale = ks.data(), a.v_scale = vs.data(), a.bad = bad;
    char err[512] = "";
    const int st = ENTRY(&a, err, sizeof(err));
    if (st != 0) { std::fprintf(stderr, "status %d: %s\n", st, err); return 1; }
    char path[4096];
    std::snprintf(path, sizeof(path), "%s/out.bin", dir);
    FILE *f = std::fopen(path, "wb");
    std::fwrite(out.data(), sizeof(float), out.size(), f);
    std::fwrite(bad, sizeof(int64_t), 2, f);
    std::fclose(f);
    return 0;
}
"""

LAUNCH = re.compile(r"(\w+)<<<(.*), THREADS, 0, stream>>>\(a\);")
EMULATED = [(v, layout) for layout in ("wmma_gfx11", "wmma_gfx12") for v in ("wmma_i8", "wmma")]


@pytest.fixture(scope="module")
def emulation_case(tmp_path_factory):
    """QSA_SPEC §6.3 INT8 data, ctx 200, 4 queries (partial last chunks), with page holes and a width-0 query
    (cases 9-10), plus: a query whose cells all lie in holes, an out-of-range id (masked and flagged) and an all-zero
    q head. Returns (directory of raw arrays, case, FP64 reference, flat index of the bad id)."""
    import numpy as np
    from strata_kernels import reference, testing
    case = testing.make_case("int8", 200, 4, holes=True, width0=True)
    kv = case.kv
    pt = np.asarray(kv.page_table)
    hole = int(np.flatnonzero(pt < 0)[0])
    assert case.widths[2] == 0, "make_case's width-0 rule changed: pick another query"
    case.ids[1, :4] = np.arange(4 * hole, 4 * hole + 4)            # query 1: every cell in a hole
    case.width[1] = 4
    case.ids[3, 10] = 4 * kv.n_pages + 5                             # query 3: an id past the page table
    case.q[0, 3, :] = 0.0                                           # query 0, head 3: q = 0
    d = tmp_path_factory.mktemp("simt_case")
    for name, arr in (("q", case.q), ("ids", case.ids), ("width", case.width), ("page_table", pt), ("k", kv.k),
                      ("v", kv.v), ("k_scale", kv.k_scale), ("v_scale", kv.v_scale)):
        np.ascontiguousarray(arr).tofile(d / f"{name}.bin")
    ref = reference.qsa_attn_fp64(case.q, kv, case.ids, case.width)
    return d, case, ref, 3 * case.cap + 10


@pytest.mark.parametrize("variant, layout", EMULATED, ids=[f"{v}-{lay[5:]}" for v, lay in EMULATED])
def test_wmma_kernels_in_a_simt_emulation(variant, layout, hip_toolchain, emulation_case, tmp_path,
                                          record_property):
    """The kernel computes QSA attention with the documented fragment layouts: within 1e-5 of the output scale of
    FP64 (QSA_SPEC §6.5 check 1 with the CPU bound of item 7; a layout slip gives errors of order 1), every output
    written and finite, queries without a valid cell exactly 0 (check 3), the out-of-range id flagged."""
    import numpy as np
    tc = hip_toolchain
    data, case, ref, bad_index = emulation_case
    t = next((t for t in HIP_TARGETS if layout in t.features and variant in t.all_variants), None)
    if t is None:
        pytest.skip(f"no HIP target with {layout} carries {variant}")
    g = targets.Geometry(256, 12)
    assert g in t.geometries, f"{t.name} lacks the engine geometry the case uses"
    gen = tmp_path / "gen"
    codegen.copy_abi_header(gen)
    codegen.render_target(targets.Selection(t, False), gen)
    src = (gen / t.name / f"{variant}_256_12{t.backend.source_ext}").read_text()
    src, n = LAUNCH.subn(r"strata_emu::launch(\1, \2, THREADS, a);", src)
    assert n == 1, f"{variant}: expected one kernel launch `<name><<<..., THREADS, 0, stream>>>(a);`, found {n}"
    src = src.replace('asm("" : "+v"(x));', 'asm("" : "+m"(x));')  # wmma's opaque-value barrier, host spelling
    shim = tmp_path / "shim"
    (shim / "hip").mkdir(parents=True)
    (shim / "strata_simt_emulator.h").write_text(SIMT_EMULATOR_H)
    for h in ("hip_runtime.h", "hip_fp16.h"):
        (shim / "hip" / h).write_text('#include "../strata_simt_emulator.h"\n')
    (tmp_path / "kernel.cpp").write_text(src)
    (tmp_path / "driver.cpp").write_text(SIMT_DRIVER)
    exe = tmp_path / "emulated"
    common = ["-std=c++17", "-O1", "-ffp-contract=off", "-Wno-psabi", "-pthread", f"-I{shim}", f"-I{gen / 'include'}"]
    for cmd in ([tc.clang, *common, "-x", "c++", "-c", str(tmp_path / "kernel.cpp"), "-o", str(tmp_path / "k.o")],
                [tc.clang, *common, f"-DENTRY=strata_{variant}_256_12", "-x", "c++", "-c",
                 str(tmp_path / "driver.cpp"), "-o", str(tmp_path / "d.o")],
                [tc.clang, "-pthread", str(tmp_path / "k.o"), str(tmp_path / "d.o"), "-o", str(exe)]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, f"building the emulation failed:\n  {' '.join(cmd)}\n{p.stderr[-4000:]}"
    kv = case.kv
    args = [str(data), str(case.n_q), str(case.cap), str(kv.n_pages), str(kv.n_phys_pages), str(kv.n_head_kv),
            "256", "12"]
    t0 = time.perf_counter()
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    record_property("seconds", round(time.perf_counter() - t0, 2))
    assert p.returncode == 0, f"{variant} on the {layout[5:]} layout failed in the emulation:\n{p.stderr[-4000:]}"
    raw = (data / "out.bin").read_bytes()
    (data / "out.bin").unlink()
    out = np.frombuffer(raw[:-16], dtype=np.float32).reshape(ref.shape)
    bad = np.frombuffer(raw[-16:], dtype=np.int64)
    assert np.isfinite(out).all(), f"{variant}: non-finite or unwritten outputs at {np.argwhere(~np.isfinite(out))[:5]}"
    empty = [1, 2]  # all cells in holes; width 0
    assert (out[empty] == 0).all() and (ref[empty] == 0).all(), f"{variant}: queries without a valid cell are not 0"
    scale = float(np.abs(ref).max())
    err = float(np.abs(out - ref).max())
    record_property("rel_err", err / scale)
    print(f"{variant} ({layout[5:]} layout, emulated): max |out - fp64| {err:.3e} = {err / scale:.2e} of scale "
          f"{scale:.3f}")
    assert err <= 1e-5 * scale, f"{variant} on the {layout[5:]} layout: error {err:.3e} vs FP64 exceeds 1e-5 of the " \
                                f"output scale {scale:.3f}"
    assert int(bad[0]) == bad_index and int(bad[1]) == np.iinfo(np.int64).max, \
        f"{variant}: error flag {bad.tolist()}, expected [{bad_index}, INT64_MAX]"
