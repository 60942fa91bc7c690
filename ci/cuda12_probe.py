"""One small call per (variant, operation, format) of a plugin, each in its own process with CUDA_LAUNCH_BLOCKING=1,
so that a kernel that faults is named and cannot take the others with it (an illegal instruction ends the CUDA
context of its process). The variants are the plugin's manifest's; the operations and formats each takes come from
targets.VARIANT_RULES: INT8 for every operation a variant serves, FP16 for one of them where the variant takes it.

    python3 ci/cuda12_probe.py PLUGIN [--json PATH] [--jobs N]

with STRATA_KERNELS_TARGET / STRATA_KERNELS_PLUGIN_PATH set so that PLUGIN is the one chosen (ci/gpu_cuda12.sh).
Exit status 0 when every call ran and gave finite results, 1 otherwise."""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ONE = r"""
import sys, torch, strata_kernels as sk
from strata_kernels import testing
v, fmt, op = sys.argv[1:4]
case = testing.make_case(fmt, 2100, 4)
call = sk.qsa_prompt_attn if op == "prompt" else sk.qsa_decode_attn
out = call(*testing.to_torch(case, "cuda"), variant=v)
torch.cuda.synchronize()
print("finite" if torch.isfinite(out).all() else "NON-FINITE")
"""


def calls(variants: list[str]) -> list[tuple[str, str, str]]:
    """(variant, format, operation) to probe for the plugin's variants."""
    from strata_kernels.targets import VARIANT_RULES
    out = []
    for v in variants:
        rule = VARIANT_RULES.get(v)
        if rule is None:
            continue
        ops = [op for op in ("prompt", "decode") if op in rule["ops"]]
        if 1 in rule["formats"]:
            out += [(v, "int8", op) for op in ops]
        if 0 in rule["formats"]:
            out.append((v, "fp16", ops[0]))
    return out


def probe(v: str, fmt: str, op: str, timeout: int) -> dict:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    try:
        p = subprocess.run([sys.executable, "-c", ONE, v, fmt, op], capture_output=True, text=True, env=env,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"variant": v, "format": fmt, "op": op, "rc": None, "result": "TIMEOUT", "error": f"> {timeout} s"}
    last = (p.stdout.strip().splitlines() or [""])[-1]
    err = [ln for ln in p.stderr.splitlines() if "error" in ln.lower()][-1:] if p.returncode else []
    return {"variant": v, "format": fmt, "op": op, "rc": p.returncode, "result": last, "error": " ".join(err)[:300]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plugin", help="the plugin whose manifest lists the variants to probe")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--jobs", type=int, default=4, help="probes at once (each its own process and CUDA context)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per probe")
    args = ap.parse_args()
    from strata_kernels import resolve
    m = resolve.read_manifest(args.plugin)
    todo = calls(m["variants"])
    print(f"{os.path.basename(args.plugin)}: {m['target']} {m['toolchain']['name']} {m['toolchain']['version']}, "
          f"variants {', '.join(m['variants'])}; {len(todo)} probes", flush=True)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda c: probe(*c, args.timeout), todo))
    for r in results:
        print(f"{r['variant']:8} {r['format']:5} {r['op']:7} rc={r['rc']} {r['result']} {r['error']}".rstrip())
    ok = [r for r in results if r["rc"] == 0 and r["result"] == "finite"]
    bad = sorted({r["variant"] for r in results if r not in ok})
    print(f"probes: {len(ok)} of {len(results)} ran and gave finite results; variants with a failed probe: "
          f"{', '.join(bad) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"plugin": args.plugin, "target": m["target"], "toolchain": m["toolchain"],
                       "variants": m["variants"], "failed_variants": bad, "results": results}, f, indent=1)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
