"""A walk of the README's `strata-kernels` commands as a new user runs them, on this machine: every command that
reads, renders or checks (info, explain, generate, parity, bench, clean --dry-run) runs here through the installed
entry point and must exit 0. The commands that compile (build, wheel) run in tests/cpu/test_build.py,
tests/toolchain/test_wheels.py and tests/cpu/test_geometry_on_demand.py; the Quick start's two commands run in .ci/run."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_advice import _commands  # noqa: E402  (the README's command extraction, one source)

ROOT = Path(__file__).resolve().parents[2]
RUN_HERE = {"info", "explain", "generate", "parity", "bench", "clean"}
# Bounded arguments for the commands whose README form takes minutes (same command, smaller case).
SMALL = {"parity": ["--quick"], "bench": ["--shapes", "300x8", "--reps", "1"]}


def _readme_runs() -> list[list[str]]:
    seen, runs = set(), []
    for cmd in _commands((ROOT / "README.md").read_text()):
        if not cmd.startswith("strata-kernels "):
            continue
        cmd = re.sub(r" \[[^]]*\]", "", cmd).replace("...", "").replace("<new>", "sm_90")
        words = shlex.split(cmd)
        if len(words) < 2 or words[1] not in RUN_HERE or "--overhead" in words:
            continue
        if words[1] == "clean":
            words.append("--dry-run")                     # never remove a user's builds from a test
        if words[1] in SMALL and len(words) == 2:
            words += SMALL[words[1]]
        words = ["DEVICES" if w == "DEVICES" else w for w in words]
        key = tuple(words)
        if key not in seen:
            seen.add(key)
            runs.append(words)
    return runs


RUNS = _readme_runs()


def test_the_walk_covers_the_readme():
    assert {w[1] for w in RUNS} == RUN_HERE, RUNS


@pytest.mark.parametrize("words", RUNS, ids=[" ".join(w[1:]) for w in RUNS])
def test_readme_command_runs(words, tmp_path):
    exe = shutil.which("strata-kernels")
    if exe is None:
        pytest.skip("the strata-kernels entry point is not installed (pip install -e .)")
    words = [str(tmp_path / "out") if w in ("DIR", "/tmp/gen") else w for w in words]
    words = ["sm_86,gfx1100" if w == "DEVICES" else w for w in words]
    env = dict(os.environ, STRATA_KERNELS_BUILD_DIR=str(tmp_path / "build"))
    p = subprocess.run([exe] + words[1:], capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, f"{' '.join(words)} -> exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    if words[1] == "generate":
        assert any((tmp_path / "out").rglob("*.cu")), "generate wrote no CUDA source"
