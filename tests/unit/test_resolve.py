"""The resolver against fake devices and fake plugin files (no GPU, no compiler, no plugin is loaded).

A fake plugin is a file of junk bytes with the manifest embedded between the markers, exactly as the resolver
reads a real one. Devices come from ``resolve.simulate`` or are built by hand.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import platform
import sys
import types
from pathlib import Path

import pytest

from strata_kernels import resolve, targets as targets_mod
from strata_kernels.errors import PluginError, Unsupported
from strata_kernels.resolve import Device

HOST = resolve._normalise_machine(platform.machine())


# ---------------------------------------------------------------------------------------------- helpers

def manifest_for(name: str, **over) -> dict:
    """A manifest like codegen writes for ``name`` (CUDA built with nvcc 13.0; sm_70 with 12.9)."""
    m = {"abi_version": 1, "package_version": "0.1.0", "target": name, "sass": [], "ptx": [], "gfx": [],
         "host": HOST, "families": [], "variants": ["fp32"], "dispatch_variants": ["fp32"], "test_variants": [],
         "features": [], "geometries": [{"head_dim": 256, "group": 12}], "min_driver_version": 0,
         "template_hash": "0" * 64, "flags": []}
    if name.startswith("sm_"):
        m.update(backend="cuda", arch=name[3:], sass=[name],
                 toolchain={"name": "nvcc", "version": "12.9" if name == "sm_70" else "13.0"})
    elif name.startswith("gfx"):
        m.update(backend="hip", arch=name, gfx=[name], toolchain={"name": "clang", "version": "19.1"})
    else:
        m.update(backend=name, arch=HOST, toolchain={"name": "c++", "version": "12"})
    m.update(over)
    return m


def write_plugin(directory: Path, target: str, manifest: dict | None = None, *, raw: bytes | None = None,
                 name: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or f"libstrata_{target}.so")
    body = raw if raw is not None else (
        b"STRATA_MANIFEST_BEGIN" + json.dumps(manifest or manifest_for(target)).encode() + b"STRATA_MANIFEST_END")
    path.write_bytes(b"\x7fELF\x02\x01\x01\0" + os.urandom(300) + b"\0\0" + body + b"\0" + os.urandom(200))
    return path


def plugins_in(directory: Path, source: str = "path") -> list[resolve.PluginFile]:
    return [resolve._plugin_file(p, source) for p in sorted(directory.glob("libstrata_*.so"))]


def chosen(res: resolve.Resolution) -> str | None:
    return res.chosen.plugin.target if res.chosen else None


def candidate(res: resolve.Resolution, target: str) -> resolve.Candidate:
    return next(c for c in res.candidates if c.plugin.target == target)


FULL = ["cpu", "sycl", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120",
        "gfx1030", "gfx1100", "gfx1101", "gfx1200", "gfx1201"]


def full_install(directory: Path) -> list[resolve.PluginFile]:
    for t in FULL:
        over = {"ptx": ["compute_120"]} if t == "sm_120" else {}
        write_plugin(directory, t, manifest_for(t, **over))
    return plugins_in(directory)


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """No installed plugin, entry point, override or cached probe leaks into a test."""
    empty = tmp_path / "empty_package_plugins"
    empty.mkdir()
    monkeypatch.setattr(resolve, "_package_plugin_dir", lambda: empty)
    monkeypatch.setattr(resolve, "user_plugin_dir", lambda: empty)   # `strata-kernels build` output stays out too
    monkeypatch.setattr(resolve, "_entry_points", lambda: [])
    for var in (resolve.ENV_PLUGIN_PATH, resolve.ENV_TARGET, resolve.ENV_SIMULATE_DRIVER):
        monkeypatch.delenv(var, raising=False)
    resolve.clear_cache()
    yield
    resolve.clear_cache()


@pytest.fixture
def tables(tmp_path_factory, monkeypatch):
    """The real backends/*.toml, validated against stand-in templates (the unit tests need no real ones)."""
    tdir = tmp_path_factory.mktemp("templates")
    for d in ("cpu", "cuda", "hip", "sycl", "common"):
        (tdir / d).mkdir()
        for v in targets_mod.KNOWN_VARIANTS:  # template_for() always tries '<variant>.cpp.j2'
            (tdir / d / f"{v}.cpp.j2").write_text("")
    loaded = targets_mod.load_targets(targets_mod.backends_dir(), templates=tdir)
    monkeypatch.setattr(targets_mod, "all_targets", lambda: loaded)
    return loaded


# ------------------------------------------------------------------------------- the device table

# (simulated device, the plugin a full install chooses, the score)
FULL_INSTALL_CASES = [
    ("sm_70", "sm_70", 3), ("sm_72", "sm_70", 2), ("sm_75", "sm_75", 3), ("sm_80", "sm_80", 3),
    ("sm_86", "sm_86", 3), ("sm_87", "sm_86", 2), ("sm_89", "sm_89", 3), ("sm_90", "sm_90", 3),
    ("sm_120", "sm_120", 3), ("sm_121", "sm_120", 2), ("sm_130", "sm_120", 1),
    ("gfx1030", "gfx1030", 3), ("gfx1100", "gfx1100", 3), ("gfx1101", "gfx1101", 3),
    ("gfx1200", "gfx1200", 3), ("gfx1201", "gfx1201", 3), ("gfx906", None, 0),
    ("none", None, 0), ("cpu", "cpu", 3), ("sycl", "sycl", 3),
]


@pytest.mark.parametrize("spec,expected,score", FULL_INSTALL_CASES)
def test_full_install_chooses(tmp_path, spec, expected, score):
    plugins = full_install(tmp_path / "plugins")
    devices = resolve.simulate(spec)
    if spec == "none":
        assert devices == []
        devices = resolve.simulate("cpu")  # a machine without a GPU: only the CPU, which gets the CPU plugin
        expected, score = "cpu", 3
    (res,) = resolve.resolve(devices, plugins)
    assert chosen(res) == expected
    if expected:
        assert res.chosen.accepted and res.chosen.score == score
    assert len(res.candidates) == len(FULL)
    for c in res.candidates:
        assert c.reason, f"{c.plugin.target} has no reason"
        if c.plugin.backend != res.device.kind:
            assert not c.accepted
            assert c.reason == f"backend {c.plugin.backend} plugin, device is {res.device.kind}"


def test_sm_130_runs_the_newest_ptx(tmp_path):
    (res,) = resolve.resolve(resolve.simulate("sm_130"), full_install(tmp_path))
    assert res.chosen.match == "compute_120"
    assert "JIT" in res.chosen.reason
    sm90 = candidate(res, "sm_90")
    assert not sm90.accepted and "across majors" in sm90.reason


def test_gfx906_has_no_plugin_and_says_why(tmp_path):
    (res,) = resolve.resolve(resolve.simulate("gfx906"), full_install(tmp_path))
    assert res.chosen is None
    reason = candidate(res, "gfx1030").reason
    assert "exact gfx" in reason and "gfx906" in reason


# (device, plugin chosen from {sm_80, sm_90, gfx1100}, a rejected target, words in its reason)
PARTIAL_CASES = [
    ("sm_75", None, "sm_80", "newer than the device"),
    ("sm_86", "sm_80", "sm_90", "newer than the device (sm_86)"),
    ("sm_89", "sm_80", "sm_90", "newer than the device"),
    ("sm_90", "sm_90", "gfx1100", "backend hip plugin, device is cuda"),
    ("sm_120", None, "sm_90", "SASS never runs across majors"),
    ("gfx1101", None, "gfx1100", "exact gfx"),
    ("gfx1100", "gfx1100", "sm_80", "backend cuda plugin, device is hip"),
]


@pytest.mark.parametrize("spec,expected,rejected,words", PARTIAL_CASES)
def test_partial_install(tmp_path, spec, expected, rejected, words):
    for t in ("sm_80", "sm_90", "gfx1100"):
        write_plugin(tmp_path, t)
    (res,) = resolve.resolve(resolve.simulate(spec), plugins_in(tmp_path))
    assert chosen(res) == expected
    c = candidate(res, rejected)
    assert not c.accepted and words in c.reason


def test_older_same_major_prefers_the_highest_arch(tmp_path):
    for t in ("sm_80", "sm_86"):
        write_plugin(tmp_path, t)
    (res,) = resolve.resolve(resolve.simulate("sm_89"), plugins_in(tmp_path))
    assert chosen(res) == "sm_86" and res.chosen.score == 2
    assert candidate(res, "sm_80").accepted  # acceptable, just not the best


def test_exact_sass_beats_ptx_of_a_newer_plugin(tmp_path):
    write_plugin(tmp_path, "sm_90")
    write_plugin(tmp_path, "sm_80", manifest_for("sm_80", sass=[], ptx=["compute_80"]), name="libstrata_ptx80.so")
    (res,) = resolve.resolve(resolve.simulate("sm_90"), plugins_in(tmp_path))
    assert chosen(res) == "sm_90" and res.chosen.score == 3
    assert candidate(res, "sm_80").score == 1


def test_suffixed_sass_only_on_its_exact_arch(tmp_path):
    write_plugin(tmp_path, "sm_100a", manifest_for("sm_100a", sass=["sm_100a"]))
    (res,) = resolve.resolve(resolve.simulate("sm_100"), plugins_in(tmp_path))
    assert chosen(res) == "sm_100a" and res.chosen.score == 3
    (res103,) = resolve.resolve(resolve.simulate("sm_103"), plugins_in(tmp_path))
    assert res103.chosen is None and "only on sm_100 exactly" in candidate(res103, "sm_100a").reason


def test_hip_generic_target(tmp_path):
    write_plugin(tmp_path, "gfx11_generic", manifest_for("gfx11_generic", gfx=["gfx11-generic"]))
    plugins = plugins_in(tmp_path)
    r1101, r1030 = resolve.resolve(resolve.simulate("gfx1101,gfx1030"), plugins)
    assert chosen(r1101) == "gfx11_generic" and r1101.chosen.score == 1
    assert r1030.chosen is None and "gfx11-generic" in candidate(r1030, "gfx11_generic").reason
    write_plugin(tmp_path, "gfx1101")  # an exact code object beats the generic one
    (r,) = resolve.resolve(resolve.simulate("gfx1101"), plugins_in(tmp_path))
    assert chosen(r) == "gfx1101"


def test_gfx_feature_suffixes_are_ignored(tmp_path):
    write_plugin(tmp_path, "gfx90a", manifest_for("gfx90a", gfx=["gfx90a:xnack-"]))
    (r,) = resolve.resolve(resolve.simulate("gfx90a:sramecc+:xnack-"), plugins_in(tmp_path))
    assert chosen(r) == "gfx90a"


# ----------------------------------------------------------------------------------- rejection reasons

def test_old_driver_rejects_a_cuda13_plugin_and_takes_the_cuda12_one(tmp_path, monkeypatch):
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12080")
    new = write_plugin(tmp_path / "cuda13", "sm_86")
    old = write_plugin(tmp_path / "cuda12", "sm_86", manifest_for("sm_86", toolchain={"name": "nvcc",
                                                                                       "version": "12.8"}))
    plugins = [resolve._plugin_file(new, "package"), resolve._plugin_file(old, "path")]
    (res,) = resolve.resolve(resolve.simulate("sm_86"), plugins)
    assert res.chosen.plugin.path == old
    rejected = next(c for c in res.candidates if c.plugin.path == new)
    assert not rejected.accepted
    assert "CUDA 13.0" in rejected.reason and "12.8" in rejected.reason and "driver" in rejected.reason


def test_ptx_jit_needs_a_driver_at_least_the_toolkit(tmp_path, monkeypatch):
    write_plugin(tmp_path, "sm_120", manifest_for("sm_120", ptx=["compute_120"],
                                                  toolchain={"name": "nvcc", "version": "13.1"}))
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "13.0")
    (res,) = resolve.resolve(resolve.simulate("sm_130"), plugins_in(tmp_path))
    assert res.chosen is None
    assert "JIT" in res.candidates[0].reason and "13.1" in res.candidates[0].reason
    # The same driver runs the plugin's SASS on sm_120 (minor-version compatibility within a major).
    (res120,) = resolve.resolve(resolve.simulate("sm_120"), plugins_in(tmp_path))
    assert chosen(res120) == "sm_120"
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "13010")
    (res,) = resolve.resolve(resolve.simulate("sm_130"), plugins_in(tmp_path))
    assert chosen(res) == "sm_120"


def test_min_driver_version_is_a_floor(tmp_path, monkeypatch):
    write_plugin(tmp_path, "sm_90", manifest_for("sm_90", min_driver_version=13020))
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "13000")
    (res,) = resolve.resolve(resolve.simulate("sm_90"), plugins_in(tmp_path))
    assert res.chosen is None and "min_driver_version 13020" in res.candidates[0].reason


def test_unknown_driver_is_not_checked_but_said(tmp_path):
    write_plugin(tmp_path, "sm_90")
    dev = Device("cuda", 0, "GPU", "sm_90", (9, 0), None)
    (res,) = resolve.resolve([dev], plugins_in(tmp_path))
    assert chosen(res) == "sm_90" and "driver version unknown" in res.chosen.reason


def test_wrong_abi_version(tmp_path):
    write_plugin(tmp_path, "sm_90", manifest_for("sm_90", abi_version=2))
    (res,) = resolve.resolve(resolve.simulate("sm_90"), plugins_in(tmp_path))
    assert res.chosen is None
    assert "ABI 2" in res.candidates[0].reason and f"ABI {resolve.ABI_VERSION}" in res.candidates[0].reason


@pytest.mark.parametrize("raw,words", [
    (b"STRATA_MANIFEST_BEGIN{not json STRATA_MANIFEST_END", "not valid JSON"),
    (b"no markers in here", "no STRATA_MANIFEST_BEGIN marker"),
    (b"STRATA_MANIFEST_BEGIN{\"abi_version\": 1}", "without a matching STRATA_MANIFEST_END"),
    (b"STRATA_MANIFEST_BEGIN[1, 2]STRATA_MANIFEST_END", "not an object"),
])
def test_corrupt_manifest(tmp_path, raw, words):
    write_plugin(tmp_path, "sm_90", raw=raw)
    (p,) = plugins_in(tmp_path)
    assert p.manifest is None and words in p.error
    (res,) = resolve.resolve(resolve.simulate("sm_90"), [p])
    assert res.chosen is None and words in res.candidates[0].reason


def test_empty_file_is_unreadable(tmp_path):
    (tmp_path / "libstrata_x.so").write_bytes(b"")
    (p,) = plugins_in(tmp_path)
    assert "empty" in p.error


@pytest.mark.parametrize("over,words", [
    ({"backend": "metal"}, "'backend' must be one of"),
    ({"sass": "sm_90"}, "'sass' must be a list"),
    ({"sass": ["hopper"]}, "is not an arch"),
    ({"target": ""}, "'target'"),
    ({"abi_version": "1"}, "'abi_version' must be an integer"),
])
def test_invalid_manifest_fields(tmp_path, over, words):
    write_plugin(tmp_path, "sm_90", manifest_for("sm_90", **over))
    (p,) = plugins_in(tmp_path)
    assert p.error and words in p.error
    (res,) = resolve.resolve(resolve.simulate("sm_90"), [p])
    assert res.chosen is None


def test_marker_text_elsewhere_in_the_binary_is_skipped(tmp_path):
    body = (b"STRATA_MANIFEST_BEGIN\0 a stray copy of the marker \0" +
            b"STRATA_MANIFEST_BEGIN" + json.dumps(manifest_for("sm_90")).encode() + b"STRATA_MANIFEST_END")
    write_plugin(tmp_path, "sm_90", raw=body)
    (p,) = plugins_in(tmp_path)
    assert p.error is None and p.manifest["target"] == "sm_90"


def test_wrong_host_arch_for_the_cpu_plugin(tmp_path):
    other = "riscv64" if HOST != "riscv64" else "x86_64"
    write_plugin(tmp_path, "cpu", manifest_for("cpu", host=other))
    (res,) = resolve.resolve(resolve.simulate("cpu"), plugins_in(tmp_path))
    assert res.chosen is None and f"built for a {other} host, this machine is {HOST}" in res.candidates[0].reason
    (res,) = resolve.resolve(resolve.simulate(f"cpu:{other}"), plugins_in(tmp_path))
    assert chosen(res) == "cpu"


def test_ties_go_to_the_package_before_entry_points_before_the_path(tmp_path):
    p = write_plugin(tmp_path / "p", "sm_90")
    e = write_plugin(tmp_path / "e", "sm_90")
    k = write_plugin(tmp_path / "k", "sm_90")
    plugins = [resolve._plugin_file(p, "path /x"), resolve._plugin_file(e, "entry point cuda13 (pkg)"),
               resolve._plugin_file(k, "package")]
    (res,) = resolve.resolve(resolve.simulate("sm_90"), plugins)
    assert [c.plugin.path for c in res.candidates] == [k, e, p]
    assert res.chosen.plugin.path == k


# ------------------------------------------------------------------------------------------- discovery

def test_plugin_path_discovery(tmp_path, monkeypatch):
    a = tmp_path / "a"
    b = tmp_path / "b"
    write_plugin(a, "sm_90")
    write_plugin(b, "gfx1100")
    (b / "libother.so").write_bytes(b"not a plugin")  # only libstrata_*.so files are plugins
    missing = tmp_path / "missing"
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, os.pathsep.join([str(a), str(missing), str(b)]))
    plugins, notes = resolve.discover()
    assert [p.target for p in plugins] == ["sm_90", "gfx1100"]
    assert all(p.source.startswith("path ") and p.error is None for p in plugins)
    assert any(str(missing) in n and "does not exist" in n for n in notes)
    res = resolve.resolve(resolve.simulate("sm_90,gfx1100"))
    assert [chosen(r) for r in res] == ["sm_90", "gfx1100"]


def test_package_dir_first_and_duplicates_kept_once(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    write_plugin(pkg, "cpu")
    monkeypatch.setattr(resolve, "_package_plugin_dir", lambda: pkg)
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, str(pkg))
    plugins = resolve.find_plugins()
    assert [(p.target, p.source) for p in plugins] == [("cpu", "package")]


def test_entry_point_discovery(tmp_path, monkeypatch):
    site = tmp_path / "site"
    # Convention: the entry point names a package; its libstrata_*.so files are the plugins. The package is
    # located, not imported: its __init__ raises to prove it.
    pkg = site / "fake_strata_cuda13"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('a plugin wheel must not be imported at discovery')\n")
    write_plugin(pkg, "sm_90")
    # Also accepted: 'module:callable' returning a directory or .so paths.
    rocm = site / "fake_strata_rocm"
    write_plugin(rocm / "lib", "gfx1100")
    (rocm / "__init__.py").write_text(
        "from pathlib import Path\n"
        "def plugin_files():\n"
        "    return [Path(__file__).parent / 'lib' / 'libstrata_gfx1100.so']\n")
    monkeypatch.syspath_prepend(str(site))
    group = resolve.ENTRY_POINT_GROUP
    eps = [importlib.metadata.EntryPoint("cuda13", "fake_strata_cuda13", group),
           importlib.metadata.EntryPoint("rocm", "fake_strata_rocm:plugin_files", group),
           importlib.metadata.EntryPoint("broken", "no_such_strata_package", group)]
    monkeypatch.setattr(resolve, "_entry_points", lambda: sorted(eps, key=lambda e: e.name))
    plugins = resolve.find_plugins()
    by_target = {p.target: p for p in plugins}
    assert by_target["sm_90"].source.startswith("entry point cuda13") and by_target["sm_90"].error is None
    assert by_target["gfx1100"].source.startswith("entry point rocm") and by_target["gfx1100"].error is None
    broken = [p for p in plugins if p.error]
    assert len(broken) == 1 and "no_such_strata_package" in broken[0].error
    assert "fake_strata_cuda13" not in sys.modules
    res = resolve.resolve(resolve.simulate("sm_90,gfx1100"))
    assert [chosen(r) for r in res] == ["sm_90", "gfx1100"]
    # The broken entry point shows up in every device's trace as a rejected candidate.
    assert all(any(not c.accepted and "no_such_strata_package" in c.reason for c in r.candidates) for r in res)


# ------------------------------------------------------------------------------------------ overrides

def test_forced_target(tmp_path, monkeypatch):
    for t in ("sm_80", "sm_90", "gfx1100"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_TARGET, "sm_80")
    r90, r75, rhip = resolve.resolve(resolve.simulate("sm_90,sm_75,gfx1100"), plugins_in(tmp_path))
    assert chosen(r90) == "sm_80" and r90.chosen.forced
    assert "forced by STRATA_KERNELS_TARGET=sm_80" in r90.chosen.reason
    assert not candidate(r90, "sm_90").accepted and "not the target forced" in candidate(r90, "sm_90").reason
    # Forcing overrides the arch rules (that is what it is for) and says so.
    assert chosen(r75) == "sm_80" and "the rules would reject it" in r75.chosen.reason
    assert chosen(rhip) == "gfx1100" and not rhip.chosen.forced  # other backends are untouched


def test_forced_target_that_is_not_installed(tmp_path, monkeypatch):
    for t in ("sm_80", "sm_90", "gfx1100"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_TARGET, "sm_75")
    r90, rhip = resolve.resolve(resolve.simulate("sm_90,gfx1100"), plugins_in(tmp_path))
    assert r90.chosen is None and not any(c.accepted for c in r90.candidates)
    assert any("sm_75" in n and "sm_80, sm_90" in n for n in r90.notes)
    assert chosen(rhip) == "gfx1100"
    text = resolve.explain("sm_90", plugins=plugins_in(tmp_path))
    assert "STRATA_KERNELS_TARGET=sm_75" in text and "sm_80, sm_90" in text and "no plugin chosen" in text


def test_forced_target_accepts_torch_arch_syntax(tmp_path, monkeypatch):
    for t in ("sm_80", "sm_90"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_TARGET, "8.0")
    (r,) = resolve.resolve(resolve.simulate("sm_90"), plugins_in(tmp_path))
    assert chosen(r) == "sm_80" and r.chosen.forced


def test_forced_unknown_name_is_noted_and_ignored(tmp_path, monkeypatch):
    write_plugin(tmp_path, "sm_90")
    monkeypatch.setenv(resolve.ENV_TARGET, "banana")
    monkeypatch.setattr(targets_mod, "all_targets", lambda: {})
    (r,) = resolve.resolve(resolve.simulate("sm_90"), plugins_in(tmp_path))
    assert chosen(r) == "sm_90" and any("banana" in n and "ignored" in n for n in r.notes)


# ------------------------------------------------------------------------------------------- simulate

def test_simulate_parses_devices(monkeypatch):
    devs = resolve.simulate("sm_86, gfx1100:xnack-;cpu,sm_120,8.9,sycl,sm_90a")
    assert [(d.kind, d.index, d.arch, d.cc) for d in devs] == [
        ("cuda", 0, "sm_86", (8, 6)), ("hip", 0, "gfx1100", None), ("cpu", 0, HOST, None),
        ("cuda", 1, "sm_120", (12, 0)), ("cuda", 2, "sm_89", (8, 9)), ("sycl", 0, "sycl", None),
        ("cuda", 3, "sm_90", (9, 0))]
    assert all(d.simulated for d in devs)
    assert devs[0].driver_version == resolve.DEFAULT_SIMULATED_DRIVER and 13000 <= devs[0].driver_version < 14000
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12.8")
    assert resolve.simulate("sm_80")[0].driver_version == 12080
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12090")
    assert resolve.simulate("sm_80")[0].driver_version == 12090


@pytest.mark.parametrize("bad", ["volta", "sm_x", "7"])
def test_simulate_rejects_unknown_names(bad):
    with pytest.raises(ValueError, match="cannot simulate"):
        resolve.simulate(bad)


# -------------------------------------------------------------------------------------------- explain

def test_explain_with_fake_plugins(tmp_path, tables):
    for t in ("cpu", "sm_80", "sm_86", "gfx1100"):
        write_plugin(tmp_path, t)
    text = resolve.explain("sm_86,gfx1100,cpu,gfx1030", plugins=plugins_in(tmp_path))
    blocks = text.split("\n\n")
    cuda = next(b for b in blocks if b.startswith("cuda:0 sm_86"))
    assert "ACCEPT  sm_86" in cuda and "exact SASS sm_86" in cuda
    assert "ACCEPT  sm_80" in cuda and "same major, older minor" in cuda
    assert "REJECT  gfx1100: backend hip plugin, device is cuda" in cuda
    assert "=> chosen: sm_86 by exact SASS sm_86 (" in cuda
    hip = next(b for b in blocks if b.startswith("hip:0 gfx1100"))
    assert "=> chosen: gfx1100 by exact code object gfx1100 (" in hip
    gfx1030 = next(b for b in blocks if b.startswith("hip:1 gfx1030"))
    assert "REJECT  gfx1100" in gfx1030 and "no plugin chosen" in gfx1030
    assert "the target table would use gfx1030" in gfx1030 and "pip install strata-kernels-rocm" in gfx1030
    assert "=> chosen: cpu" in next(b for b in blocks if b.startswith("cpu:0"))
    assert "simulated" in text and "STRATA_KERNELS_SIMULATE_DRIVER" in text


@pytest.mark.parametrize("spec,words", [
    ("sm_86", ["no installed plugin", "the target table would use sm_86", "family cuda13/cuda12",
               "pip install strata-kernels-cuda13"]),
    ("sm_87", ["the target table would use sm_86", "SASS sm_86"]),
    ("gfx1030", ["the target table would use gfx1030", "family rocm", "pip install strata-kernels-rocm"]),
    ("sm_70", ["the target table would use sm_70", "family cuda12", "CUDA 12.x toolkit",
               "pip install strata-kernels-cuda12"]),
    ("sm_120", ["the target table would use sm_120", "family cuda13"]),
    ("sm_130", ["the target table would use PTX compute_120 of target sm_120", "JIT"]),
    ("gfx906", ["no installed plugin", "no target in the tables serves gfx906"]),
    ("sycl", ["the target table would use sycl", "pip install strata-kernels-sycl"]),
    ("cpu", ["the target table would use cpu", "pip install strata-kernels`"]),
])
def test_explain_with_nothing_installed(tables, spec, words):
    text = resolve.explain(spec)
    assert "plugins found: 0" in text
    for w in words:
        assert w in text, f"{w!r} missing from:\n{text}"


def test_explain_names_the_cuda12_wheel_for_an_old_driver(tables, monkeypatch):
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12080")
    assert "pip install strata-kernels-cuda12" in resolve.explain("sm_86")


def test_explain_when_the_tables_cannot_be_read(monkeypatch):
    def broken():
        raise targets_mod.TargetError("cuda.toml: broken")
    monkeypatch.setattr(targets_mod, "all_targets", broken)
    text = resolve.explain("sm_86")
    assert "no installed plugin" in text and "target tables could not be read" in text and "broken" in text


def test_explain_of_the_probed_machine(monkeypatch):
    monkeypatch.setattr(resolve, "probe_devices", lambda: [Device("cpu", 0, "test CPU", HOST)])
    monkeypatch.setattr(resolve, "probe_notes", lambda: ["CUDA: not probed: test"])
    text = resolve.explain()
    assert "devices: probed here" in text and "CUDA: not probed: test" in text and "cpu:0" in text


# --------------------------------------------------------------------------------------------- probing

def test_probe_on_this_machine_degrades_gracefully():
    devices, notes = resolve.probe_devices(), resolve.probe_notes()
    assert devices[0].kind == "cpu" and devices[0].arch == HOST and not devices[0].simulated
    for kind, tag in (("cuda", "CUDA:"), ("hip", "HIP:")):
        # Either the driver found devices, or a note says why not.
        assert any(d.kind == kind for d in devices) or any(n.startswith(tag) for n in notes), notes
    assert resolve.probe_devices() == devices  # cached


def test_probe_without_driver_libraries(monkeypatch):
    monkeypatch.setattr(resolve, "_CUDA_LIBS", ("libcuda-not-here.so.1",))
    monkeypatch.setattr(resolve, "_hip_library_names", lambda: ["libamdhip64-not-here.so"])
    devices, notes = resolve.probe_devices(), resolve.probe_notes()
    assert [d.kind for d in devices] == ["cpu"]
    assert any(n.startswith("CUDA: not probed") and "libcuda-not-here" in n for n in notes)
    assert any(n.startswith("HIP: not probed") and "libamdhip64-not-here" in n for n in notes)


class FakeCuda:
    """Stands in for libcuda.so.1: writes through the ctypes byref() arguments as the driver would."""

    def __init__(self, init_rc=0, devices=((9, 0, b"NVIDIA H200"),), driver=13000):
        self.init_rc, self.devices, self.driver = init_rc, devices, driver

    def cuInit(self, flags):
        return self.init_rc

    def cuGetErrorName(self, code, out):
        out._obj.value = b"CUDA_ERROR_NO_DEVICE" if code == 100 else b"CUDA_ERROR_UNKNOWN"
        return 0

    def cuDriverGetVersion(self, out):
        out._obj.value = self.driver
        return 0

    def cuDeviceGetCount(self, out):
        out._obj.value = len(self.devices)
        return 0

    def cuDeviceGet(self, out, ordinal):
        out._obj.value = ordinal
        return 0

    def cuDeviceGetAttribute(self, out, attr, dev):
        major, minor, _ = self.devices[dev]
        out._obj.value = {75: major, 76: minor}[attr]
        return 0

    def cuDeviceGetName(self, buf, n, dev):
        buf.value = self.devices[dev][2]
        return 0


class FakeHip:
    """Stands in for libamdhip64.so; hipDeviceProp_t is a blob with gcnArchName somewhere after the name."""

    def __init__(self, archs=(b"gfx1100:sramecc-:xnack-",), offset=1160, init_rc=0, new_api=True):
        self.archs, self.offset, self.init_rc = archs, offset, init_rc
        if not new_api:
            self.hipGetDevicePropertiesR0600 = None

    def hipInit(self, flags):
        return self.init_rc

    def hipGetErrorName(self, code):
        return b"hipErrorNoDevice"

    def hipGetDeviceCount(self, out):
        out._obj.value = len(self.archs)
        return 0

    def hipDriverGetVersion(self, out):
        out._obj.value = 60342134
        return 0

    def _props(self, buf, i):
        name = b"AMD Radeon RX 7900 XTX"
        ctypes.memmove(ctypes.addressof(buf), name, len(name))
        ctypes.memmove(ctypes.addressof(buf) + self.offset, self.archs[i], len(self.archs[i]))
        return 0

    def hipGetDevicePropertiesR0600(self, buf, i):
        return self._props(buf, i)

    def hipGetDeviceProperties(self, buf, i):
        return self._props(buf, i)


def _fake_libraries(monkeypatch, cuda=None, hip=None):
    def load(names):
        names = list(names)
        if any("cuda" in n for n in names):
            return (cuda, "fake") if cuda else (None, "libcuda.so.1: not here")
        return (hip, "fake") if hip else (None, "libamdhip64.so: not here")
    monkeypatch.setattr(resolve, "_load_library", load)


def test_probe_reads_cuda_devices_through_the_driver_api(monkeypatch):
    _fake_libraries(monkeypatch, cuda=FakeCuda(devices=((9, 0, b"NVIDIA H200"), (12, 0, b"RTX PRO 6000"))))
    devices = resolve.probe_devices()
    assert [(d.kind, d.index, d.arch, d.cc, d.driver_version, d.name) for d in devices[1:]] == [
        ("cuda", 0, "sm_90", (9, 0), 13000, "NVIDIA H200"), ("cuda", 1, "sm_120", (12, 0), 13000, "RTX PRO 6000")]


def test_probe_notes_cuinit_failure(monkeypatch):
    _fake_libraries(monkeypatch, cuda=FakeCuda(init_rc=100))
    assert [d.kind for d in resolve.probe_devices()] == ["cpu"]
    assert any("cuInit failed with 100 (CUDA_ERROR_NO_DEVICE)" in n for n in resolve.probe_notes())


@pytest.mark.parametrize("new_api", [True, False])
def test_probe_finds_the_gfx_arch_in_device_properties(monkeypatch, new_api):
    _fake_libraries(monkeypatch, hip=FakeHip(archs=(b"gfx1100:sramecc-:xnack-", b"gfx1201"), new_api=new_api))
    devices = resolve.probe_devices()
    assert [(d.kind, d.index, d.arch, d.name) for d in devices[1:]] == [
        ("hip", 0, "gfx1100", "AMD Radeon RX 7900 XTX"), ("hip", 1, "gfx1201", "AMD Radeon RX 7900 XTX")]


def test_probe_notes_hip_init_failure(monkeypatch):
    _fake_libraries(monkeypatch, hip=FakeHip(init_rc=100))
    assert [d.kind for d in resolve.probe_devices()] == ["cpu"]
    assert any("hipInit failed with 100 (hipErrorNoDevice)" in n for n in resolve.probe_notes())


def test_a_crashing_probe_becomes_a_note(monkeypatch):
    class Broken:
        def cuInit(self, flags):
            raise OSError("segfault avoided")
    _fake_libraries(monkeypatch, cuda=Broken())
    assert [d.kind for d in resolve.probe_devices()] == ["cpu"]
    assert any("CUDA: probe failed" in n and "segfault avoided" in n for n in resolve.probe_notes())


def test_gcn_arch_name_is_not_taken_from_the_name_field():
    raw = bytearray(4096)
    raw[0:8] = b"gfx1030\0"           # some ROCm builds report the arch as the marketing name
    raw[700:708] = b"gfx1031\0"
    assert resolve._gcn_arch_from_props(bytes(raw)) == "gfx1031"
    raw[700:708] = bytes(8)
    raw[900:922] = b"gfx11-generic:xnack-\0\0"
    assert resolve._gcn_arch_from_props(bytes(raw)) == "gfx11-generic"


# ------------------------------------------------------------------------------- native target names

def test_native_target_names(tables, monkeypatch):
    devices = [Device("cpu", 0, "CPU", HOST)] + resolve.simulate(
        "sm_86,sm_87,sm_121,sm_72,sm_130,gfx1100,gfx906,gfx1100,sm_86")
    monkeypatch.setattr(resolve, "probe_devices", lambda: devices)
    names, notes = resolve.native_targets(tables)
    assert names == ["cpu", "sm_86", "sm_120", "sm_70", "gfx1100"]
    assert any("sm_130" in n for n in notes) and any("gfx906" in n for n in notes)
    assert resolve.native_target_names(tables) == names
    # STRATA_TARGETS=native goes through the same function.
    sel = targets_mod.parse_target_list("native", tables)
    assert [s.target.name for s in sel] == ["cpu", "sm_70", "sm_86", "sm_120", "gfx1100"]


def test_native_on_a_machine_without_gpus(tables, monkeypatch):
    monkeypatch.setattr(resolve, "probe_devices", lambda: [Device("cpu", 0, "CPU", HOST)])
    assert resolve.native_target_names(tables) == ["cpu"]


# ----------------------------------------------------------------------------------------- plugin_for

@pytest.fixture
def fake_loader(monkeypatch):
    import strata_kernels
    calls = []
    fail = set()

    def load(path):
        calls.append(path)
        if Path(path).name in fail:
            raise RuntimeError(f"cannot load plugin {path}: undefined symbol")
        return types.SimpleNamespace(path=path, abi_version=1, manifest=Path(path).read_bytes().decode(errors="ignore"))

    mod = types.ModuleType("strata_kernels._loader")
    mod.load = load
    monkeypatch.setitem(sys.modules, "strata_kernels._loader", mod)
    monkeypatch.setattr(strata_kernels, "_loader", mod, raising=False)
    return types.SimpleNamespace(calls=calls, fail=fail)


def test_plugin_for_loads_the_chosen_plugin_once(tmp_path, monkeypatch, fake_loader):
    for t in ("cpu", "sm_80", "sm_86"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, str(tmp_path))
    monkeypatch.setattr(resolve, "probe_devices", lambda: resolve.simulate("cpu,sm_86"))
    lib = resolve.plugin_for("cuda", 0)
    assert Path(lib.path).name == "libstrata_sm_86.so"
    assert resolve.plugin_for("cuda", 0) is lib and len(fake_loader.calls) == 1
    assert Path(resolve.plugin_for("cpu").path).name == "libstrata_cpu.so"
    resolve.clear_cache()
    resolve.plugin_for("cuda", 0)
    assert len(fake_loader.calls) == 3


def test_plugin_for_falls_back_when_the_best_plugin_fails_to_load(tmp_path, monkeypatch, fake_loader):
    for t in ("sm_80", "sm_86"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, str(tmp_path))
    monkeypatch.setattr(resolve, "probe_devices", lambda: resolve.simulate("sm_86"))
    fake_loader.fail.add("libstrata_sm_86.so")
    assert Path(resolve.plugin_for("cuda").path).name == "libstrata_sm_80.so"
    assert any("fell back" in n for n in resolve.resolution_for("cuda").notes)
    resolve.clear_cache()
    fake_loader.fail.add("libstrata_sm_80.so")
    with pytest.raises(PluginError, match="undefined symbol"):
        resolve.plugin_for("cuda")


def test_plugin_for_raises_unsupported_with_the_trace(tmp_path, monkeypatch, fake_loader):
    write_plugin(tmp_path, "gfx1100")
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, str(tmp_path))
    monkeypatch.setattr(resolve, "probe_devices", lambda: resolve.simulate("cpu,gfx906"))
    with pytest.raises(Unsupported) as e:
        resolve.plugin_for("hip", 0)
    msg = str(e.value)
    assert "gfx906" in msg and "REJECT  gfx1100" in msg and "exact gfx" in msg
    assert "STRATA_KERNELS_TARGET" in msg and "STRATA_KERNELS_PLUGIN_PATH" in msg
    assert fake_loader.calls == []
    with pytest.raises(Unsupported, match="no cuda device 2"):
        resolve.plugin_for("cuda", 2)


def test_the_module_imports_without_the_native_loader():
    import importlib
    import subprocess
    code = ("import sys, builtins\n"
            "real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.endswith('_loader') or (a and a[2] and '_loader' in (a[2] or ())): raise ImportError('no')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            "import strata_kernels.resolve as r\n"
            "assert 'torch' not in sys.modules\n"
            "print(len(r.simulate('sm_90')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(resolve.__file__).parents[1])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1" and out.stderr == ""
    assert importlib.util.find_spec("strata_kernels.resolve") is not None


# ---------------------------------------------------------------------- every NVIDIA GPU of today gets a plugin

FAMILY_TOOLKIT = {"cuda13": "13.0", "cuda12": "12.9"}  # the nvcc each CUDA family's wheel is built with (ci/matrix.py)


def family_install(directory: Path, tables: dict, family: str, drop: tuple[str, ...] = ()) -> list:
    """Fake plugins carrying the manifests codegen writes for ``family``'s targets: what its wheel installs."""
    from strata_kernels import codegen
    nvcc = {"name": "nvcc", "version": FAMILY_TOOLKIT[family]}
    for name, t in tables.items():
        if family in t.families and name not in drop:
            write_plugin(directory, name, codegen.build_manifest(t, t.ptx, nvcc, [], "0" * 64))
    return plugins_in(directory)


# (device, the cuda13 plugin chosen, how its code reaches the device)
NEWEST_NVIDIA = [
    ("sm_100", "sm_100", "exact SASS sm_100"),        # B200, GB200
    ("sm_103", "sm_103", "exact SASS sm_103"),        # B300, GB300
    ("sm_110", "sm_110", "exact SASS sm_110"),        # Jetson Thor
    ("sm_121", "sm_120", "same-major SASS sm_120"),   # DGX Spark (GB10)
    ("sm_130", "sm_120", "PTX JIT compute_120"),      # a GPU newer than the newest SASS
]


def test_explain_chooses_a_cuda13_plugin_for_blackwell_and_later(tmp_path, tables):
    plugins = family_install(tmp_path, tables, "cuda13")
    text = resolve.explain(",".join(d for d, _, _ in NEWEST_NVIDIA), plugins=plugins)
    blocks = {b.split()[1]: b for b in text.split("\n\n")[1:] if b.strip()}
    for device, target, how in NEWEST_NVIDIA:
        assert f"=> chosen: {target} by {how} (" in blocks[device], blocks[device]
    # sm_100-class devices let a block opt in to 227 KB of shared memory: INT8 prompts run grouped there
    for device in ("sm_100", "sm_103", "sm_110"):
        assert "int8 grouped" in blocks[device], blocks[device]


def test_a_major_without_sass_runs_the_portable_ptx(tmp_path, tables):
    """Without its own SASS, a device whose major lies between the SASS majors still gets the sm_80 variants'
    PTX (compute_120 is newer than it, and SASS never crosses majors)."""
    plugins = family_install(tmp_path, tables, "cuda13", drop=("sm_110",))
    (res,) = resolve.resolve(resolve.simulate("sm_110"), plugins)
    assert chosen(res) == "sm_80" and res.chosen.how == "PTX JIT compute_80"
    assert "newer than the device" in candidate(res, "sm_120").reason


@pytest.mark.parametrize("family", sorted(FAMILY_TOOLKIT))
def test_every_nvidia_arch_from_the_familys_oldest_on_gets_a_plugin(tmp_path, tables, family):
    """ARCHITECTURE §6: every NVIDIA GPU newer than the newest SASS still reaches some PTX; every arch between the
    family's oldest and newest SASS reaches SASS of its major or that PTX."""
    plugins = family_install(tmp_path, tables, family)
    sass = sorted(resolve._parse_sm(s)[:2] for p in plugins for s in p.manifest["sass"])
    devices = [Device("cuda", 0, f"NVIDIA sm_{ma}{mi}", f"sm_{ma}{mi}", (ma, mi), 13000, True)
               for ma in range(sass[0][0], 21) for mi in range(10) if (ma, mi) >= sass[0]]
    for res in resolve.resolve(devices, plugins):
        assert res.chosen is not None, "\n".join(resolve._trace_device(res, tables))
        if res.device.cc[0] > sass[-1][0]:
            assert res.chosen.how.startswith("PTX JIT"), res.chosen.reason


# ------------------------------------------------------------------------------ geometries per plugin

def _package_and_user(tmp_path, monkeypatch, target="sm_90"):
    """The table's plugin in the package (256x12) and one of extra geometries (128x4, 128x8) in the per-user
    directory, as `strata-kernels build --targets sm_90 --geometries 128x4,128x8` leaves it."""
    pkg, user = tmp_path / "pkg", tmp_path / "user"
    write_plugin(pkg, target)
    extra = manifest_for(target, geometries=[{"head_dim": 128, "group": 4}, {"head_dim": 128, "group": 8}])
    write_plugin(user, target, extra, name=f"libstrata_{target}-128x4-128x8.so")
    monkeypatch.setattr(resolve, "_package_plugin_dir", lambda: pkg)
    monkeypatch.setattr(resolve, "user_plugin_dir", lambda: user)
    monkeypatch.setattr(resolve, "probe_devices", lambda: resolve.simulate(f"cpu,{target}"))


def test_each_geometry_gets_the_plugin_that_carries_it(tmp_path, monkeypatch, fake_loader):
    _package_and_user(tmp_path, monkeypatch)
    assert Path(resolve.plugin_for("cuda", 0, (128, 4)).path).name == "libstrata_sm_90-128x4-128x8.so"
    assert Path(resolve.plugin_for("cuda", 0, (256, 12)).path).name == "libstrata_sm_90.so"
    assert Path(resolve.plugin_for("cuda", 0).path).name == "libstrata_sm_90.so"   # the device's choice
    resolve.plugin_for("cuda", 0, (128, 8))
    assert len(fake_loader.calls) == 2, "one dlopen per plugin file"
    res = resolve.resolution_for("cuda")
    assert resolve.device_geometries(res) == [(128, 4), (128, 8), (256, 12)]


def test_a_missing_geometry_names_the_command_that_builds_it(tmp_path, monkeypatch, fake_loader):
    _package_and_user(tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"`strata-kernels build --targets sm_90 --geometries 64x2`") as e:
        resolve.plugin_for("cuda", 0, (64, 2))
    assert "sm_90 [package] is built for 256x12" in str(e.value) and "128x4, 128x8" in str(e.value)
    assert sorted(e.value.available) == [(128, 4), (128, 8), (256, 12)]
    with pytest.raises(ValueError, match="no strata-kernels plugin can be built for .head_dim 128, G 20.: G 20"):
        resolve.plugin_for("cuda", 0, (128, 20))


def test_forcing_a_target_keeps_all_its_plugins(tmp_path, monkeypatch, fake_loader):
    _package_and_user(tmp_path, monkeypatch)
    monkeypatch.setenv(resolve.ENV_TARGET, "sm_90")
    assert Path(resolve.plugin_for("cuda", 0, (128, 8)).path).name == "libstrata_sm_90-128x4-128x8.so"
    assert Path(resolve.plugin_for("cuda", 0, (256, 12)).path).name == "libstrata_sm_90.so"


def test_explain_lists_each_plugins_geometries_and_who_serves_which(tmp_path, monkeypatch):
    _package_and_user(tmp_path, monkeypatch)
    text = resolve.explain(simulate="sm_90")
    assert "geometries (head_dim x G): 256x12\n" in text and "geometries (head_dim x G): 128x4, 128x8\n" in text
    assert ("128x4, 128x8 by libstrata_sm_90-128x4-128x8.so [user]; 256x12 by libstrata_sm_90.so [package]"
            in text), text


# ----------------------------------------------------------------------------------- the cuda12 family (driver API)

def _cuda12_driver_manifest(target: str) -> dict:
    """What a cuda12 plugin built from PyPI's CUDA 12.9 (clang + ptxas, driver-API launch) carries."""
    return manifest_for(target, toolchain={"name": "cuda12-driver", "version": "12.9"}, min_driver_version=12000)


def test_a_cuda12_driver_plugin_serves_a_cuda_12_0_driver_and_the_cuda13_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12000")
    new = write_plugin(tmp_path / "cuda13", "sm_90")
    old = write_plugin(tmp_path / "cuda12", "sm_90", _cuda12_driver_manifest("sm_90"))
    plugins = [resolve._plugin_file(new, "package"), resolve._plugin_file(old, "path")]
    (res,) = resolve.resolve(resolve.simulate("sm_90"), plugins)
    assert res.chosen.plugin.path == old
    assert "CUDA 13.0" in next(c for c in res.candidates if c.plugin.path == new).reason


def test_a_cuda12_driver_plugin_refuses_a_cuda_11_driver(tmp_path, monkeypatch):
    write_plugin(tmp_path, "sm_70", _cuda12_driver_manifest("sm_70"))
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "11080")
    (res,) = resolve.resolve(resolve.simulate("sm_70"), plugins_in(tmp_path))
    assert res.chosen is None and "CUDA 11.8" in res.candidates[0].reason and "(12.x)" in res.candidates[0].reason
    monkeypatch.setenv(resolve.ENV_SIMULATE_DRIVER, "12020")
    (res,) = resolve.resolve(resolve.simulate("sm_70"), plugins_in(tmp_path))
    assert chosen(res) == "sm_70"


def test_explain_says_which_driver_each_cuda_family_needs(tmp_path):
    write_plugin(tmp_path, "sm_70", _cuda12_driver_manifest("sm_70"))
    text = resolve.explain(simulate="sm_70", plugins=plugins_in(tmp_path))
    assert "strata-kernels-cuda12: CUDA 12.0 or newer (driver R525+)" in text
    assert "strata-kernels-cuda13: CUDA 13.0 or newer (driver R580+)" in text
    assert "cuda12-driver 12.9 (needs a driver for CUDA 12.0+)" in text
