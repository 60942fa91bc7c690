"""Each variant of the forced plugin, one small call each in its own process (CUDA_LAUNCH_BLOCKING=1), so that a
kernel that faults is named: python3 ci/cuda12_probe.py  (with STRATA_KERNELS_TARGET / STRATA_KERNELS_PLUGIN_PATH set
as ci/gpu_cuda12.sh sets them)."""
import os
import subprocess
import sys

ONE = r"""
import sys, torch, strata_kernels as sk
from strata_kernels import testing
v, fmt, op = sys.argv[1:4]
case = testing.make_case(fmt, 2100, 4)
t = lambda a: None if a is None else torch.from_numpy(a).cuda()
kv = case.kv
b = {"int8": lambda: sk.KVCache.int8(t(kv.k), t(kv.k_scale), t(kv.v), t(kv.v_scale), t(kv.page_table)),
     "fp16": lambda: sk.KVCache.fp16(t(kv.k), t(kv.v), t(kv.page_table))}[fmt]()
call = sk.qsa_prompt_attn if op == "prompt" else sk.qsa_decode_attn
out = call(t(case.q), b, t(case.ids), t(case.width), variant=v)
torch.cuda.synchronize()
print("finite" if torch.isfinite(out).all() else "NON-FINITE")
"""
runs = [("fp32", "int8", "decode"), ("fp32", "fp16", "prompt"), ("v1", "int8", "prompt"), ("v2", "int8", "prompt"),
        ("imma", "int8", "prompt"), ("split", "int8", "decode"), ("grouped", "int8", "prompt"),
        ("flash", "int8", "decode"), ("flash", "fp16", "decode")]
env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
for v, fmt, op in runs:
    p = subprocess.run([sys.executable, "-c", ONE, v, fmt, op], capture_output=True, text=True, env=env, timeout=120)
    last = (p.stdout.strip().splitlines() or [""])[-1]
    err = [ln for ln in p.stderr.splitlines() if "Error" in ln or "error" in ln][-1:] if p.returncode else []
    print(f"{v:8} {fmt:5} {op:7} rc={p.returncode} {last} {' '.join(err)[:200]}", flush=True)
