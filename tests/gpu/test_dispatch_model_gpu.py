"""The CUDA plugin's own which() against the Python statement of QSA_SPEC §5.4 (dispatch_model) that `explain`
uses, on the device present, for every format × operation at 4 and 64 queries (the decode rule's grouped blocks)
under a set of switch combinations, and INT8 and FP16 calls on long caches (the decode rule's windows) under the default
ones.
The plugins read their switches once per process, so each combination runs in a fresh interpreter."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata_kernels import dispatch_model

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys
import torch
import strata_kernels as sk
from strata_kernels import ops, resolve, testing
dev = torch.device("cuda", 0)
out = {"arch": None, "variants": None, "which": {}, "sms": torch.cuda.get_device_properties(0).multi_processor_count}
res = resolve.resolution_for("cuda", 0)
out["arch"] = res.device.arch
out["variants"] = res.chosen.plugin.manifest.get("dispatch_variants")
cases = [(f, 2100, n) for f in ("fp16", "int8", "q4_0", "k8v4") for n in (4, 64)]
if "--long" in sys.argv:  # the decode rule's long caches: a ONE form's windows (262144 cells), the search path's
    cases += [("int8", 262144, 32), ("int8", 262144, 48), ("int8", 524288, 64), ("int8", 524288, 72),
              ("fp16", 524288, 44), ("fp16", 524288, 48)]
    # (128, 4), 8 KV heads, where the plugin carries it: 16 queries a group, whose running union outgrows shared
    # memory at cap 2051, so grouped only where a ONE cluster form takes the union (up to eight windows, 131072 cells,
    # in more than one wave where groups are many: 2128 queries, 133 groups; not 262144 cells)
    try:
        ops.plugin_variants(("cuda", 0), (128, 4))
        out["g4"] = True
    except ValueError:
        out["g4"] = False
    g4 = {"head_dim": 128, "group": 4, "n_head_kv": 8}
    if out["g4"]:
        cases += [("int8", 32768, 16, g4), ("int8", 32768, 2128, g4), ("int8", 131072, 272, g4),
                  ("int8", 262144, 32, g4)]
for fmt, ctx, n_q, *geo in cases:
    case = testing.make_case(fmt, ctx, n_q, **(geo[0] if geo else {}))
    shape = [int(case.q.shape[2]), int(case.q.shape[1]) // int(case.kv.n_head_kv), int(case.kv.n_head_kv)]
    cells = 4 * int(case.kv.page_table.shape[0])
    placed = testing.to_torch(case, dev)
    for op in ("prompt", "decode"):
        w = sk.which(*placed, path=op)
        out["which"][f"{op}/{fmt}/{n_q}/{ctx}/{shape[1]}"] = [w.variant, w.reason, shape, cells, int(case.ids.shape[1])]
print("JSON" + json.dumps(out))
"""

SWITCH_SETS = [
    {},
    {"STRATA_PROMPT_ATTN_IMMA": "1"},
    {"STRATA_PROMPT_ATTN_V1": ""},
    {"STRATA_PROMPT_ATTN_OLD": "1"},
    {"STRATA_QSA_WARP": "attn", "STRATA_PA_V2T": "1"},
    {"STRATA_EMULATE_CC": "75", "STRATA_PROMPT_ATTN_Q4": "1"},
    {"STRATA_PROMPT_ATTN_Q4": "0", "STRATA_QSA_SPLIT_ATTN": "1"},
    {"STRATA_ATTN_DAILY": "1", "STRATA_ATTN_LANECELL": "1"},
    {"STRATA_DECODE_GROUPED": "0", "STRATA_PROMPT_ATTN_GROUPED": "0"},
]


@pytest.mark.parametrize("switches", SWITCH_SETS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()) or "none")
def test_model_agrees_with_the_plugin(torch_cuda, switches):
    env = {k: v for k, v in os.environ.items() if not (k.startswith("STRATA_") and not k.startswith("STRATA_KERNELS_"))}
    env.update(switches)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # the long caches under the default switches only (their cases take a few seconds each to make)
    argv = ["--long"] if not switches else []
    p = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(next(line for line in p.stdout.splitlines() if line.startswith("JSON"))[4:])
    arch, variants = got["arch"], got["variants"]
    assert len(got["which"]) == (16 + 12 + 8 * got.get("g4", False) if argv else 16)
    for key, (variant, reason, shape, cells, cap) in got["which"].items():
        op, fmt, n_q, *_ = key.split("/")
        want, why = dispatch_model.choose("cuda", arch, op, fmt, variants, env=switches, n_q=int(n_q),
                                          shape=(*shape, got["sms"]), cells=cells, cap=cap)
        assert variant == want, f"{key} under {switches}: plugin {variant} ({reason}); model {want} ({why})"
