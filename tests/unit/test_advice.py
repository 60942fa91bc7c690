"""The advice users are given names commands that exist: every `strata-kernels …` command that `explain` and
docs/building.md suggest parses with the real command line, names a real family and targets of that family, and
every `pip install` of a plugin wheel names a wheel the project builds."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from strata_kernels import cli, resolve, targets, wheel

ROOT = Path(__file__).resolve().parents[2]


def _commands(text: str) -> list[str]:
    """Commands in `backticks` and in fenced code blocks."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S)
    cmds = []
    block_lines = [re.split(r"\s{2,}", line.strip())[0] for b in blocks for line in b.splitlines()]  # no comments
    for quoted in re.findall(r"`([^`\n]+)`", text) + block_lines:
        for part in re.split(r"\s*&&\s*", quoted.split("#")[0].strip()):
            if part.startswith(("strata-kernels ", "pip install")) or re.match(r"STRATA_TARGETS=\S+ pip ", part):
                cmds.append(part)
    return cmds


def _check(cmd: str) -> None:
    words = shlex.split(cmd)
    if words[0].startswith("STRATA_TARGETS="):
        targets.parse_target_list(words[0].split("=", 1)[1])          # raises on an unknown target
        assert words[1:3] in (["pip", "install"], ["pip", "wheel"]) and "." in words, cmd
        return
    if words[0] == "pip":
        names = [w for w in words[2:] if not w.startswith("-") and w not in ("dist", ".")]
        known = {"strata-kernels"} | {wheel.dist_name(f) for f in wheel.families()}
        assert set(names) <= known, f"{cmd}: {set(names) - known} is not a wheel the project builds"
        return
    parser = cli.make_parser()
    if len(words) == 2:                                                  # a command named in prose
        sub = next(a for a in parser._actions if a.dest == "command")
        assert words[1] in sub.choices, f"{cmd}: no such command"
        return
    args = parser.parse_args(words[1:])                                  # SystemExit on an unknown command/option
    if args.command == "wheel":
        assert args.family in wheel.families(), cmd
        if args.targets:
            members = {t.name for t in wheel.family_targets(args.family)}
            assert {s.target.name for s in targets.parse_target_list(args.targets)} <= members, cmd
    if args.command == "build" and args.targets:
        targets.parse_target_list(args.targets)


@pytest.mark.parametrize("device", ["sm_70", "sm_86", "sm_90", "sm_121", "gfx1030", "gfx1100", "sycl"])
def test_explain_advice_names_commands_that_exist(device, monkeypatch):
    monkeypatch.setattr(resolve, "discover", lambda: ([], []))
    text = resolve.explain(device)
    cmds = _commands(text)
    assert any(c.startswith("strata-kernels wheel --family") for c in cmds), text
    assert any(c.startswith("pip install --find-links dist strata-kernels-") for c in cmds), text
    for cmd in cmds:
        _check(cmd)


def test_building_guide_commands_exist():
    cmds = _commands((ROOT / "docs" / "building.md").read_text())
    assert len(cmds) >= 5
    for cmd in cmds:
        if cmd.startswith("pip install") and cmd.split()[-1] in (".", "strata-kernels"):
            continue
        _check(cmd)


def test_a_wrong_command_is_caught():
    with pytest.raises(SystemExit):
        _check("strata-kernels wheel --famly cuda13 --out dist")
    with pytest.raises(AssertionError):
        _check("pip install --find-links dist strata-kernels-cuda14")
    with pytest.raises(AssertionError):
        _check("strata-kernels uninstall")


def test_readme_commands_exist():
    """Every `strata-kernels …` command in the README (code blocks, the command-line summary, prose) parses."""
    text = (ROOT / "README.md").read_text()
    cmds = [c for c in _commands(text) if c.startswith("strata-kernels ")]
    assert len(cmds) >= 10 and any(c.startswith("strata-kernels clean") for c in cmds)
    for cmd in cmds:
        cmd = re.sub(r" \[[^]]*\]", "", cmd).replace("...", "")          # optional parts of the summary
        _check(cmd.replace("<new>", "sm_90"))                             # a placeholder in "Adding a target"
