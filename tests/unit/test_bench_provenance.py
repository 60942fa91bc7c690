"""A bench JSON names what it measured: the commit, and whether the tree's tracked files differed from it (with a hash
of that difference), so a result taken on a tree with uncommitted changes says so."""
import hashlib
import shutil
import subprocess

import pytest

from strata_kernels import bench

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True).stdout


def test_a_clean_tree_and_a_modified_one(tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_KERNELS_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "k.cu.j2").write_text("a\n")
    _git(tmp_path, "add", "k.cu.j2")
    _git(tmp_path, "commit", "-q", "-m", "one")
    assert bench._tree_state(str(tmp_path)) == {"tree_modified": False, "tree_diff_sha256": None}
    (tmp_path / "untracked.txt").write_text("not part of the tree's tracked files\n")
    assert bench._tree_state(str(tmp_path))["tree_modified"] is False
    (tmp_path / "k.cu.j2").write_text("b\n")
    state = bench._tree_state(str(tmp_path))
    diff = _git(tmp_path, "diff", "--binary", "HEAD")
    assert state == {"tree_modified": True, "tree_diff_sha256": hashlib.sha256(diff).hexdigest()}
    (tmp_path / "k.cu.j2").write_text("c\n")
    assert bench._tree_state(str(tmp_path))["tree_diff_sha256"] != state["tree_diff_sha256"]


def test_unknown_without_git_or_with_the_commit_given(tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_KERNELS_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path either
    assert bench._tree_state(str(tmp_path)) == {"tree_modified": None, "tree_diff_sha256": None}
    monkeypatch.setenv("STRATA_KERNELS_COMMIT", "abc")
    assert bench._tree_state() == {"tree_modified": None, "tree_diff_sha256": None}
