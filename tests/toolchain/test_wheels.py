"""Wheels as users get them (ARCHITECTURE §9): `pip wheel .` and `strata-kernels wheel --family`, their tags and
contents, byte-identical rebuilds, the size budget, and an install into a fresh virtual environment with
`--no-index` where `strata-kernels explain` lists the plugin wheel's targets until it is uninstalled."""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from strata_kernels import __version__, targets, toolchains, wheel

pytestmark = pytest.mark.toolchain

ROOT = Path(__file__).resolve().parents[2]

# Size budgets (README, "Wheels"; enforced by the wheel command itself, checked again here)
FAMILY_BUDGET_MB, TARGET_BUDGET_MB = wheel.FAMILY_BUDGET_MB, wheel.TARGET_BUDGET_MB


def _need_nvcc13():
    tc = toolchains.nvcc()
    if not tc.available or not (tc.version or "").startswith("13."):
        pytest.skip(f"the cuda13 family needs a CUDA 13 nvcc: {tc.reason or tc.version}")


@contextlib.contextmanager
def _first_geometry_tables(tmp: Path):
    """The tables with each CUDA target at its first geometry only, (256, 12), through STRATA_KERNELS_DATA.

    The wheel tests check packaging (contents, tags, reproducibility, the budget refusal, an install); compiling the
    family at all 8 prebuilt geometries would take ~9 targets x 8 x 22 CPU s, a quarter of an hour on the 2-core CI
    machine. The prebuilt geometries are compiled by test_cuda_compile.py (one target per feature set), and the
    shipped family's size budget is enforced by `strata-kernels wheel` itself in every CI matrix job."""
    src = targets.data_root()
    data = tmp / "first-geometry-data"
    if not data.exists():
        (data / "backends").mkdir(parents=True)
        (data / "templates").symlink_to(src / "templates")
        for table in (src / "backends").glob("*.toml"):
            text = table.read_text()
            if table.name == "cuda.toml":
                text, n = re.subn(r"(?ms)^geometries = \[\n.*?^\]\n",
                                  "geometries = [{ head_dim = 256, group = 12 }]\n", text)
                assert n == 1, "backends/cuda.toml: expected one multi-line [defaults] geometries list"
            (data / "backends" / table.name).write_text(text)
    old = os.environ.get("STRATA_KERNELS_DATA")
    os.environ["STRATA_KERNELS_DATA"] = str(data)
    targets.all_targets.cache_clear()
    try:
        assert {g for t in targets.all_targets().values() if t.backend.name == "cuda" for g in t.geometries} \
            == {targets.Geometry(256, 12)}
        yield
    finally:
        if old is None:
            os.environ.pop("STRATA_KERNELS_DATA", None)
        else:
            os.environ["STRATA_KERNELS_DATA"] = old
        targets.all_targets.cache_clear()


def _wheel(family: str, out: Path, build_dir: Path, targets: str | None = None) -> wheel.WheelResult:
    lines: list[str] = []
    with _first_geometry_tables(build_dir.parent):
        res = wheel.build_family_wheel(family, out, targets=targets, build_dir=build_dir, jobs=os.cpu_count(),
                                       log=lines.append)
    assert res.wheel is not None, "\n".join(lines[-20:])
    return res


@pytest.fixture(scope="module")
def cuda13_build_dir(tmp_path_factory) -> Path:
    """The cuda13 family's build directory: later builds of a subset there compile nothing again."""
    return tmp_path_factory.mktemp("cuda13-build")


@pytest.fixture(scope="module")
def cuda13_family(tmp_path_factory, cuda13_build_dir):
    _need_nvcc13()
    return _wheel("cuda13", tmp_path_factory.mktemp("cuda13") / "dist", cuda13_build_dir)


def test_family_wheel_tags_contents_and_budget(cuda13_family):
    res = cuda13_family
    members = [t.name for t in wheel.family_targets("cuda13")]
    name = res.wheel.name
    assert name.startswith(f"strata_kernels_cuda13-{__version__}-py3-none-manylinux_2_") and name.endswith("_x86_64.whl")
    with zipfile.ZipFile(res.wheel) as z:
        files = set(z.namelist())
        di = f"strata_kernels_cuda13-{__version__}.dist-info"
        meta = z.read(f"{di}/METADATA").decode()
        assert "Name: strata-kernels-cuda13" in meta and f"Requires-Dist: strata-kernels=={__version__}" in meta
        assert z.read(f"{di}/entry_points.txt").decode() == \
            "[strata_kernels.plugins]\ncuda13 = strata_kernels_cuda13\n"
        assert f"Tag: py3-none-{name.split('-py3-none-')[1][:-4]}" in z.read(f"{di}/WHEEL").decode()
        for t in members:
            assert f"strata_kernels_cuda13/libstrata_{t}.so" in files
            m = json.loads(z.read(f"strata_kernels_cuda13/manifests/{t}.json"))
            assert m["target"] == t and m["families"] and "--compress-mode=size" in m["flags"]
        report = json.loads(z.read("strata_kernels_cuda13/size-report.json"))
    assert [r["target"] for r in report["targets"]] == members
    assert json.loads(res.report.read_text())["wheel_bytes"] == res.wheel.stat().st_size
    for r in report["targets"]:
        assert set(r["needed"]) <= {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libdl.so.2",
                                    "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}, r  # no libcudart
        assert r["device_code_bytes"] > 0
        assert r["plugin_bytes"] / 1e6 <= TARGET_BUDGET_MB["cuda"], r
    assert report["plugin_bytes_total"] / 1e6 <= FAMILY_BUDGET_MB["cuda13"], report["plugin_bytes_total"]
    # sm_120 carries the compute_120 PTX, so later GPUs can JIT it; sm_80 the portable variants' compute_80 PTX,
    # for a major without SASS below 12 (ARCHITECTURE §6); the other targets carry SASS only
    with zipfile.ZipFile(res.wheel) as z:
        ptx = {t: json.loads(z.read(f"strata_kernels_cuda13/manifests/{t}.json"))["ptx"] for t in members}
    assert ptx == {t: {"sm_80": ["compute_80"], "sm_120": ["compute_120"]}.get(t, []) for t in members}


def _auditwheel_agrees(whl: Path) -> None:
    aw = shutil.which("auditwheel") or (Path(sys.executable).parent / "auditwheel")
    if not Path(aw).is_file():
        pytest.skip("auditwheel is not installed (pip install auditwheel)")
    p = subprocess.run([str(aw), "show", str(whl)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    tag = whl.name[:-4].split("-")[-1]
    assert tag.startswith("manylinux_2_")
    assert f'consistent with the following platform tag: "{tag}"' in " ".join(p.stdout.split()), p.stdout


def test_auditwheel_agrees_with_the_tag(cuda13_family):
    _auditwheel_agrees(cuda13_family.wheel)


def test_family_wheel_rebuild_is_byte_identical(tmp_path):
    _need_nvcc13()
    build = tmp_path / "build"
    first = _wheel("cuda13", tmp_path / "a", build, targets="sm_89")
    shutil.rmtree(build)  # a clean rebuild, not a no-op
    second = _wheel("cuda13", tmp_path / "b", build, targets="sm_89")
    assert first.wheel.name == second.wheel.name
    assert first.wheel.read_bytes() == second.wheel.read_bytes()


def test_a_family_past_its_budget_is_refused(tmp_path, monkeypatch, cuda13_family, cuda13_build_dir):
    from strata_kernels.errors import BuildError
    monkeypatch.setitem(wheel.TARGET_BUDGET_MB, "cuda", 0.5)
    # sm_89 in the family's build directory: the refusal is under test, not the compiler (CI time)
    with pytest.raises(BuildError, match=r"over its size budget: sm_89 is 0\.\d\d MB \(budget 0\.5 MB\)"), \
            _first_geometry_tables(cuda13_build_dir.parent):
        wheel.build_family_wheel("cuda13", tmp_path / "dist", targets="sm_89", build_dir=cuda13_build_dir,
                                 log=lambda m: None)
    assert not list((tmp_path / "dist").glob("*.whl"))


def test_rocm_family_builds_loadable_plugins_only(tmp_path):
    tc = toolchains.hip_clang()
    if not tc.available:
        pytest.skip(f"HIP toolchain unavailable: {tc.reason}")
    mode, why = toolchains.hip_build_mode(tc, "gfx1030")
    if mode != "plugin":
        pytest.skip(f"no gfx1030 plugin can be built here: {why}")
    from strata_kernels.errors import BuildError
    if toolchains.hip_build_mode(tc, "gfx1100")[0] == "isa":
        with pytest.raises(BuildError, match="loadable plugins only.*--targets"):
            wheel.build_family_wheel("rocm", tmp_path / "all", build_dir=tmp_path / "b", log=lambda m: None)
    res = _wheel("rocm", tmp_path / "dist", tmp_path / "b", targets="gfx1030")
    report = json.loads(res.report.read_text())
    (row,) = report["targets"]
    assert row["target"] == "gfx1030" and row["device_code_bytes"] > 0
    assert row["plugin_bytes"] / 1e6 <= TARGET_BUDGET_MB["hip"]
    assert any(n.startswith("libamdhip64") for n in row["needed"])  # the HIP runtime comes from the ROCm install
    assert res.wheel.name.startswith(f"strata_kernels_rocm-{__version__}-py3-none-manylinux_2_")


# ------------------------------------------------------------------------------------------- the core wheel

def _core_wheel(python: str, out: Path) -> Path:
    env = dict(os.environ, STRATA_TARGETS="cpu")
    env.pop("SOURCE_DATE_EPOCH", None)
    p = subprocess.run([python, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)],
                       capture_output=True, text=True, env=env, timeout=1200)
    if p.returncode != 0 and ("No matching distribution" in p.stderr or "Could not find" in p.stderr):
        pytest.skip(f"the build requirements could not be installed (offline?): {p.stderr[-300:]}")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    (whl,) = out.glob("strata_kernels-*.whl")
    return whl


@pytest.fixture(scope="module")
def core_wheel(tmp_path_factory) -> Path:
    return _core_wheel(sys.executable, tmp_path_factory.mktemp("core"))


def test_core_wheel_tags_contents_and_reproducibility(core_wheel, tmp_path):
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    abi = "abi3" if sys.version_info >= (3, 12) else py
    assert core_wheel.name.startswith(f"strata_kernels-{__version__}-{'cp312' if abi == 'abi3' else py}-{abi}-"
                                      "manylinux_2_"), core_wheel.name
    with zipfile.ZipFile(core_wheel) as z:
        names = z.namelist()
    assert "strata_kernels/plugins/libstrata_cpu.so" in names
    assert [n for n in names if n.startswith("strata_kernels/plugins/")] == ["strata_kernels/plugins/libstrata_cpu.so"]
    assert any(n.startswith("strata_kernels/_loader") for n in names)
    assert "strata_kernels/data/backends/cuda.toml" in names
    assert any(n.startswith("strata_kernels/data/templates/cuda/") for n in names)
    _auditwheel_agrees(core_wheel)
    again = _core_wheel(sys.executable, tmp_path)
    assert again.read_bytes() == core_wheel.read_bytes(), "two `pip wheel .` runs gave different bytes"


# ------------------------------------------------------------------------------------------- a fresh venv

@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """The core wheel's dependencies as wheels, so the install below can run with --no-index."""
    d = tmp_path_factory.mktemp("wheelhouse")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(d),
                        "numpy>=1.24", "jinja2>=3.1"], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"could not fetch numpy/jinja2 wheels for the offline install: {p.stderr[-300:]}")
    return d


def test_fresh_venv_install_explain_and_uninstall(core_wheel, cuda13_family, wheelhouse, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py, exe = env_dir / "bin" / "python", env_dir / "bin" / "strata-kernels"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "PYTHON"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str) -> str:
        p = subprocess.run([*args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p.stdout

    run(str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(core_wheel.parent),
        "--find-links", str(cuda13_family.wheel.parent), "--find-links", str(wheelhouse),
        "strata-kernels", "strata-kernels-cuda13")
    run(str(py), "-m", "pip", "check")
    members = [t.name for t in wheel.family_targets("cuda13")]
    text = run(str(exe), "explain", "--simulate", "sm_89,sm_100,sm_103,sm_110,sm_121,sm_130,cpu")
    for t in members:
        assert f"libstrata_{t}.so" in text and "[entry point cuda13" in text, text
    assert "site-packages/strata_kernels_cuda13/" in text
    blocks = {b.split()[1]: b for b in text.split("\n\n")[1:] if b.strip()}
    assert "=> chosen: sm_89 by exact SASS sm_89" in blocks["sm_89"]
    for blackwell in ("sm_100", "sm_103", "sm_110"):  # the real manifests, as tests/unit checks the tables'
        assert f"=> chosen: {blackwell} by exact SASS {blackwell}" in blocks[blackwell]
    assert "=> chosen: sm_120 by same-major SASS sm_120" in blocks["sm_121"]
    assert "=> chosen: sm_120 by PTX JIT compute_120" in blocks["sm_130"]
    assert "=> chosen: cpu" in blocks["x86_64"] or "=> chosen: cpu" in text
    # the installed core computes: the CPU plugin against the FP64 reference, the smallest parity run
    out = run(str(exe), "parity", "--quick", "--cases", "1")
    assert "PASSED: 1 " in out and "FAILURES: 0" in out, out
    run(str(py), "-m", "pip", "uninstall", "-y", "-q", "strata-kernels-cuda13")
    text = run(str(exe), "explain", "--simulate", "sm_89")
    assert "libstrata_sm_89.so" not in text and "entry point cuda13" not in text
    assert "=> no plugin chosen" in text and "pip install strata-kernels-cuda13" in text


@pytest.fixture(scope="module")
def build_tools(wheelhouse) -> Path:
    """cmake, ninja and nanobind as wheels (the `build` extra), so `strata-kernels build` runs in an offline venv."""
    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheelhouse),
                        "cmake>=3.26", "ninja", "nanobind>=2.2"], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.skip(f"could not fetch cmake/ninja wheels for the offline install: {p.stderr[-300:]}")
    return wheelhouse


def test_built_plugins_stay_out_of_site_packages_and_uninstall_leaves_nothing(core_wheel, build_tools, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    py, exe = env_dir / "bin" / "python", env_dir / "bin" / "strata-kernels"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATA_", "PYTHON", "XDG_"))}
    env.update(PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}", XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), MAX_JOBS=os.environ.get("MAX_JOBS", "2"))

    def run(*args: str) -> str:
        p = subprocess.run([*args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
        assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p.stdout

    run(str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(core_wheel.parent),
        "--find-links", str(build_tools), "strata-kernels[build]")
    site = Path(run(str(py), "-c", "import strata_kernels, os; print(os.path.dirname(strata_kernels.__file__))")
                .strip())
    files = lambda: sorted(str(p.relative_to(site)) for p in site.rglob("*")  # noqa: E731
                           if p.is_file() and "__pycache__" not in p.parts)
    before = files()
    out = run(str(exe), "build", "--targets", "cpu")
    user = tmp_path / "data" / "strata-kernels" / f"plugins-{__version__}"
    assert (user / "libstrata_cpu.so").is_file() and str(user) in out, out
    assert files() == before, "`strata-kernels build` wrote into the installed package"
    text = run(str(exe), "explain")
    assert f"{user / 'libstrata_cpu.so'}" in text and "[user]" in text, text
    info = run(str(exe), "info")
    assert "strata-kernels build: asked for 'cpu'; built cpu" in info and "pip install: asked for 'cpu'" in info, info
    run(str(exe), "clean")
    assert not (tmp_path / "data" / "strata-kernels").exists() and not (tmp_path / "cache" / "strata-kernels").exists()
    run(str(py), "-m", "pip", "uninstall", "-y", "-q", "strata-kernels")
    left = [str(p) for p in site.parent.glob("strata_kernels*")]
    assert not left, f"left behind in site-packages after uninstall: {left}"
