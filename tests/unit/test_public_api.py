"""The public API is what `dir(strata_kernels)` lists, and every listed name resolves (lazily, without torch)."""
from __future__ import annotations

import subprocess
import sys

import strata_kernels as sk
from strata_kernels import cli


def test_dir_lists_the_public_api():
    names = dir(sk)
    for name in ("KVCache", "qsa_prompt_attn", "qsa_decode_attn", "which", "explain", "reference", "testing",
                 "Unsupported", "__version__"):
        assert name in names, f"dir(strata_kernels) hides {name}"
    assert set(sk.__all__) <= set(names)


def test_every_public_name_resolves_without_torch():
    code = ("import sys, strata_kernels as sk; [getattr(sk, n) for n in sk.__all__]; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_wheel_names_an_unknown_family_before_asking_for_out(capsys):
    assert cli.main(["wheel", "--family", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "unknown family 'nosuch'" in err and "--out" not in err, err
    assert cli.main(["wheel", "--family", "cuda13"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err
