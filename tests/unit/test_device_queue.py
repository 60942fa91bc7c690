"""The device runs queued in docs/notes/device-queue.md stay runnable: every patch stack its list names applies to the
tree as it stands (to a copy of the files the patches touch), and every patch that a queued command or the scripts it
runs name is on that list."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUEUE = ROOT / "docs" / "notes" / "device-queue.md"


def _stacks() -> list[list[str]]:
    text = QUEUE.read_text()
    block = text.split("## The patches the queue applies", 1)[1].split("```", 2)[1]
    return [[p.strip() for p in line.split(" + ")] for line in block.splitlines() if line.strip()]


def _touched(patch: Path) -> set[str]:
    """The paths a patch reads (its old sides; /dev/null, a new file, reads nothing)."""
    return set(re.findall(r"^--- a/(\S+)", patch.read_text(), re.M))


def test_the_list_is_read():
    text = QUEUE.read_text().split("## The patches the queue applies", 1)[1]
    stacks = _stacks()
    assert stacks or "None at present" in text, "the list of patches is empty but does not say so"
    assert all(p.startswith("docs/notes/") and p.endswith(".patch") for s in stacks for p in s), stacks


@pytest.mark.parametrize("stack", [" + ".join(s) for s in _stacks()])
def test_each_stack_applies_to_the_tree(stack, tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    patches = [ROOT / p for p in stack.split(" + ")]
    for p in patches:
        assert p.is_file(), f"{p.relative_to(ROOT)} is listed in {QUEUE.relative_to(ROOT)} but absent"
    for rel in set().union(*(_touched(p) for p in patches)):
        if (ROOT / rel).is_file():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / rel, tmp_path / rel)
    # outside a repository (none is looked for above tmp_path), git apply patches the working directory's files
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    for p in patches:
        r = subprocess.run(["git", "apply", str(p)], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert r.returncode == 0, f"{p.relative_to(ROOT)} (in {stack}) does not apply to the tree:\n{r.stderr}"


def test_every_queued_patch_is_listed():
    listed = {Path(p).name for s in _stacks() for p in s}
    head = QUEUE.read_text().split("## The patches the queue applies", 1)[0]
    table = "\n".join(line for line in head.splitlines() if line.startswith("| "))  # the queue's rows, not history
    named = set(re.findall(r"[\w.-]+\.patch", table))
    for script in set(re.findall(r"ci/gpu_\w+\.sh", table)):
        named |= set(re.findall(r"docs/notes/([\w.-]+\.patch)", (ROOT / script).read_text()))
    assert named or not listed, "no patch found in the queue's commands (the scan is broken)"
    assert named <= listed, f"queued but not in the list of patches to check: {sorted(named - listed)}"
