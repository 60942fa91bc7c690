"""Built plugins go to the per-user plugin directory, which the resolver searches, never into the installed
package; `strata-kernels clean` removes what strata-kernels wrote outside the package."""
from __future__ import annotations

from pathlib import Path

from strata_kernels import build, cli, resolve
from strata_kernels.paths import cache_home, user_plugin_dir
from strata_kernels.targets import package_root

from test_resolve import write_plugin


def test_build_installs_into_the_user_directory_not_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    d = build.default_install_dir()
    assert d == user_plugin_dir() and d.is_relative_to(tmp_path / "data")
    assert not d.resolve().is_relative_to(package_root().resolve())


def test_the_resolver_searches_the_user_directory_after_the_wheels(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    pkg = tmp_path / "pkg"
    write_plugin(pkg, "sm_90")
    write_plugin(user_plugin_dir(), "sm_90")
    write_plugin(user_plugin_dir(), "sm_86")
    monkeypatch.setattr(resolve, "_package_plugin_dir", lambda: pkg)
    monkeypatch.setattr(resolve, "_entry_points", lambda: [])
    monkeypatch.delenv(resolve.ENV_PLUGIN_PATH, raising=False)
    plugins = resolve.find_plugins()
    assert [(p.target, p.source) for p in plugins] == [("sm_90", "package"), ("sm_86", "user"), ("sm_90", "user")]
    (sm86, sm90) = resolve.resolve(resolve.simulate("sm_86,sm_90"), plugins)
    assert sm86.chosen.plugin.source == "user"
    assert sm90.chosen.plugin.source == "package"          # a tie goes to the package


def test_clean_removes_the_user_directories_only(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mine = tmp_path / "mybuild"
    mine.mkdir()
    monkeypatch.setenv("STRATA_KERNELS_BUILD_DIR", str(mine))
    write_plugin(user_plugin_dir(), "cpu")
    (cache_home() / "build-x").mkdir(parents=True)
    assert cli.main(["clean", "--dry-run"]) == 0
    assert user_plugin_dir().is_dir() and cache_home().is_dir()
    assert cli.main(["clean"]) == 0
    out = capsys.readouterr().out
    assert not user_plugin_dir().exists() and not cache_home().exists(), out
    assert mine.is_dir() and "left" in out
    assert Path(tmp_path / "data").is_dir()                 # only strata-kernels' own folder goes
    assert cli.main(["clean"]) == 0 and "nothing to remove" in capsys.readouterr().out


def test_a_build_record_is_names_only(tmp_path):
    res = build.BuildResult(built={"cpu": tmp_path / "libstrata_cpu.so"}, skipped={"sm_89": "no nvcc"},
                            spec="native", notes=["native: the CPU and the GPUs seen here (none seen): cpu"])
    build.write_record(res, tmp_path / "r" / build.RECORD)
    rec = build.read_record(tmp_path / "r" / build.RECORD)
    assert rec["built"] == ["cpu"] and rec["skipped"] == {"sm_89": "no nvcc"} and rec["spec"] == "native"
    assert str(tmp_path) not in (tmp_path / "r" / build.RECORD).read_text()
    assert build.read_record(tmp_path / "missing.json") is None
