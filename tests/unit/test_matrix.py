"""The CI matrix (ARCHITECTURE §9): ci/matrix.py expands backends/*.toml into one wheel job per family x platform and
generates .github/workflows/wheels.yml from them, which is committed (GitHub runs only committed workflows); the
committed workflow must be the one the tables give today, and --check fails when it is missing or differs."""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from strata_kernels.errors import TargetError

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / ".github" / "workflows" / "wheels.yml"


def _load_matrix():
    spec = importlib.util.spec_from_file_location("ci_matrix", ROOT / "ci" / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


matrix = _load_matrix()


@pytest.fixture(scope="module")
def table():
    return matrix.load()


@pytest.fixture(scope="module")
def jobs(table):
    return matrix.expand(table)


def _job(jobs, family, platform="linux-x86_64"):
    (job,) = [j for j in jobs if j.family == family and j.platform == platform]
    return job


@pytest.fixture()
def tables(tmp_path):
    """A private copy of backends/ to edit."""
    shutil.copytree(ROOT / "backends", tmp_path / "backends")
    return tmp_path / "backends"


def test_the_committed_workflow_is_the_generated_one():
    problem = matrix.check(COMMITTED)
    assert problem is None, problem


def test_a_missing_or_edited_workflow_is_caught(tmp_path):
    """The check above has teeth: a copy of the committed file that is missing, edited by hand or one line short
    fails, naming the fix and showing the difference."""
    copy = tmp_path / "wheels.yml"
    problem = matrix.check(copy)
    assert problem and "is missing" in problem and "python ci/matrix.py --write" in problem
    committed = COMMITTED.read_text()
    copy.write_text(committed)
    assert matrix.check(copy) is None
    copy.write_text(committed.replace('MAX_JOBS: "', 'MAX_JOBS: "1', 1))
    problem = matrix.check(copy)
    assert problem and "is stale" in problem and "python ci/matrix.py --write" in problem and "MAX_JOBS" in problem
    copy.write_text("".join(committed.splitlines(keepends=True)[:-1]))
    assert "is stale" in (matrix.check(copy) or "")



def test_a_workflow_git_does_not_track_is_caught(tmp_path):
    """Written but not committed (or ignored), a push carries no workflow and GitHub runs nothing."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    written = tmp_path / ".github" / "workflows" / "wheels.yml"
    written.parent.mkdir(parents=True)
    written.write_text(COMMITTED.read_text())
    problem = matrix.check(written)
    assert problem and "is not tracked by git: commit it" in problem
    subprocess.run(["git", "-C", str(tmp_path), "add", str(written)], check=True)
    assert matrix.check(written) is None


def test_one_job_per_family_and_platform(jobs):
    keys = [(j.family, j.platform) for j in jobs]
    assert len(keys) == len(set(keys))
    assert sorted(keys) == sorted([
        ("core", "linux-x86_64"), ("core", "linux-aarch64"), ("cuda13", "linux-x86_64"), ("cuda13", "linux-aarch64"),
        ("cuda12", "linux-x86_64"), ("rocm", "linux-x86_64"), ("sycl", "linux-x86_64"),
    ])
    for j in jobs:
        assert j.runner == {"linux-x86_64": "ubuntu-24.04", "linux-aarch64": "ubuntu-24.04-arm"}[j.platform]


def test_every_target_is_in_exactly_the_jobs_of_its_families(table, jobs):
    for t in table.values():
        holders = {j.family for j in jobs if t.name in j.target_names}
        assert holders == set(t.families), t.name
    for j in jobs:
        assert all(j.family in table[name].families for name in j.target_names), j


def test_sm70_only_in_cuda12(jobs):
    assert [j.family for j in jobs if "sm_70" in j.target_names] == ["cuda12"]


def test_cuda13_carries_sm75_to_sm120_with_the_ptx_policy(jobs):
    for platform in ("linux-x86_64", "linux-aarch64"):
        assert _job(jobs, "cuda13", platform).targets == ("sm_75", "sm_80+PTX", "sm_86", "sm_89", "sm_90", "sm_100",
                                                          "sm_103", "sm_110", "sm_120+PTX")
    assert "sm_120" not in _job(jobs, "cuda12").target_names
    assert "sm_80+PTX" in _job(jobs, "cuda12").targets


def test_images_are_the_toolkits_own(jobs):
    assert _job(jobs, "core").image == "quay.io/pypa/manylinux_2_28_x86_64"
    assert _job(jobs, "core", "linux-aarch64").image == "quay.io/pypa/manylinux_2_28_aarch64"
    assert _job(jobs, "core").pythons == ("cp311-cp311", "cp312-cp312")
    assert _job(jobs, "cuda13").image.startswith("nvidia/cuda:13.")
    assert _job(jobs, "cuda12").image.startswith("nvidia/cuda:12.9")
    assert _job(jobs, "rocm").image.startswith("rocm/dev-ubuntu-22.04:6.")
    assert _job(jobs, "sycl").image.startswith("intel/oneapi-basekit:2025.")


def test_the_workflow_runs_every_job(jobs):
    text = matrix.workflow(jobs)
    assert text == matrix.workflow(matrix.expand(matrix.load())), "generation is not deterministic"
    for j in jobs:
        assert f'image: "{j.image}"' in text and f'targets: "{";".join(j.targets)}"' in text
    assert "python -m strata_kernels.cli wheel --family" in text and "SCCACHE_GHA_ENABLED" in text


def test_the_workflow_parses_as_yaml(jobs):
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(matrix.workflow(jobs))
    assert set(doc["jobs"]) == {"core", "plugin", "collect", "publish"}
    plugin = doc["jobs"]["plugin"]["strategy"]["matrix"]["include"]
    assert [(r["family"], r["platform"]) for r in plugin] == [(j.family, j.platform) for j in jobs if j.family != "core"]


def test_release_job_publishes_every_wheel_on_a_version_tag_only(jobs):
    text = matrix.workflow(jobs)
    pub = text[text.index("\n  publish:"):]
    assert "needs: [collect]" in pub and "startsWith(github.ref, 'refs/tags/v')" in pub
    assert "id-token: write" in pub and "name: pypi" in pub, "trusted publishing needs OIDC and the environment"
    assert "pypa/gh-action-pypi-publish@release/v1" in pub and "name: all-wheels" in pub
    assert "password" not in pub and "secrets." not in pub, "trusted publishing stores no token"
    assert 'tags: ["v*"]' in text


def test_a_changed_table_makes_the_committed_workflow_stale(tables, tmp_path):
    cuda = tables / "cuda.toml"
    cuda.write_text(cuda.read_text() + '\n[targets.sm_87]\narch = "87"\nfamilies = ["cuda13"]\n'
                    'toolkit = { min = "11.8" }\nfeatures = ["cp_async"]\nvariants = ["fp32"]\n')
    changed = matrix.workflow(matrix.expand(matrix.load(tables)))
    assert "sm_86;sm_87;sm_89" in changed
    assert changed != matrix.workflow(matrix.expand(matrix.load()))

    current = tmp_path / "wheels.yml"
    current.write_text(matrix.workflow(matrix.expand(matrix.load())))
    assert matrix.check(current) is None
    problem = matrix.check(current, tables)
    assert problem and "python ci/matrix.py --write" in problem
    assert "sm_87" in problem, "the message shows the difference"


def test_check_command_names_the_fix(tables):
    ok = subprocess.run([sys.executable, str(ROOT / "ci" / "matrix.py"), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    sycl = tables / "sycl.toml"
    sycl.write_text(sycl.read_text() + '\n[targets.sycl_xe]\nfamilies = ["sycl"]\nfeatures = ["subgroup32"]\n'
                    'variants = ["fp32"]\ngeometries = [{ head_dim = 256, group = 12 }]\n')
    stale = subprocess.run([sys.executable, str(ROOT / "ci" / "matrix.py"), "--check", "--backends", str(tables)],
                           capture_output=True, text=True)
    assert stale.returncode == 1
    assert "stale" in stale.stderr and "python ci/matrix.py --write" in stale.stderr


def test_a_family_without_an_image_is_an_error(tables):
    sycl = tables / "sycl.toml"
    sycl.write_text(sycl.read_text().replace('families = ["sycl"]', 'families = ["oneapi"]'))
    with pytest.raises(TargetError, match=r"sycl\.toml: \[targets\.sycl\] names family 'oneapi'.*FAMILIES"):
        matrix.expand(matrix.load(tables))


def test_a_target_outside_its_toolkit_range_is_an_error(tables):
    cuda = tables / "cuda.toml"
    text = cuda.read_text()
    volta = text.index("[targets.sm_70]")
    cuda.write_text(text[:volta] + text[volta:].replace('families = ["cuda12"]', 'families = ["cuda12", "cuda13"]', 1))
    with pytest.raises(TargetError, match=r"sm_70.* to 12\.9, but family cuda13 is built with 13\."):
        matrix.expand(matrix.load(tables))
