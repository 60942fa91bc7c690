"""Compile checks for the SYCL target (``backends/sycl.toml``), at three depths, each skipped with its reason when its
tools are absent:

1. **Headers.** Every rendered source is checked against the SYCL 2020 headers of the ``intel-sycl-rt`` wheel (or a
   oneAPI install) with each host compiler found (clang++, g++) in syntax-only mode. The kernel lambdas are
   instantiated with their templates, so their bodies are type-checked too; device-only rules are not.
2. **Host link.** The sources are compiled to objects and linked into a plugin against ``libsycl.so`` with
   ``--no-undefined``: every declaration has its definition, and the plugin exports its entry symbol only.
3. **Device compile and run.** No DPC++ compiler is installable here, but the wheel carries the SYCL runtime
   compiler (``libsycl-jit.so``, the ``kernel_compiler`` extension) and ``intel-opencl-rt`` an OpenCL CPU device. The
   sources are built in their ``STRATA_SYCL_RTC`` form — the same kernel bodies as free-function kernels, compiled at
   run time by DPC++'s device front end to SPIR-V and then for the CPU — into a plugin that a small driver calls
   through the ABI on USM buffers: all four KV formats, holes, width 0, the steps form, out-of-range ids / pages /
   widths (error flag), batching through a small caller scratch, the plugin's own queue and workspace, determinism,
   forced variants. Results are checked against the FP64 oracle.

   The OpenCL CPU device's native exp is coarse (~1e-4 relative), so the accuracy cases build with
   ``-DSTRATA_SYCL_PRECISE_EXP`` (``sycl::exp``) and are held to the CPU target's bound (QSA_SPEC §6.5 item 7); one
   case runs the plugin's own native exp with a loose bound.

Tools: ``pip install intel-sycl-rt intel-opencl-rt``; ``apt-get install clang-19`` (or any g++ >= 9).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from strata_kernels import codegen, reference, targets, testing, toolchains
from strata_kernels.toolchains import SyclHeaders, find_sycl_headers, host_compilers

pytestmark = pytest.mark.toolchain

SYCL_TARGETS = targets.load_table(targets.backends_dir() / "sycl.toml")
PLUGIN_SOURCE = "plugin"  # the plugin entry's stem (codegen.render_target)
INT64_MAX = 2**63 - 1


def rendered_source_names(t: targets.Target, geometries: tuple[targets.Geometry, ...] | None = None) -> list[str]:
    ext = t.backend.source_ext
    pairs = t.geometries if geometries is None else geometries
    return [f"{v}_{g.head_dim}_{g.group}{ext}" for v in t.all_variants for g in pairs] + [PLUGIN_SOURCE + ext]


# ------------------------------------------------------------------------------- toolchain discovery
# The finders are the build's own (toolchains: the header-check mode of `build --targets sycl` uses them too).

def compiler_flags(kind: str, sycl: SyclHeaders, include: Path) -> list[str]:
    """Host-compiling SYCL sources without -fsycl (toolchains.sycl_host_flags), with the ABI header's directory."""
    return toolchains.sycl_host_flags(kind, sycl) + ["-I", str(include)]


# ------------------------------------------------------------------------------------------------ fixtures

@dataclass
class Result:
    ok: bool
    cmd: list[str]
    log: str
    seconds: float


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 600) -> Result:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        ok, log = p.returncode == 0, p.stdout + p.stderr
        if not ok:
            log += f"\n(exit status {p.returncode})"
    except subprocess.TimeoutExpired:
        ok, log = False, f"timed out after {timeout} s"
    return Result(ok, cmd, log, time.perf_counter() - t0)


def _failure(what: str, r: Result, lines: int = 60) -> str:
    errors = [ln for ln in r.log.splitlines() if "error" in ln.lower()][:20]
    tail = "\n".join(r.log.splitlines()[-lines:])
    head = "\n".join(errors)
    return f"{what} failed:\n  {' '.join(r.cmd)}\n--- errors ---\n{head}\n--- output tail ---\n{tail}"


@pytest.fixture(scope="module")
def sycl() -> SyclHeaders:
    tc, why = find_sycl_headers()
    if tc is None:
        pytest.skip(f"SYCL compile checks need the SYCL headers: {why}")
    return tc


@pytest.fixture(scope="module")
def compilers() -> tuple[tuple[str, str], ...]:
    found = host_compilers()
    if not found:
        pytest.skip("SYCL compile checks need a host C++ compiler (apt-get install clang-19, or g++)")
    return found


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> Path:
    """The SYCL targets rendered once: <gen>/<target>/*.cpp and <gen>/include/strata_plugin.h."""
    out = tmp_path_factory.mktemp("gensycl")
    codegen.copy_abi_header(out)
    for t in SYCL_TARGETS:
        r = codegen.render_target(targets.Selection(t, False), out)
        names = [p.name for p in r.sources]
        assert names == rendered_source_names(t), f"codegen rendered {names}; update rendered_source_names"
    return out


# Every source against the headers with clang; with gcc the first pair's and the plugin entry only: what the two
# compilers read differently does not depend on the (head_dim, G) pair, and each check is ~2.5 s, run one at a time.
HEADER_CASES = [(kind, t.name, s) for t in SYCL_TARGETS for kind, pairs in (("clang", t.geometries),
                                                                            ("gcc", t.geometries[:1]))
                for s in rendered_source_names(t, pairs)]


# ------------------------------------------------------------------------------- 1. syntax against the headers

@pytest.mark.parametrize("kind, target_name, source", HEADER_CASES, ids=[f"{t}-{s}-{k}" for k, t, s in HEADER_CASES])
def test_sources_compile_against_sycl_headers(kind, target_name, source, sycl, compilers, gen, record_property):
    cxx = dict(compilers).get(kind)
    if cxx is None:
        pytest.skip(f"no {kind} host compiler here (have {', '.join(k for k, _ in compilers)})")
    src = gen / target_name / source
    r = _run([cxx, *compiler_flags(kind, sycl, gen / "include"), "-fsyntax-only", str(src)], gen)
    record_property("seconds", round(r.seconds, 2))
    assert r.ok, _failure(f"{source} against the SYCL headers of {sycl.origin} ({kind})", r)


# ------------------------------------------------------------------------------- 2. host objects link into a plugin

@pytest.mark.parametrize("target_name", [t.name for t in SYCL_TARGETS])
def test_host_objects_link_against_libsycl(target_name, sycl, compilers, gen, tmp_path):
    if sycl.lib is None:
        pytest.skip(f"no libsycl.so beside the headers of {sycl.origin}")
    kind, cxx = compilers[0]
    t = next(t for t in SYCL_TARGETS if t.name == target_name)
    flags = compiler_flags(kind, sycl, gen / "include") + ["-O0", "-fPIC", "-fvisibility=hidden", "-c"]
    objs = []
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        jobs = []
        for s in rendered_source_names(t):
            obj = tmp_path / (Path(s).stem + ".o")
            objs.append(obj)
            jobs.append((s, pool.submit(_run, [cxx, *flags, str(gen / target_name / s), "-o", str(obj)], tmp_path)))
        for s, j in jobs:
            r = j.result()
            assert r.ok, _failure(f"host compile of {s}", r)
    so = tmp_path / f"libstrata_{target_name}.so"
    r = _run([cxx, "-shared", "-o", str(so), *map(str, objs), "-Wl,--no-undefined", f"-L{sycl.lib}", "-lsycl"],
             tmp_path)
    assert r.ok, _failure("linking the plugin against libsycl", r)
    nm = shutil.which("nm")
    if nm:
        syms = _run([nm, "-D", "--defined-only", str(so)], tmp_path).log
        ours = sorted(set(re.findall(r"\b(strata\w*)", syms)))
        assert ours == ["strata_plugin_entry"], f"the plugin exports {ours}; only strata_plugin_entry should be"
    assert b"STRATA_MANIFEST_BEGIN" in so.read_bytes()


# ------------------------------------------------------------------------------- 3. device compile and run (RTC)

DRIVER = r"""
// Calls a plugin built in STRATA_SYCL_RTC form through its C ABI, one case directory after another, on USM shared
// buffers of SYCL device 0. Writes out.bin, bad.txt and status.txt into each case directory.
#include <sycl/sycl.hpp>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include "strata_plugin.h"

static std::vector<char> slurp(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { std::printf("dlopen failed: %s\n", dlerror()); return 3; }
    auto entry = reinterpret_cast<strata_plugin_entry_fn>(dlsym(h, STRATA_ENTRY_SYMBOL));
    if (!entry) { std::printf("no entry symbol\n"); return 3; }
    const strata_plugin_api *api = entry();
    strata_device dev{STRATA_DEV_SYCL, 0};
    strata_device_info info;
    static char err[16384];
    int st = api->probe(&dev, &info, err, sizeof err);
    std::printf("probe %d %s | %s | %s\n", st, st ? err : "", info.name, info.arch);
    if (st) return 4;
    sycl::queue q(sycl::device::get_devices()[0], sycl::property::queue::in_order());
    for (int c = 2; c < argc; ++c) {
        const std::string dir = argv[c];
        long long m[12];
        { std::ifstream f(dir + "/meta.txt"); for (auto &x : m) f >> x; }
        std::string variant;
        { std::ifstream f(dir + "/variant.txt"); f >> variant; }
        std::vector<void *> owned;
        auto upload = [&](const char *name) -> void * {
            std::vector<char> b = slurp(dir + "/" + name);
            if (b.empty()) return nullptr;
            void *p = sycl::malloc_shared(b.size(), q);
            std::memcpy(p, b.data(), b.size());
            owned.push_back(p);
            return p;
        };
        strata_attn_args a;
        std::memset(&a, 0, sizeof a);
        a.struct_size = sizeof a;
        a.device = dev;
        a.format = int32_t(m[0]);
        a.n_q = m[1]; a.cap = m[2]; a.n_pages = m[3]; a.n_phys_pages = m[4];
        a.n_head_kv = int32_t(m[5]); a.head_dim = int32_t(m[6]); a.group = int32_t(m[7]);
        a.width_stride = m[8];
        a.q = static_cast<const float *>(upload("q.bin"));
        a.ids = static_cast<const int32_t *>(upload("ids.bin"));
        const int32_t *width = static_cast<const int32_t *>(upload("width.bin"));
        a.width = a.width_stride == 4 ? width + 3 : width;
        a.page_table = static_cast<const int32_t *>(upload("page_table.bin"));
        a.k = upload("k.bin"); a.v = upload("v.bin");
        a.k_scale = upload("k_scale.bin"); a.v_scale = upload("v_scale.bin");
        const size_t n_out = size_t(a.n_q) * a.n_head_kv * a.group * a.head_dim;
        float *out = sycl::malloc_shared<float>(n_out, q);
        for (size_t i = 0; i < n_out; ++i) out[i] = 12345.f;  // every element must be written
        a.out = out;
        int64_t *bad = sycl::malloc_shared<int64_t>(2, q);
        bad[0] = bad[1] = INT64_MAX;
        a.bad = bad;
        if (m[9] > 0) {
            a.scratch = sycl::malloc_device<float>(size_t(m[9]), q);
            a.scratch_floats = m[9];
        }
        a.stream = m[11] ? nullptr : &q;
        const int op = m[10] ? STRATA_OP_PROMPT : STRATA_OP_DECODE;
        const char *v = variant.empty() ? nullptr : variant.c_str();
        char name[32] = {0}, why[1024] = {0};
        int wst = api->which(&a, op, v, name, sizeof name, why, sizeof why);
        err[0] = 0;
        st = (op == STRATA_OP_PROMPT ? api->prompt_attn : api->decode_attn)(&a, v, err, sizeof err);
        if (st == STRATA_OK) {
            try { q.wait_and_throw(); } catch (const std::exception &e) { st = 99; std::snprintf(err, sizeof err, "%s", e.what()); }
        }
        std::ofstream(dir + "/status.txt") << st << "\n" << wst << "\n" << name << "\n" << why << "\n" << err << "\n";
        if (st == STRATA_OK)
            std::ofstream(dir + "/out.bin", std::ios::binary).write(reinterpret_cast<char *>(out), n_out * sizeof(float));
        std::ofstream(dir + "/bad.txt") << bad[0] << " " << bad[1] << "\n";
        std::printf("%s: %d %s\n", dir.c_str(), st, err);
        for (void *p : owned) sycl::free(p, q);
        sycl::free(out, q);
        sycl::free(bad, q);
        if (a.scratch) sycl::free(a.scratch, q);
    }
    return 0;
}
"""


@dataclass
class RtcCase:
    """One call: the case data, the expected output (FP64) and error flags, and how the call is made."""
    name: str
    case: testing.Case
    ref_case: testing.Case | None = None     # the data the oracle sees (bad cells already masked), else `case`
    op: str = "decode"
    variant: str = ""
    null_stream: bool = False
    scratch_queries: int = 0                 # caller scratch for this many queries (0 = none: plugin workspace)
    expect_status: int = 0
    expect_bad: tuple[int, int] = (INT64_MAX, INT64_MAX)

    def write(self, d: Path) -> None:
        c, kv = self.case, self.case.kv
        d.mkdir(parents=True, exist_ok=True)
        arrays = {"q": c.q, "ids": c.ids, "width": c.width, "page_table": kv.page_table, "k": kv.k, "v": kv.v,
                  "k_scale": kv.k_scale, "v_scale": kv.v_scale}
        for name, arr in arrays.items():
            if arr is not None:
                np.ascontiguousarray(arr).tofile(d / f"{name}.bin")
        n_chunks = -(-c.cap // 64)
        stride = n_chunks * c.n_head * (kv.head_dim + 2) + 64
        meta = [kv.format_code, c.n_q, c.cap, kv.n_pages, kv.n_phys_pages, kv.n_head_kv, kv.head_dim, c.group,
                4 if c.width.ndim == 2 else 1, self.scratch_queries * stride, int(self.op == "prompt"),
                int(self.null_stream)]
        (d / "meta.txt").write_text(" ".join(map(str, meta)) + "\n")
        (d / "variant.txt").write_text(self.variant + "\n")


def _bad_inputs_case(g, tag: str) -> RtcCase:
    """int8 with holes: an out-of-range id, a page-table entry past the pools, a width past cap."""
    c = testing.make_case("int8", 300, 5, holes=True, head_dim=g.head_dim, group=g.group)
    ids, pt, width = c.ids.copy(), c.kv.page_table.copy(), c.width.copy()
    hole_page = int(np.flatnonzero(pt < 0)[0])
    ref_ids, ref_pt, ref_width = ids.copy(), pt.copy(), width.copy()
    ids[1, 7] = 10**6                                    # id out of range (flagged, masked)
    ref_ids[1, 7] = 4 * hole_page                        # the oracle sees a masked cell there
    used = ids[0, : width[0]] // 4
    bad_page = int(next(p for p in used if pt[p] >= 0))
    pt[bad_page] = c.kv.n_phys_pages + 3                 # physical page past the pools (flagged, masked)
    ref_pt[bad_page] = -1
    width[3] = c.cap + 1                                 # width past cap (flagged, query is empty)
    ref_width[3] = 0
    first = []
    for qi in range(c.n_q):
        for j in range(int(min(width[qi], c.cap)) if width[qi] <= c.cap else 0):
            cell = int(ids[qi, j])
            if cell < 0 or cell >= 4 * c.kv.n_pages or pt[cell // 4] >= c.kv.n_phys_pages or pt[cell // 4] < -1:
                first.append(qi * c.cap + j)
    kv = dataclasses.replace(c.kv, page_table=pt)
    ref_kv = dataclasses.replace(c.kv, page_table=ref_pt)
    bad_case = testing.Case(c.q, kv, ids, width, c.fmt, c.ctx, c.n_q, c.seed, c.name)
    ref_case = testing.Case(c.q, ref_kv, ref_ids, ref_width, c.fmt, c.ctx, c.n_q, c.seed, c.name)
    return RtcCase(tag + "int8 bad ids, pages and width", bad_case, ref_case, expect_bad=(min(first), 3))


def rtc_cases(t: targets.Target) -> list[RtcCase]:
    """The cases for every geometry of ``t``; the first two are the same call (the determinism check)."""
    cases = []
    for g in t.geometries:
        mk = lambda *a, **k: testing.make_case(*a, head_dim=g.head_dim, group=g.group, **k)  # noqa: E731
        tag = f"HD {g.head_dim} G {g.group}: "
        fp16 = mk("fp16", 300, 6)
        cases += [
            RtcCase(tag + "fp16 ctx 300, 6 queries, caller scratch of 4 queries", fp16, scratch_queries=4),
            RtcCase(tag + "fp16 ctx 300, 6 queries, again (determinism)", fp16, scratch_queries=4),
            RtcCase(tag + "int8 ctx 2100, 4 queries, holes: identity-to-sparse edge", mk("int8", 2100, 4, holes=True)),
            RtcCase(tag + "q4_0 ctx 200, 5 queries, width-0, prompt op", mk("q4_0", 200, 5, width0=True),
                    op="prompt"),
            RtcCase(tag + "k8v4 ctx 200, 5 queries, holes, width-0, steps, NULL stream",
                    mk("k8v4", 200, 5, holes=True, width0=True, steps=True), null_stream=True),
            _bad_inputs_case(g, tag),
            RtcCase(tag + "int8 forced fp32", mk("int8", 100, 2), variant="fp32"),
            RtcCase(tag + "int8 forced v2 (not in the plugin)", mk("int8", 100, 2), variant="v2", expect_status=3),
        ]
    return cases


@dataclass
class RtcRun:
    cases: list[RtcCase]
    dirs: list[Path]
    result: Result


@pytest.fixture(scope="module")
def rtc(sycl, compilers, gen, tmp_path_factory):
    """Build each SYCL target in STRATA_SYCL_RTC form, run its cases on the OpenCL CPU device: {target: runs}."""
    if sycl.lib is None or sycl.jit is None:
        pytest.skip(f"the device compile needs libsycl.so and libsycl-jit.so beside the headers of {sycl.origin} "
                    "(pip install intel-sycl-rt)")
    ocl_file = toolchains.installed_wheel_file("intel-opencl-rt", "libintelocl.so")
    ocl = ocl_file[0] if ocl_file else None
    selector = os.environ.get("ONEAPI_DEVICE_SELECTOR", "opencl:cpu")
    if ocl is None and "ONEAPI_DEVICE_SELECTOR" not in os.environ:
        pytest.skip("the device compile needs a SYCL device: pip install intel-opencl-rt (an OpenCL CPU device), "
                    "or set ONEAPI_DEVICE_SELECTOR to a device of this machine")
    kind, cxx = compilers[0]
    work = tmp_path_factory.mktemp("sycl_rtc")
    env = {**os.environ, "ONEAPI_DEVICE_SELECTOR": selector,
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [str(sycl.lib), os.environ.get("LD_LIBRARY_PATH")]))}
    if ocl is not None:  # the wheel's own ICD file names a placeholder path; point the ICD loader at the library
        icd = work / "vendors"
        icd.mkdir()
        (icd / "intel-cpu.icd").write_text(f"{ocl}\n")
        env["OCL_ICD_VENDORS"] = str(icd)
        env["LD_LIBRARY_PATH"] += os.pathsep + str(ocl.parent)
    flags = compiler_flags(kind, sycl, gen / "include") + ["-O1", "-fPIC", "-fvisibility=hidden"]
    driver_src = work / "driver.cpp"
    driver_src.write_text(DRIVER)
    driver = work / "driver"
    r = _run([cxx, *flags, str(driver_src), "-o", str(driver), f"-L{sycl.lib}", "-lsycl", "-ldl",
              f"-Wl,-rpath,{sycl.lib}"], work)
    assert r.ok, _failure("building the test driver", r)
    runs: dict[str, dict[str, RtcRun]] = {}
    for t in SYCL_TARGETS:
        objs = [work / f"{t.name}-{Path(s).stem}.o" for s in rendered_source_names(t)]
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            jobs = [(s, pool.submit(_run, [cxx, *flags, "-DSTRATA_SYCL_RTC", "-c", str(gen / t.name / s), "-o",
                                           str(obj)], work)) for s, obj in zip(rendered_source_names(t), objs)]
            for s, j in jobs:
                r = j.result()
                assert r.ok, _failure(f"host compile of {s} (STRATA_SYCL_RTC)", r)
        so = work / f"libstrata_{t.name}_rtc.so"
        r = _run([cxx, "-shared", "-o", str(so), *map(str, objs), "-Wl,--no-undefined", f"-L{sycl.lib}", "-lsycl",
                  f"-Wl,-rpath,{sycl.lib}"], work)
        assert r.ok, _failure("linking the STRATA_SYCL_RTC plugin", r)
        runs[t.name] = {}
        cases = rtc_cases(t)
        for mode, options, chosen in (("precise", "-DSTRATA_SYCL_PRECISE_EXP", cases),
                                      ("native", "", cases[:1])):
            dirs = []
            for i, c in enumerate(chosen):
                d = work / t.name / mode / f"case{i}"
                c.write(d)
                dirs.append(d)
            run_env = {**env, "STRATA_SYCL_RTC_DIR": str(gen / t.name), "STRATA_SYCL_RTC_OPTIONS": options}
            r = _run([str(driver), str(so), *map(str, dirs)], work, env=run_env, timeout=900)
            runs[t.name][mode] = RtcRun(chosen, dirs, r)
    return runs


def _status(d: Path) -> tuple[int, int, str, str, str]:
    lines = (d / "status.txt").read_text().split("\n")
    return int(lines[0]), int(lines[1]), lines[2], lines[3], "\n".join(lines[4:]).strip()


def _check_case(c: RtcCase, d: Path, bound: float) -> None:
    assert (d / "status.txt").is_file(), f"{c.name}: the driver did not reach this case"
    st, wst, name, why, err = _status(d)
    if c.expect_status:
        assert st == c.expect_status, f"{c.name}: status {st} ({err}), expected {c.expect_status}"
        assert f"'{c.variant}'" in err, f"{c.name}: the refusal does not name the variant: {err}"
        return
    assert st == 0, f"{c.name}: the call failed with status {st}: {err}"
    assert wst == 0 and name == "fp32", f"{c.name}: which() said {wst} {name!r} ({why})"
    rc = c.ref_case or c.case
    ref = reference.qsa_attn_fp64(rc.q, rc.kv, rc.ids, rc.width)
    out = np.fromfile(d / "out.bin", dtype=np.float32).reshape(ref.shape)
    assert np.isfinite(out).all(), f"{c.name}: non-finite output (or an element never written)"
    scale = float(np.abs(ref).max())
    err_abs = float(np.abs(out - ref).max())
    assert err_abs <= bound * scale, f"{c.name}: max error {err_abs:.3g} vs FP64 > {bound:g} of scale {scale:.3g}"
    empty = reference.count_valid(rc.kv, rc.ids, rc.width) == 0
    assert (out[empty] == 0).all(), f"{c.name}: queries with no valid cell are not exactly 0"
    bad = tuple(int(x) for x in (d / "bad.txt").read_text().split())
    assert bad == c.expect_bad, f"{c.name}: error flag {bad}, expected {c.expect_bad}"


@pytest.mark.parametrize("target_name", [t.name for t in SYCL_TARGETS])
def test_kernels_compile_for_a_device_and_match_fp64(target_name, rtc):
    """The kernels, compiled by the SYCL device compiler and run on a SYCL device, agree with the FP64 oracle."""
    run = rtc[target_name]["precise"]
    assert run.result.ok, _failure("the SYCL run (device compile through sycl-jit, then the cases)", run.result)
    failures = []
    for c, d in zip(run.cases, run.dirs):
        try:
            _check_case(c, d, 1e-5)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures) + f"\n--- driver output ---\n{run.result.log[-4000:]}"
    # Same inputs, same device: identical bits (QSA_SPEC §1.4).
    a, b = (np.fromfile(d / "out.bin", dtype=np.uint32) for d in run.dirs[:2])
    assert np.array_equal(a, b), "two runs of the same case differ"


@pytest.mark.parametrize("target_name", [t.name for t in SYCL_TARGETS])
def test_native_exp_build_runs(target_name, rtc):
    """The kernels as the plugin builds them (native exp): loose bound, the OpenCL CPU's native exp is coarse."""
    run = rtc[target_name]["native"]
    assert run.result.ok, _failure("the SYCL run with the native exp", run.result)
    _check_case(run.cases[0], run.dirs[0], 1e-3)


@pytest.mark.parametrize("target_name", [t.name for t in SYCL_TARGETS])
def test_which_explains_the_sycl_choice(target_name, rtc):
    run = rtc[target_name]["precise"]
    assert run.result.ok, _failure("the SYCL run", run.result)
    prompt = next(d for c, d in zip(run.cases, run.dirs) if c.op == "prompt")
    st, wst, name, why, _ = _status(prompt)
    assert (wst, name) == (0, "fp32") and "decode algorithm" in why, (wst, name, why)
