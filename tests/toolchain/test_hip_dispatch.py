"""The HIP plugin's dispatch decisions, checked without an AMD GPU (QSA_SPEC §5.2-§5.5, hip/dispatch.inc.j2).

Each HIP target under test is rendered by ``codegen.generate`` and its ``plugin.hip`` is compiled host-side with
clang (the HIP headers, ``--offload-host-only``). It is linked into a small driver together with

* stubs for the kernel entries ``strata_<variant>_<HD>_<G>`` (never called: ``which`` and ``probe`` launch nothing),
* a fake HIP runtime: the ``hip*`` functions the plugin references, defined against the real ``hip_runtime.h`` (so
  ``hipDeviceProp_t``'s layout is the headers' own); the device it reports comes from environment variables
  (``FAKE_HIP_GFX`` → ``gcnArchName``, ``FAKE_HIP_WARP`` → ``warpSize``, ``FAKE_HIP_CUS``).

The driver calls ``strata_plugin_entry()->which(...)`` or ``->probe(...)`` once and prints ``status|name|why``.
The plugin reads its switches once per process, so every case runs the driver in a fresh process with its own
environment.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata_kernels import codegen, targets

pytestmark = pytest.mark.toolchain

OK, UNSUPPORTED = 0, 3
FP16, INT8 = 0, 1
PROMPT, DECODE = 0, 1
HIP_TARGETS = ("gfx1030", "gfx1100")

# Kernel entries and the fake HIP runtime. Compiled as HIP host code so that the hip* declarations (and the
# hipDeviceProp_t layout, and any R0600 renaming of a newer header) are exactly those the plugin was built against.
FAKE_RUNTIME = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <hip/hip_runtime_api.h>
#include "strata_plugin.h"
extern "C" const strata_plugin_api *strata_plugin_entry(void);

static int env_int(const char *name, int dflt) {
    const char *v = std::getenv(name);
    return v && *v ? std::atoi(v) : dflt;
}

static int g_current = 0;

extern "C" {
hipError_t hipGetDeviceCount(int *count) { *count = env_int("FAKE_HIP_COUNT", 1); return hipSuccess; }
hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int dev) {
    if (dev < 0 || dev >= env_int("FAKE_HIP_COUNT", 1)) return hipErrorInvalidDevice;
    std::memset(p, 0, sizeof(*p));
    std::snprintf(p->name, sizeof(p->name), "Fake AMD GPU");
    const char *gfx = std::getenv("FAKE_HIP_GFX");
    std::snprintf(p->gcnArchName, sizeof(p->gcnArchName), "%s", gfx ? gfx : "");
    p->warpSize = env_int("FAKE_HIP_WARP", 32);
    p->multiProcessorCount = env_int("FAKE_HIP_CUS", 48);
    p->major = 11;
    p->minor = 0;
    return hipSuccess;
}
hipError_t hipGetLastError(void) { return hipSuccess; }
const char *hipGetErrorString(hipError_t e) { return e == hipSuccess ? "no error" : "fake HIP error"; }
hipError_t hipGetDevice(int *d) { *d = g_current; return hipSuccess; }
hipError_t hipSetDevice(int d) { g_current = d; return hipSuccess; }
hipError_t hipDriverGetVersion(int *v) { *v = 50221; return hipSuccess; }
hipError_t hipDeviceSynchronize(void) { return hipSuccess; }
hipError_t hipMalloc(void **p, size_t n) { *p = std::malloc(n ? n : 1); return hipSuccess; }
hipError_t hipFree(void *p) { std::free(p); return hipSuccess; }
hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *m) {  // grow_alloc: no capture here
    *m = hipStreamCaptureModeGlobal;
    return hipSuccess;
}
// The host words of the error report (common/host_words.inc.j2): plain host memory here.
hipError_t hipHostMalloc(void **p, size_t n, unsigned int) { *p = std::malloc(n ? n : 1); return hipSuccess; }
hipError_t hipHostGetDevicePointer(void **d, void *h, unsigned int) { *d = h; return hipSuccess; }
hipError_t hipHostFree(void *p) { std::free(p); return hipSuccess; }
hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
}

// Kernel entries: which() and probe() never call them.
@STUBS@

// driver: which <op> <variant|-> <format> [n_q] [kind]   |   probe
int main(int argc, char **argv) {
    const strata_plugin_api *api = strata_plugin_entry();
    char name[64] = "", why[1024] = "";
    int st;
    if (argc >= 2 && std::strcmp(argv[1], "probe") == 0) {
        strata_device dev{STRATA_DEV_HIP, 0};
        strata_device_info info;
        st = api->probe(&dev, &info, why, sizeof(why));
        std::snprintf(name, sizeof(name), "%s", info.arch);
    } else if (argc >= 5 && std::strcmp(argv[1], "which") == 0) {
        strata_attn_args a;
        std::memset(&a, 0, sizeof(a));
        a.struct_size = sizeof(a);
        a.device.kind = argc > 6 ? std::atoi(argv[6]) : STRATA_DEV_HIP;
        a.device.index = 0;
        a.format = std::atoi(argv[4]);
        a.head_dim = @HD@;
        a.group = @G@;
        a.n_head_kv = 2;
        a.n_q = argc > 5 ? std::atoll(argv[5]) : 64;
        a.cap = 128;
        a.n_pages = 4;
        a.n_phys_pages = 4;
        a.width_stride = 1;
        const char *variant = std::strcmp(argv[3], "-") == 0 ? nullptr : argv[3];
        st = api->which(&a, std::atoi(argv[2]), variant, name, sizeof(name), why, sizeof(why));
    } else {
        std::fprintf(stderr, "usage: driver probe | which <op> <variant|-> <format> [n_q] [kind]\n");
        return 64;
    }
    std::printf("%d|%s|%s\n", st, name, why);
    return 0;
}
"""


@dataclass(frozen=True)
class Result:
    status: int
    name: str
    why: str
    stderr: str


@pytest.fixture(scope="module")
def drivers(tmp_path_factory) -> dict[str, Path]:
    """One driver executable per HIP target (rendered, compiled and linked once per module)."""
    from strata_kernels import toolchains
    tc = toolchains.hip_clang()
    if not tc.available:
        pytest.skip(f"HIP toolchain unavailable: {tc.reason}")
    root = Path(tc.extra["hip_root"])
    all_t = targets.all_targets()
    missing = [n for n in HIP_TARGETS if n not in all_t]
    if missing:
        pytest.skip(f"targets {missing} not in the target tables")
    out = tmp_path_factory.mktemp("hip_dispatch")
    gen = out / "gen"
    rendered = codegen.generate([targets.Selection(all_t[n], False) for n in HIP_TARGETS], gen)
    result = {}
    for r in rendered:
        t = r.target
        g = t.geometries[0]
        assert (g.head_dim, g.group) == (256, 12), "the driver's arguments assume the HD 256, G 12 geometry"
        stubs = "\n".join(
            f"int strata_{v}_{gg.head_dim}_{gg.group}(const strata_attn_args *, char *, size_t) "
            "{ std::abort(); }" for v in t.all_variants for gg in t.geometries)
        drv = out / f"driver_{t.name}.cpp"
        source = FAKE_RUNTIME.replace("@STUBS@", stubs).replace("@HD@", str(g.head_dim))
        drv.write_text(source.replace("@G@", str(g.group)))
        flags = ["-x", "hip", f"--offload-arch={t.arch}", "-std=c++17", f"--hip-path={root}", "-nogpulib",
                 "--offload-host-only", "-c", "-O1", "-fPIC", f"-I{gen / 'include'}"]
        # The driver is plain C++ against the same HIP API header (two HIP host objects would both define
        # __hip_cuid_ when built with --offload-host-only).
        driver_flags = ["-x", "c++", "-std=c++17", "-D__HIP_PLATFORM_AMD__", f"-I{root / 'include'}", "-c", "-O1",
                        f"-I{gen / 'include'}"]
        objs = []
        for src, fl in ((gen / t.name / "plugin.hip", flags), (drv, driver_flags)):
            obj = out / f"{t.name}_{src.stem}.o"
            p = subprocess.run([tc.path, *fl, str(src), "-o", str(obj)], capture_output=True, text=True)
            assert p.returncode == 0, f"compiling {src.name} for {t.name} failed:\n{p.stderr[-4000:]}"
            objs.append(str(obj))
        exe = out / f"driver_{t.name}"
        p = subprocess.run([tc.path, *objs, "-o", str(exe)], capture_output=True, text=True)
        assert p.returncode == 0, f"linking the {t.name} driver failed (a hip* function the fake lacks?):\n" \
                                  f"{p.stderr[-4000:]}"
        result[t.name] = exe
    return result


SWITCHES = ("STRATA_PROMPT_ATTN_OLD", "STRATA_HIP_WMMA", "STRATA_HIP_WMMA_I8", "STRATA_PA_FAST",
            "STRATA_PROMPT_ATTN_RDNA2", "STRATA_ATTN_LANECELL", "STRATA_ATTN_PRE75", "STRATA_PF_SWITCH_MIN_T")


def run_driver(exe: Path, args: list[str], gfx: str, env: dict[str, str] | None = None, warp: int = 32) -> Result:
    e = {k: v for k, v in os.environ.items() if k not in SWITCHES and not k.startswith("FAKE_HIP_")}
    e.update({"FAKE_HIP_GFX": gfx, "FAKE_HIP_WARP": str(warp)}, **(env or {}))
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, env=e, timeout=30)
    assert p.returncode == 0, f"driver failed ({p.returncode}): {p.stdout}{p.stderr}"
    status, name, why = p.stdout.rstrip("\n").split("|", 2)
    return Result(int(status), name, why, p.stderr)


def which(drivers, plugin: str, *, op=PROMPT, fmt=INT8, variant: str | None = None, env=None, gfx=None,
          n_q=64, warp=32, kind=2) -> Result:
    return run_driver(drivers[plugin], ["which", str(op), variant or "-", str(fmt), str(n_q), str(kind)],
                      gfx or plugin, env, warp)


# --------------------------------------------------------------------------- automatic choice (§5.2-§5.4)

@dataclass(frozen=True)
class Auto:
    id: str
    plugin: str
    env: dict
    expect: str                 # the variant name which() reports
    why_has: tuple = ()         # substrings the reason must hold
    why_lacks: tuple = ()       # substrings it must not hold
    op: int = PROMPT
    fmt: int = INT8
    n_q: int = 64
    stderr_has: str = ""
    gfx: str | None = None      # the device the fake runtime reports (default: the plugin's own gfx)


AUTO_CASES = [
    # §5.2, no switches: the decode algorithm; gfx103x with its #540 form (absent from the plugin → fp32, said).
    Auto("gfx1100-int8-noswitch", "gfx1100", {}, "fp32", ("without a prompt kernel switch",), ("fp32_pre75",)),
    Auto("gfx1030-int8-noswitch", "gfx1030", {}, "fp32", ("fp32_pre75", "not in the gfx1030 plugin")),
    Auto("gfx1100-fp16-noswitch", "gfx1100", {}, "fp32", ("fp16 KV",), fmt=FP16),
    # §5.3/§5.4 step 6: WMMA gate and its fast form.
    Auto("gfx1100-wmma", "gfx1100", {"STRATA_HIP_WMMA": "1"}, "wmma", ("STRATA_HIP_WMMA=1",),
         stderr_has="matrix cores on"),
    Auto("gfx1100-wmma-flag-prefix", "gfx1100", {"STRATA_HIP_WMMA": "1yes"}, "wmma"),
    Auto("gfx1100-wmma-fast", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1"}, "wmma_fast",
         ("STRATA_PA_FAST=1",)),
    Auto("gfx1100-wmma-fast-below-min-t", "gfx1100",
         {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1", "STRATA_PF_SWITCH_MIN_T": "100"}, "wmma", n_q=64),
    Auto("gfx1100-wmma-fast-at-min-t", "gfx1100",
         {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1", "STRATA_PF_SWITCH_MIN_T": "64"}, "wmma_fast", n_q=64),
    Auto("gfx1100-pa-fast-alone", "gfx1100", {"STRATA_PA_FAST": "1"}, "fp32"),
    Auto("gfx1100-wmma-fp16", "gfx1100", {"STRATA_HIP_WMMA": "1"}, "fp32", ("fp16 KV",), fmt=FP16),
    Auto("gfx1100-wmma-off-0", "gfx1100", {"STRATA_HIP_WMMA": "0"}, "fp32"),
    Auto("gfx1030-wmma-not-gate", "gfx1030", {"STRATA_HIP_WMMA": "1"}, "fp32",
         ("not a WMMA arch of the gate",), stderr_has="unavailable"),
    # RDNA2: INT8 + exactly "1" + the pre-75 condition.
    Auto("gfx1030-rdna2", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1"}, "rdna2", ("STRATA_PROMPT_ATTN_RDNA2=1",)),
    Auto("gfx1030-rdna2-fp16", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1"}, "fp32", ("fp16 KV",), fmt=FP16),
    Auto("gfx1030-rdna2-not-exact", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1x"}, "fp32"),
    Auto("gfx1030-rdna2-pre75-0", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "0"}, "fp32",
         ("pre-75 condition does not hold",)),
    Auto("gfx1030-wmma-and-rdna2", "gfx1030", {"STRATA_HIP_WMMA": "1", "STRATA_PROMPT_ATTN_RDNA2": "1"}, "rdna2"),
    Auto("gfx1100-rdna2-no-pre75", "gfx1100", {"STRATA_PROMPT_ATTN_RDNA2": "1"}, "fp32",
         ("pre-75 condition does not hold",)),
    Auto("gfx1100-rdna2-pre75-1", "gfx1100", {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "1"}, "rdna2"),
    Auto("gfx1100-wmma-beats-rdna2", "gfx1100",
         {"STRATA_HIP_WMMA": "1", "STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "1"}, "wmma"),
    # wmma_i8 (project decision): STRATA_HIP_WMMA=1… and STRATA_HIP_WMMA_I8=1… on a WMMA-gate device, INT8 prompt
    # only; it replaces wmma, STRATA_PA_FAST does not apply to it, and the I8 switch alone does nothing.
    Auto("gfx1100-wmma-i8", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, "wmma_i8",
         ("STRATA_HIP_WMMA_I8=1", "24-bit"), stderr_has="matrix cores on"),
    Auto("gfx1100-wmma-i8-flag-prefix", "gfx1100", {"STRATA_HIP_WMMA": "1on", "STRATA_HIP_WMMA_I8": "1yes"},
         "wmma_i8"),
    Auto("gfx1100-wmma-i8-beats-pa-fast", "gfx1100",
         {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1", "STRATA_PA_FAST": "1"}, "wmma_i8"),
    Auto("gfx1100-wmma-i8-off-0", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "0"}, "wmma"),
    Auto("gfx1100-wmma-i8-alone", "gfx1100", {"STRATA_HIP_WMMA_I8": "1"}, "fp32",
         ("STRATA_HIP_WMMA_I8=1 takes effect only with STRATA_HIP_WMMA=1",)),
    Auto("gfx1100-wmma-i8-fp16", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, "fp32",
         ("fp16 KV",), fmt=FP16),
    Auto("gfx1100-wmma-i8-decode", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, "fp32",
         ("chunk + merge",), op=DECODE),
    Auto("gfx1030-wmma-i8-not-gate", "gfx1030", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, "fp32",
         ("not a WMMA arch of the gate",), stderr_has="unavailable"),
    Auto("gfx1100-plugin-on-gfx1103-wmma-i8-not-gate", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"},
         "fp32", ("gfx1103 is not a WMMA arch of the gate",), gfx="gfx1103"),
    Auto("gfx1100-old-beats-wmma-i8", "gfx1100",
         {"STRATA_PROMPT_ATTN_OLD": "1", "STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, "fp32",
         ("STRATA_PROMPT_ATTN_OLD=1",)),
    # Step 4: OLD wins over every prompt kernel switch.
    Auto("gfx1100-old-beats-wmma", "gfx1100", {"STRATA_PROMPT_ATTN_OLD": "1", "STRATA_HIP_WMMA": "1"}, "fp32",
         ("STRATA_PROMPT_ATTN_OLD=1",)),
    Auto("gfx1030-old-beats-rdna2", "gfx1030", {"STRATA_PROMPT_ATTN_OLD": "1", "STRATA_PROMPT_ATTN_RDNA2": "1"},
         "fp32", ("STRATA_PROMPT_ATTN_OLD=1", "fp32_pre75")),
    # Decode operation: chunk + merge; the #540 chunk form on gfx103x unless STRATA_ATTN_PRE75=0.
    Auto("gfx1030-decode", "gfx1030", {}, "fp32", ("chunk + merge", "fp32_pre75"), op=DECODE),
    Auto("gfx1030-decode-pre75-0", "gfx1030", {"STRATA_ATTN_PRE75": "0"}, "fp32", ("chunk + merge",),
         ("fp32_pre75",), op=DECODE),
    Auto("gfx1030-decode-ignores-wmma", "gfx1030", {"STRATA_HIP_WMMA": "1", "STRATA_PROMPT_ATTN_RDNA2": "1"}, "fp32",
         ("chunk + merge",), op=DECODE),
    Auto("gfx1100-decode", "gfx1100", {"STRATA_HIP_WMMA": "1"}, "fp32", ("chunk + merge",), ("fp32_pre75",),
         op=DECODE),
    Auto("gfx1100-decode-pre75-1", "gfx1100", {"STRATA_ATTN_PRE75": "1"}, "fp32", ("fp32_pre75",), op=DECODE),
    Auto("gfx1100-decode-lanecell", "gfx1100", {"STRATA_ATTN_LANECELL": "1"}, "fp32", ("fp32_lanecell",), op=DECODE),
]


@pytest.mark.parametrize("case", AUTO_CASES, ids=[c.id for c in AUTO_CASES])
def test_automatic_choice(drivers, case: Auto):
    r = which(drivers, case.plugin, op=case.op, fmt=case.fmt, env=case.env, n_q=case.n_q, gfx=case.gfx)
    assert r.status == OK, r
    assert r.name == case.expect, f"{case.id}: chose {r.name!r} ({r.why}), expected {case.expect!r}"
    for s in case.why_has:
        assert s in r.why, f"{case.id}: reason lacks {s!r}: {r.why}"
    for s in case.why_lacks:
        assert s not in r.why, f"{case.id}: reason should not hold {s!r}: {r.why}"
    if case.stderr_has:
        assert case.stderr_has in r.stderr, f"{case.id}: stderr lacks {case.stderr_has!r}: {r.stderr!r}"


# --------------------------------------------------------------------------- forced variants (§5.5)

@dataclass(frozen=True)
class Forced:
    id: str
    plugin: str
    variant: str
    status: int
    why_has: tuple = ()
    fmt: int = INT8
    gfx: str | None = None
    warp: int = 32
    env: dict | None = None
    op: int = PROMPT


FORCED_CASES = [
    Forced("gfx1030-wmma-not-in-plugin", "gfx1030", "wmma", UNSUPPORTED, ("'wmma' is not in the gfx1030 plugin",)),
    Forced("gfx1100-plugin-wmma-on-gfx1030-device", "gfx1100", "wmma", UNSUPPORTED,
           ("needs the WMMA matrix cores", "gfx1030"), gfx="gfx1030"),
    Forced("gfx1100-plugin-wmma-fast-on-gfx1030-device", "gfx1100", "wmma_fast", UNSUPPORTED,
           ("needs the WMMA matrix cores",), gfx="gfx1030"),
    Forced("gfx1100-wmma", "gfx1100", "wmma", OK, ("forced",)),
    Forced("gfx1100-wmma-beats-old", "gfx1100", "wmma", OK, env={"STRATA_PROMPT_ATTN_OLD": "1"}),
    Forced("gfx1100-wmma-fp16", "gfx1100", "wmma", UNSUPPORTED, ("does not take fp16 KV",), fmt=FP16),
    Forced("gfx1100-wmma-i8", "gfx1100", "wmma_i8", OK, ("forced",)),
    Forced("gfx1100-wmma-i8-decode", "gfx1100", "wmma_i8", OK, ("forced",), op=DECODE),
    Forced("gfx1100-wmma-i8-without-switches", "gfx1100", "wmma_i8", OK,
           env={"STRATA_PROMPT_ATTN_OLD": "1", "STRATA_HIP_WMMA_I8": "0"}),
    Forced("gfx1100-wmma-i8-fp16", "gfx1100", "wmma_i8", UNSUPPORTED, ("'wmma_i8' does not take fp16 KV",), fmt=FP16),
    Forced("gfx1030-wmma-i8-not-in-plugin", "gfx1030", "wmma_i8", UNSUPPORTED,
           ("'wmma_i8' is not in the gfx1030 plugin",)),
    Forced("gfx1100-plugin-wmma-i8-on-gfx1030-device", "gfx1100", "wmma_i8", UNSUPPORTED,
           ("needs the WMMA matrix cores", "gfx1030"), gfx="gfx1030"),
    Forced("gfx1100-v2", "gfx1100", "v2", UNSUPPORTED, ("'v2' is not in the gfx1100 plugin",)),
    Forced("gfx1030-v2", "gfx1030", "v2", UNSUPPORTED, ("'v2' is not in the gfx1030 plugin",)),
    Forced("gfx1030-unknown", "gfx1030", "bogus", UNSUPPORTED, ("unknown variant 'bogus'",)),
    Forced("gfx1030-rdna2-fp16", "gfx1030", "rdna2", UNSUPPORTED, ("does not take fp16 KV",), fmt=FP16),
    Forced("gfx1030-rdna2", "gfx1030", "rdna2", OK),
    Forced("gfx1100-rdna2-wave64", "gfx1100", "rdna2", UNSUPPORTED, ("wave32",), warp=64),
    Forced("gfx1030-fp32-fp16", "gfx1030", "fp32", OK, fmt=FP16),
    Forced("gfx1030-fp32-pre75-not-in-plugin", "gfx1030", "fp32_pre75", UNSUPPORTED, ("not in the gfx1030 plugin",)),
    Forced("gfx1030-auto-is-automatic", "gfx1030", "auto", OK, env={"STRATA_PROMPT_ATTN_RDNA2": "1"}),
]


@pytest.mark.parametrize("case", FORCED_CASES, ids=[c.id for c in FORCED_CASES])
def test_forced_variant(drivers, case: Forced):
    r = which(drivers, case.plugin, op=case.op, fmt=case.fmt, variant=case.variant, env=case.env, gfx=case.gfx,
              warp=case.warp)
    assert r.status == case.status, f"{case.id}: status {r.status}, expected {case.status}: {r.why}"
    if case.status == OK:
        expect = "rdna2" if case.variant == "auto" else case.variant
        assert r.name == expect, r
    else:
        assert r.why.strip(), f"{case.id}: refused without a reason"
    for s in case.why_has:
        assert s in r.why, f"{case.id}: reason lacks {s!r}: {r.why}"


def test_not_a_hip_array_refused(drivers):
    r = which(drivers, "gfx1100", kind=1)  # STRATA_DEV_CUDA
    assert r.status == UNSUPPORTED and "HIP" in r.why, r


# --------------------------------------------------------------------------- probe (a code object runs on its gfx)

@pytest.mark.parametrize("plugin,accepted", [("gfx1100", True), ("gfx1030", False)])
def test_probe_feature_suffixed_arch(drivers, plugin, accepted):
    r = run_driver(drivers[plugin], ["probe"], "gfx1100:sramecc+:xnack-")
    assert r.name == "gfx1100", f"probe should strip the feature suffix into info.arch: {r}"
    if accepted:
        assert r.status == OK, r
    else:
        assert r.status == UNSUPPORTED, r
        assert "gfx1100" in r.why and "gfx1030 only" in r.why and r.why.endswith("needed"), r.why


# --------------------------------------------------------------------------- the Python model agrees (explain)

MODEL_ENVS = [
    {}, {"STRATA_HIP_WMMA": "1"}, {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1"},
    {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1", "STRATA_PF_SWITCH_MIN_T": "100"},
    {"STRATA_HIP_WMMA": "1", "STRATA_HIP_WMMA_I8": "1"}, {"STRATA_HIP_WMMA_I8": "1"},
    {"STRATA_PROMPT_ATTN_RDNA2": "1"}, {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "0"},
    {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "1"}, {"STRATA_PROMPT_ATTN_OLD": "1"},
    {"STRATA_ATTN_LANECELL": "1"},
]


@pytest.mark.parametrize("plugin,gfx", [("gfx1030", "gfx1030"), ("gfx1100", "gfx1100"), ("gfx1100", "gfx1201"),
                                        ("gfx1100", "gfx1103")])
def test_dispatch_model_matches_the_plugin(drivers, plugin, gfx):
    """strata_kernels.dispatch_model (what `explain --simulate` prints) names the variant the plugin's which()
    picks, for every switch set, operation and format."""
    from strata_kernels import dispatch_model
    variants = list(targets.all_targets()[plugin].variants)
    mismatches = []
    for env in MODEL_ENVS:
        for op_name, op in (("prompt", PROMPT), ("decode", DECODE)):
            for code, fmt in enumerate(dispatch_model.FORMATS):
                got = which(drivers, plugin, op=op, fmt=code, env=env, gfx=gfx, n_q=64)
                assert got.status == OK, got
                want, why = dispatch_model.choose("hip", gfx, op_name, fmt, variants, env=env, n_q=64)
                if got.name != want:
                    mismatches.append(f"{env} {op_name} {fmt}: plugin {got.name} ({got.why}); model {want} ({why})")
    assert not mismatches, "\n".join(mismatches)
