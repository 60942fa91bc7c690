#!/usr/bin/env python3
"""The CI matrix: the backend tables expanded into wheel jobs, one per family x platform, and the
GitHub Actions workflow generated from those jobs.

    python ci/matrix.py            the jobs as a table (family, platform, runner, image, targets)
    python ci/matrix.py --json     the jobs as JSON
    python ci/matrix.py --write    rewrite .github/workflows/wheels.yml
    python ci/matrix.py --check    exit 1 when the committed workflow is missing or differs from what the tables give

Which targets a job builds comes from the tables' ``families``; this file only decides, per family, the container
image (the toolkit's published one) and the platforms. Needs the standard library and strata_kernels.targets only.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "wheels.yml"
FIX_COMMAND = "python ci/matrix.py --write"

if __name__ == "__main__" and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the repo's own strata_kernels, not an installed one

from strata_kernels import targets as sk_targets  # noqa: E402
from strata_kernels.errors import StrataError, TargetError  # noqa: E402


@dataclass(frozen=True)
class Platform:
    runner: str   # GitHub-hosted runner label
    arch: str     # `uname -m`, as the manylinux image names spell it


PLATFORMS = {
    "linux-x86_64": Platform("ubuntu-24.04", "x86_64"),
    "linux-aarch64": Platform("ubuntu-24.04-arm", "aarch64"),
}


@dataclass(frozen=True)
class Family:
    image: str                # container image; {version} and {arch} are filled in
    version: str | None       # the toolkit that image carries, checked against each target's toolkit min/max
    platforms: tuple[str, ...]


# The one table of images (tags checked to exist; README, "CI matrix"). nvidia/cuda images are multi-arch (amd64 and
# arm64/sbsa), so cuda13 also runs on the arm runner. CUDA 13 cannot build sm_70, hence cuda12 on 12.9. ROCm 6.4.1 is
# the first whose system requirements list RDNA4 (gfx1200/gfx1201).
FAMILIES = {
    "core": Family("quay.io/pypa/manylinux_2_28_{arch}", None, ("linux-x86_64", "linux-aarch64")),
    "cuda13": Family("nvidia/cuda:{version}-devel-ubuntu22.04", "13.0.1", ("linux-x86_64", "linux-aarch64")),
    "cuda12": Family("nvidia/cuda:{version}-devel-ubuntu22.04", "12.9.1", ("linux-x86_64",)),
    "rocm": Family("rocm/dev-ubuntu-22.04:{version}", "6.4.1", ("linux-x86_64",)),
    "sycl": Family("intel/oneapi-basekit:{version}-0-devel-ubuntu22.04", "2025.3.0", ("linux-x86_64",)),
}

CORE_PYTHONS = ("cp311-cp311", "cp312-cp312")  # interpreters of the manylinux image; setup.py makes cp312 abi3
BUILD_PYTHON = "3.12"                          # runs the build driver in the plugin jobs (uv-managed)
MAX_JOBS = 4                                   # cores of a GitHub-hosted standard Linux runner


@dataclass(frozen=True)
class Job:
    family: str
    platform: str
    runner: str
    image: str
    targets: tuple[str, ...]      # STRATA_TARGETS entries; "+PTX" where the table embeds PTX
    pythons: tuple[str, ...] = ()  # the core job's interpreters

    @property
    def target_names(self) -> tuple[str, ...]:
        return tuple(t.split("+", 1)[0] for t in self.targets)


def load(backends: Path | None = None) -> dict[str, sk_targets.Target]:
    """The targets of the repo's tables (or of another directory of tables, e.g. a proposed change)."""
    return sk_targets.load_targets(Path(backends) if backends else ROOT / "backends", ROOT / "templates")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _check_toolkit(name: str, family: Family, members: list[sk_targets.Target]) -> None:
    if family.version is None:
        return
    m = re.fullmatch(r"cuda(\d+)", name)
    if m and _version(family.version)[0] != int(m.group(1)):
        raise TargetError(f"ci/matrix.py: family {name} is built with a CUDA {m.group(1)}.x toolkit, but its image "
                          f"carries {family.version}; fix the version in FAMILIES")
    have = _version(family.version)
    for t in members:
        low, high = t.toolkit_min, t.toolkit_max
        too_old = low is not None and have[:len(_version(low))] < _version(low)
        too_new = high is not None and have[:len(_version(high))] > _version(high)
        if too_old or too_new:
            raise TargetError(
                f"{t.backend.table.name}: [targets.{t.name}] needs a toolkit from {low or 'any'} to {high or 'any'}, "
                f"but family {name} is built with {family.version}; take {name!r} out of its families or change "
                f"the family's image in ci/matrix.py")


def expand(table: dict[str, sk_targets.Target]) -> list[Job]:
    """One job per family x platform, in FAMILIES order, then PLATFORMS order."""
    members: dict[str, list[sk_targets.Target]] = {}
    for t in table.values():
        for f in t.families:
            if f not in FAMILIES:
                raise TargetError(f"{t.backend.table.name}: [targets.{t.name}] names family {f!r}, which has no CI "
                                  f"image; add it to FAMILIES in ci/matrix.py (known: {', '.join(FAMILIES)})")
            members.setdefault(f, []).append(t)
    jobs = []
    for name, family in FAMILIES.items():
        if name not in members:
            raise TargetError(f"ci/matrix.py: no target of backends/*.toml names family {name!r}; remove it from "
                              f"FAMILIES or add it to a target's `families`")
        _check_toolkit(name, family, members[name])
        chosen = sk_targets.parse_target_list(";".join(t.name for t in members[name]), table)
        names = tuple(s.target.name + ("+PTX" if s.ptx else "") for s in chosen)
        for platform in sorted(family.platforms, key=list(PLATFORMS).index):
            p = PLATFORMS[platform]
            jobs.append(Job(name, platform, p.runner, family.image.format(version=family.version, arch=p.arch),
                            names, CORE_PYTHONS if name == "core" else ()))
    return jobs


# ------------------------------------------------------------------------------------------------- the workflow

def _include(rows: list[dict[str, str]], indent: int = 10) -> str:
    """A `strategy.matrix.include` list; values as JSON strings, which YAML reads as double-quoted scalars."""
    pad = " " * indent
    lines = []
    for row in rows:
        for i, (key, value) in enumerate(row.items()):
            lines.append(f"{pad}{'- ' if i == 0 else '  '}{key}: {json.dumps(value)}")
    return "\n".join(lines)


def _core_rows(jobs: list[Job]) -> list[dict[str, str]]:
    return [{"platform": j.platform, "runner": j.runner, "image": j.image, "targets": ";".join(j.targets),
             "devices": ",".join(j.target_names), "pythons": " ".join(j.pythons)}
            for j in jobs if j.family == "core"]


def _plugin_rows(jobs: list[Job]) -> list[dict[str, str]]:
    return [{"family": j.family, "platform": j.platform, "runner": j.runner, "image": j.image,
             "targets": ";".join(j.targets), "devices": ",".join(j.target_names)}
            for j in jobs if j.family != "core"]


_TEMPLATE = """\
# Generated by ci/matrix.py from backends/*.toml: do not edit. After changing a table or ci/matrix.py run
# `@FIX@` and commit this file (GitHub runs only committed workflows);
# `python ci/matrix.py --check` and tests/unit/test_matrix.py fail while it differs from what the tables give.
# One job per wheel family x platform; the targets of each come from the tables' `families`.
name: wheels

on:
  push:
    branches: [main]
    tags: ["v*"]
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: wheels-${{ github.ref }}
  cancel-in-progress: true

env:
  MAX_JOBS: "@MAX_JOBS@"
  SCCACHE_GHA_ENABLED: "true"
  PIP_DISABLE_PIP_VERSION_CHECK: "1"

defaults:
  run:
    shell: bash

jobs:
  core:
    # The core wheel: Python package, nanobind loader and CPU plugin, for each interpreter of the matrix.
    name: core (${{ matrix.platform }})
    runs-on: ${{ matrix.runner }}
    container: ${{ matrix.image }}
    strategy:
      fail-fast: false
      matrix:
        include:
@CORE@
    env:
      STRATA_TARGETS: ${{ matrix.targets }}
      DEVICES: ${{ matrix.devices }}
      PYTHONS: ${{ matrix.pythons }}
    steps:
      - uses: actions/checkout@v4
      - name: Check that this workflow matches backends/*.toml
        run: /opt/python/@CHECK_PYTHON@/bin/python ci/matrix.py --check
      - uses: mozilla-actions/sccache-action@v0.0.9
      - name: Build the core wheels (${{ matrix.pythons }})
        run: |
          for py in $PYTHONS; do
            /opt/python/$py/bin/python -m pip wheel . --no-deps -w dist
          done
      - name: Check the manylinux tag (auditwheel)
        run: |
@AUDITWHEEL@
      - name: Install each wheel in a fresh venv; explain; unit and CPU tests
        run: |
          for py in $PYTHONS; do
            venv=/tmp/fresh-$py
            /opt/python/$py/bin/python -m venv "$venv"
            "$venv/bin/pip" install dist/strata_kernels-*-"${py%%-*}"-*.whl pytest hypothesis cmake ninja
            "$venv/bin/strata-kernels" explain --strict --simulate "$DEVICES"
            # Run from /tmp so the tests import the installed package, not the checkout.
            (cd /tmp && "$venv/bin/python" -m pytest -q "$GITHUB_WORKSPACE/tests/unit" "$GITHUB_WORKSPACE/tests/cpu")
          done
      - uses: actions/upload-artifact@v4
        with:
          name: wheels-core-${{ matrix.platform }}
          path: dist/*.whl
          if-no-files-found: error

  plugin:
    # One plugin wheel per family and platform, built in the toolkit's own image.
    name: ${{ matrix.family }} (${{ matrix.platform }})
    needs: core
    runs-on: ${{ matrix.runner }}
    container: ${{ matrix.image }}
    strategy:
      fail-fast: false
      matrix:
        include:
@PLUGIN@
    env:
      FAMILY: ${{ matrix.family }}
      DEVICES: ${{ matrix.devices }}
    steps:
      - uses: actions/checkout@v4
      - uses: astral-sh/setup-uv@v7
      - name: Python @PYTHON@ for the build driver
        run: |
          uv venv --seed --python @PYTHON@ /opt/build-python
          echo /opt/build-python/bin >> "$GITHUB_PATH"
      - uses: mozilla-actions/sccache-action@v0.0.9
      - name: Install the build dependencies
        run: python -m pip install cmake ninja nanobind jinja2 numpy wheel auditwheel
      - name: Build the ${{ matrix.family }} wheel (${{ matrix.targets }})
        run: python -m strata_kernels.cli wheel --family "$FAMILY" --out dist
      - name: Check the manylinux tag (auditwheel)
        run: |
@AUDITWHEEL@
      - uses: actions/download-artifact@v4
        with:
          name: wheels-core-${{ matrix.platform }}
          path: core
      - name: Install with the core wheel in a fresh venv; explain the family's devices
        run: |
          python -m venv /tmp/fresh
          # This run's core wheel (pip picks the one for this Python), then the plugin wheel; other deps from PyPI.
          /tmp/fresh/bin/pip install --no-index --no-deps --find-links core strata-kernels
          /tmp/fresh/bin/pip install dist/strata_kernels_"$FAMILY"-*.whl
          /tmp/fresh/bin/pip check
          /tmp/fresh/bin/strata-kernels explain --strict --simulate "$DEVICES"
      - uses: actions/upload-artifact@v4
        with:
          name: wheels-${{ matrix.family }}-${{ matrix.platform }}
          path: dist/
          if-no-files-found: error

  collect:
    name: collect the wheels
    needs: [core, plugin]
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/download-artifact@v4
        with:
          pattern: wheels-*
          path: dist
      - name: List the wheels
        run: |
          find dist -type f | sort
          {
            echo "| wheel | MiB |"
            echo "|---|---:|"
            find dist -name '*.whl' -printf '%s %f\\n' | sort -k2 | awk '{ printf "| %s | %.1f |\\n", $2, $1 / 1048576 }'
          } >> "$GITHUB_STEP_SUMMARY"
      - uses: actions/upload-artifact@v4
        with:
          name: all-wheels
          path: dist/
          if-no-files-found: error

  publish:
    name: publish to PyPI (version tags only)
    needs: [collect]
    if: github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')
    runs-on: ubuntu-24.04
    # Trusted publishing (OIDC, no stored token): each PyPI project (strata-kernels and strata-kernels-<family>)
    # lists this repository, this workflow file and the environment `pypi` as a trusted publisher.
    environment:
      name: pypi
      url: https://pypi.org/p/strata-kernels
    permissions:
      id-token: write
    steps:
      - uses: actions/checkout@v4
      - name: The tag is the package version
        run: |
          version=$(python3 -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")
          if [ "${GITHUB_REF_NAME#v}" != "$version" ]; then
            echo "::error::tag $GITHUB_REF_NAME does not match the package version $version"; exit 1
          fi
      - uses: actions/download-artifact@v4
        with:
          name: all-wheels
          path: dist
      - name: Only the wheels (the size reports stay in the artifact)
        run: |
          mkdir upload
          find dist -name '*.whl' -exec cp {} upload/ \\;
          ls -l upload
      - uses: pypa/gh-action-pypi-publish@release/v1
        with:
          packages-dir: upload/
"""


# Both wheel jobs check their wheels the same way. The build sets the tag from the glibc its .so files need
# (setup.py, strata_kernels/wheel.py), so nothing is repaired; a plain linux_* tag is an error (PyPI refuses it).
_AUDITWHEEL = """\
for whl in dist/*.whl; do
  auditwheel show "$whl"
  case "$whl" in *-linux_*) echo "::error::$whl has no manylinux tag"; exit 1;; esac
done"""


def workflow(jobs: list[Job]) -> str:
    """The workflow text: the same jobs give the same bytes."""
    fills = {
        "@CORE@": _include(_core_rows(jobs)),
        "@PLUGIN@": _include(_plugin_rows(jobs)),
        "@AUDITWHEEL@": "\n".join(" " * 10 + line for line in _AUDITWHEEL.splitlines()),
        "@CHECK_PYTHON@": CORE_PYTHONS[-1],
        "@PYTHON@": BUILD_PYTHON,
        "@MAX_JOBS@": str(MAX_JOBS),
        "@FIX@": FIX_COMMAND,
    }
    text = _TEMPLATE
    for key, value in fills.items():
        text = text.replace(key, value)
    return text


def _untracked(path: Path) -> bool:
    """``path`` lies in a git checkout that does not track it, so a push would not carry it. False where git cannot
    tell (no git, not a checkout: an unpacked sdist)."""
    try:
        p = subprocess.run(["git", "-C", str(path.parent), "ls-files", "--error-unmatch", path.name],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode != 0 and "did not match any file" in p.stderr


def check(path: Path = WORKFLOW, backends: Path | None = None) -> str | None:
    """None when ``path`` holds the workflow the tables give and git tracks it (where it lies in a checkout);
    otherwise what is wrong and the command that fixes it."""
    want = workflow(expand(load(backends)))
    shown_path = Path(path).resolve()
    shown_path = shown_path.relative_to(ROOT) if shown_path.is_relative_to(ROOT) else shown_path
    try:
        have = Path(path).read_text()
    except FileNotFoundError:
        return f"{shown_path} is missing: run `{FIX_COMMAND}` and commit it"
    if have == want:
        return f"{shown_path} is not tracked by git: commit it" if _untracked(Path(path)) else None
    diff = list(difflib.unified_diff(have.splitlines(), want.splitlines(), "committed", "generated", lineterm="", n=1))
    shown = "\n".join(diff[:40]) + (f"\n... ({len(diff) - 40} more diff lines)" if len(diff) > 40 else "")
    return (f"{shown_path} is stale against backends/*.toml and ci/matrix.py: run `{FIX_COMMAND}` and commit it\n"
            f"{shown}")


def table_text(jobs: list[Job]) -> str:
    rows = [("family", "platform", "runner", "image", "targets")]
    for j in jobs:
        extra = f"  ({', '.join(j.pythons)})" if j.pythons else ""
        rows.append((j.family, j.platform, j.runner, j.image, ";".join(j.targets) + extra))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci/matrix.py", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print the jobs as JSON")
    mode.add_argument("--write", action="store_true", help=f"rewrite {WORKFLOW.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed workflow is missing or stale")
    p.add_argument("--backends", type=Path, default=None, help="a directory of tables (default: backends/)")
    args = p.parse_args(argv)
    try:
        if args.check:
            problem = check(backends=args.backends)
            if problem:
                print(f"ci/matrix.py: {problem}", file=sys.stderr)
                return 1
            print(f"{WORKFLOW.relative_to(ROOT)} is up to date")
            return 0
        jobs = expand(load(args.backends))
        if args.write:
            text = workflow(jobs)
            if WORKFLOW.is_file() and WORKFLOW.read_text() == text:
                print(f"{WORKFLOW.relative_to(ROOT)} is up to date")
            else:
                WORKFLOW.parent.mkdir(parents=True, exist_ok=True)
                WORKFLOW.write_text(text)
                print(f"wrote {WORKFLOW.relative_to(ROOT)} ({len(jobs)} jobs)")
        elif args.json:
            print(json.dumps([asdict(j) for j in jobs], indent=2))
        else:
            sys.stdout.write(table_text(jobs))
    except (StrataError, ValueError) as e:
        print(f"ci/matrix.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
