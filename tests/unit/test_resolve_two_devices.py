"""Two GPUs in one process (issue 16), the resolver's side: a choice per device, listed per device by explain, and a
plugin loaded per (device, geometry) with one dlopen per file. Fake plugin files and fake probed devices; nothing is
loaded (a stand-in loader records the paths it is asked to load)."""
from __future__ import annotations

import sys
import types

import pytest

import strata_kernels
from strata_kernels import resolve
from strata_kernels.resolve import Device

from test_resolve import HOST, isolated, plugins_in, tables, write_plugin  # noqa: F401  (fixtures and helpers)


def _blocks(text: str) -> dict[str, str]:
    """explain's per-device blocks by their device label ('cuda:0', ...)."""
    return {b.split(" ", 1)[0]: b for b in text.split("\n\n")[1:]}


def test_simulated_pair_of_the_same_arch_lists_both_devices_with_their_choice(tmp_path, tables):  # noqa: F811
    for t in ("cpu", "sm_80", "sm_90"):
        write_plugin(tmp_path, t)
    blocks = _blocks(resolve.explain("sm_90,sm_90", plugins=plugins_in(tmp_path)))
    assert sorted(blocks) == ["cuda:0", "cuda:1"]
    for label in ("cuda:0", "cuda:1"):
        assert blocks[label].startswith(f"{label} sm_90 (NVIDIA sm_90; driver CUDA 13.0; simulated)")
        assert "=> chosen: sm_90 by exact SASS sm_90 (" in blocks[label]


def _probed(monkeypatch, devices):
    monkeypatch.setattr(resolve, "probe_devices", lambda: list(devices))
    monkeypatch.setattr(resolve, "probe_notes", lambda: [])


TWO = [Device("cpu", 0, "host CPU", HOST),
       Device("cuda", 0, "NVIDIA H200", "sm_90", (9, 0), 13000),
       Device("cuda", 1, "NVIDIA A100", "sm_80", (8, 0), 13000)]


@pytest.fixture()
def installed(tmp_path, monkeypatch):
    for t in ("cpu", "sm_80", "sm_90"):
        write_plugin(tmp_path, t)
    monkeypatch.setenv(resolve.ENV_PLUGIN_PATH, str(tmp_path))
    return tmp_path


def test_two_probed_devices_each_get_their_own_choice(installed, monkeypatch, tables):  # noqa: F811
    _probed(monkeypatch, TWO)
    assert resolve.resolution_for("cuda", 0).chosen.plugin.target == "sm_90"
    assert resolve.resolution_for("cuda", 1).chosen.plugin.target == "sm_80"
    blocks = _blocks(resolve.explain())
    assert sorted(blocks) == ["cpu:0", "cuda:0", "cuda:1"]
    for label, arch, name in (("cuda:0", "sm_90", "NVIDIA H200"), ("cuda:1", "sm_80", "NVIDIA A100")):
        assert blocks[label].startswith(f"{label} {arch} ({name}")
        assert f"=> chosen: {arch} by exact SASS {arch} (" in blocks[label]
    with pytest.raises(strata_kernels.Unsupported, match=r"no cuda device 2 here \(devices seen: cpu:0, cuda:0"):
        resolve.resolution_for("cuda", 2)


@pytest.fixture()
def loads(monkeypatch):
    """A stand-in _loader: load(path) returns a fresh object per call and records the path."""
    paths = []
    fake = types.SimpleNamespace(load=lambda path: paths.append(path) or types.SimpleNamespace(path=path))
    monkeypatch.setitem(sys.modules, "strata_kernels._loader", fake)
    monkeypatch.setattr(strata_kernels, "_loader", fake, raising=False)
    return paths


def test_plugins_are_loaded_per_device_and_a_file_once(installed, monkeypatch, loads):
    _probed(monkeypatch, TWO)
    p0, p1 = resolve.plugin_for("cuda", 0, (256, 12)), resolve.plugin_for("cuda", 1, (256, 12))
    assert p0.path.endswith("libstrata_sm_90.so") and p1.path.endswith("libstrata_sm_80.so")
    assert resolve.plugin_for("cuda", 1, (256, 12)) is p1 and resolve.plugin_for("cuda", 1) is p1
    assert len(loads) == 2
    # Two devices of one arch share the loaded file (the plans then key their error words by device).
    resolve.clear_cache()
    loads.clear()
    _probed(monkeypatch, [TWO[0], TWO[1], Device("cuda", 1, "NVIDIA H200", "sm_90", (9, 0), 13000)])
    assert resolve.plugin_for("cuda", 0, (256, 12)) is resolve.plugin_for("cuda", 1, (256, 12))
    assert len(loads) == 1 and resolve.resolution_for("cuda", 1).device.index == 1
