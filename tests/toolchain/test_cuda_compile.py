"""Every CUDA target's generated sources compile to SASS with nvcc (ptxas runs: PTX alone hides errors).

Every prebuilt geometry (backends/cuda.toml) is compiled on one representative target per feature set: the templates
test features, not arch numbers, so the static checks (tile sizes, shared memory, the G and head_dim asserts) that
hold there hold on every target of the set; the representative is the one with the most variants (sm_90 carries the
test variants too). The other targets compile their first geometry, (256, 12): their own ptxas run, at a fraction of
the CI time (each geometry costs ~22 CPU s per target). sm_70 has its own test (NVRTC 12.9, every geometry).

sm_70 needs a CUDA 12.x toolkit; with CUDA 13 its plugin is skipped here (the resolver and build know the floor).
"""
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from dataclasses import replace

import pytest

from strata_kernels import codegen, targets, toolchains

TABLE = targets.all_targets()
NVCC = toolchains.nvcc()
CUDA_TARGETS = [n for n, t in TABLE.items() if t.backend.name == "cuda"]


def _representatives() -> set[str]:
    """Per feature set, the buildable target with the most variants (ties: the first in the table)."""
    best: dict[frozenset, str] = {}
    for name in CUDA_TARGETS:
        if not _buildable(name)[0]:
            continue
        key = frozenset(TABLE[name].features)
        if key not in best or len(TABLE[name].all_variants) > len(TABLE[best[key]].all_variants):
            best[key] = name
    return set(best.values())

pytestmark = pytest.mark.toolchain


def _buildable(name):
    """Whether this file's nvcc builds the target: a target the build hands to PyPI's CUDA 12.9 toolchain instead
    (sm_70 beside CUDA 13) is checked by tests/toolchain/test_cuda12_family.py and test_nvrtc_sm70.py."""
    tc = toolchains.for_target(TABLE[name])
    if tc.available and tc.name != NVCC.name:
        return False, f"built by the {tc.name} toolchain here, not nvcc (tests/toolchain/test_cuda12_family.py)"
    return tc.available, tc.reason


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Render every buildable CUDA target once and compile all sources in parallel: {(target, file): result}.

    Targets with the same features render the same kernel source (only the first line, which names the target,
    differs), so each distinct source is compiled once with one -gencode per target that renders it: nvcc then runs
    the host side (cudafe++, the host compiler: about half of a one-arch compile) once, and cicc and ptxas per arch.
    The SASS and spill checks below still read each target's own ptxas lines."""
    if not NVCC.available:
        pytest.skip(f"nvcc not available: {NVCC.reason}")
    root = tmp_path_factory.mktemp("cuda")
    groups: dict[tuple[str, str], list] = {}
    every_geometry = _representatives()
    for name in CUDA_TARGETS:
        ok, _ = _buildable(name)
        if not ok:
            continue
        t = TABLE[name] if name in every_geometry else replace(TABLE[name], geometries=TABLE[name].geometries[:1])
        sel = targets.Selection(t, t.ptx)
        r = codegen.render_target(sel, root, toolchain=NVCC.as_dict())
        codegen.copy_abi_header(root)
        for src in r.sources:
            body = src.read_text().split("\n", 1)[1]
            groups.setdefault((src.name, body), []).append((name, src))

    def compile_group(members):
        gencode = []
        for name, _ in members:
            arch, sass = TABLE[name].arch, TABLE[name].sass_arch  # sass: '90a' where the table gives wgmma
            gencode.append(f"-gencode=arch=compute_{sass},code=sm_{sass}")
            if TABLE[name].ptx:
                gencode.append(f"-gencode=arch=compute_{arch},code=compute_{arch}")
        src = members[0][1]
        cmd = [NVCC.path, "-std=c++17", "-O3", "--fmad=false", "-Xptxas", "-v", *gencode,
               f"-I{root / 'include'}", "-Xcompiler", "-fPIC", "-c", str(src), "-o", str(src) + ".o"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        return members, p

    # the largest groups first, so the last job to finish is a short one
    jobs = sorted(groups.values(), key=len, reverse=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        return {(name, src.name): (p, "__global__" in src.read_text())
                for members, p in ex.map(compile_group, jobs) for name, src in members}


def _spill_stores(ptxas_log: str) -> dict[str, list[int]]:
    """ptxas -v spill stores per arch: nvcc runs ptxas one arch after another, so a line belongs to the arch that
    the last 'Compiling entry function ... for sm_XY' line named."""
    out: dict[str, list[int]] = {}
    arch = None
    for line in ptxas_log.splitlines():
        if m := re.search(r"for 'sm_(\w+)'", line):
            arch = m.group(1)
        if (m := re.search(r"(\d+) bytes spill stores", line)) and arch:
            out.setdefault(arch, []).append(int(m.group(1)))
    return out


@pytest.mark.parametrize("name", CUDA_TARGETS)
def test_cuda_target_compiles_to_sass(compiled, name):
    ok, reason = _buildable(name)
    if not ok:
        pytest.skip(f"{name}: {reason}")
    results = {f: r for (t, f), r in compiled.items() if t == name}
    assert results, f"nothing was compiled for {name}"
    arch = TABLE[name].sass_arch
    for fname, (p, has_kernel) in sorted(results.items()):
        assert p.returncode == 0, f"{name}/{fname} failed:\n{p.stderr[-3000:]}"
        if fname.startswith("plugin") or not has_kernel:
            continue  # (an entry that only refuses, e.g. gpair outside (256, 12), has no device code)
        # ptxas ran for the real arch: SASS, not just PTX.
        entries = re.findall(rf"Compiling entry function '([^']+)' for 'sm_{arch}'", p.stderr)
        assert entries, f"{name}/{fname}: ptxas produced no sm_{arch} code:\n{p.stderr[-2000:]}"
        # v1 trades a few spilled bytes for 4 blocks per SM (measured faster on the H200; 72 bytes at (128, 5..7),
        # 32 at (256, 12)); imma spills a couple of loop-invariant addresses; grouped up to 20 bytes on the mma.sync
        # targets (sm_80/sm_100/sm_120; a K-scale array held across the stores made it 148, and its Q4_0 form 160 and
        # 152 before its p·V took one block at a time and re-read p: this check caught all three) except K8V4's 84-88
        # on sm_100/sm_120 (loop-invariant addresses), and at most 12 on sm_90a. More than 128 bytes is a regression worth a look.
        spills = _spill_stores(p.stderr).get(arch, [])
        assert max(spills, default=0) <= 128, f"{name}/{fname}: register spills of {max(spills)} bytes"


def test_every_prebuilt_geometry_compiles_on_a_target_of_each_feature_set(compiled):
    """The fixture compiled every (variant, geometry) of the tables on the representatives; none is missing."""
    reps = _representatives()
    if not reps:
        pytest.skip("no CUDA target is buildable here")
    for name in reps:
        t = TABLE[name]
        want = {f"{v}_{g.head_dim}_{g.group}.cu" for v in t.all_variants for g in t.geometries}
        have = {f for (n, f), (p, _) in compiled.items() if n == name and p.returncode == 0}
        assert want <= have, f"{name}: not compiled: {sorted(want - have)}"


def test_sm70_needs_a_cuda12_toolkit():
    tc = toolchains.for_target(TABLE["sm_70"])
    if NVCC.available and NVCC.version and int(NVCC.version.split(".")[0]) >= 13:
        # CUDA 13's nvcc cannot build Volta: PyPI's CUDA 12.9 toolchain does where it is installed, else the reason
        # names what is missing.
        if tc.available:
            assert tc.name == "cuda12-driver" and tc.version.startswith("12."), tc
        else:
            assert "12.9" in tc.reason and "Volta" in tc.reason, tc.reason
