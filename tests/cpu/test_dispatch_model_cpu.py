"""The CPU plugin's which() and the Python statement of the dispatch (dispatch_model, used by `explain`) agree."""
import pytest

import strata_kernels as sk
from strata_kernels import dispatch_model, testing


@pytest.mark.parametrize("fmt", dispatch_model.FORMATS)
@pytest.mark.parametrize("op", ["prompt", "decode"])
def test_cpu_which_matches_the_model(fmt, op):
    case = testing.make_case(fmt, 600, 4)
    got = sk.which(case.q, case.kv, case.ids, case.width, path=op)
    want = dispatch_model.choose("cpu", "cpu", op, fmt, ["fp32"], env={})
    assert got.variant == want[0]


def test_explain_strict_fails_for_a_device_without_plugin(capsys, monkeypatch):
    from strata_kernels import cli
    monkeypatch.delenv("STRATA_KERNELS_PLUGIN_PATH", raising=False)
    monkeypatch.delenv("STRATA_KERNELS_TARGET", raising=False)
    assert cli.main(["explain", "--strict", "--simulate", "cpu"]) == 0
    assert cli.main(["explain", "--simulate", "gfx1100"]) == 0           # without --strict: a report, not a verdict
    assert cli.main(["explain", "--strict", "--simulate", "gfx1100"]) == 4
    assert "no plugin for 1 device(s): hip:0 gfx1100" in capsys.readouterr().err
