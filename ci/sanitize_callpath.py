"""The engine call path under compute-sanitizer memcheck / racecheck (ci/gpu_callpath.sh, stage `sanitize`): plan.run,
the plain calls and the torch ops (decode chunk + merge and split, prompt) on a small int8 case with holes and width-0
queries; a CUDA graph of each captured, its inputs changed in place and replayed, equal to eager; then the error word:
a bad id in an eager call and in a replay, reported lazily (next call, sk.check_errors()), later calls correct.
Exit 0 when every step ran and matched (the sanitizer's own exit status says whether it found anything)."""
import sys

import numpy as np
import torch

import strata_kernels as sk
from strata_kernels import testing

CTX, N_Q = 2100, 3   # the split decode needs a context this long to run (ci/sanitize_case.py)


def fresh_case(seed):
    case = testing.make_case("int8", CTX, N_Q, seed=seed, holes=True, width0=True)
    for i, w in enumerate(case.width):
        case.ids[i, w:] = np.int32(2**31 - 1)  # past the width: never read
    return case


def capture(run):
    """A CUDA graph of ``run()``, warmed up once on a side stream first (plans, scratch, error words exist then)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    return g


def expect_report(what, fn, pattern):
    try:
        fn()
    except ValueError as e:
        if pattern not in str(e):
            raise AssertionError(f"{what}: unexpected sentence: {e}") from None
        print(f"  {what}: reported: {str(e)[:100]}", flush=True)
        return
    raise AssertionError(f"{what}: no report")


def main() -> int:
    q, kv, ids, width = testing.to_torch(fresh_case(1), "cuda")
    pools = ("int8", kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table)
    ran = 0
    for op, variant in (("decode", None), ("decode", "split"), ("prompt", None)):
        call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
        ref = call(q, kv, ids, width, variant=variant)
        p = sk.plan(kv, op=op, max_queries=N_Q, cap=ids.shape[1], variant=variant)
        torch_op = getattr(torch.ops.strata_kernels, f"qsa_{op}_attn_out")
        runs = {"plan.run": lambda q, i, w, o: p.run(q, i, w, out=o),
                "plain call": lambda q, i, w, o: call(q, kv, i, w, out=o, variant=variant),
                "torch op": lambda q, i, w, o: torch_op(q, *pools, i, w, o, variant)}
        for how, run in runs.items():
            out = torch.empty_like(q)
            run(q, ids, width, out)
            torch.cuda.synchronize()
            assert torch.equal(out, ref), (op, variant, how, "eager")
            # Capture, change the inputs in place, replay, compare.
            gq, gids, gw, gout = q.clone(), ids.clone(), width.clone(), torch.empty_like(q)
            g = capture(lambda: run(gq, gids, gw, gout))
            nq, nkv, nids, nw = testing.to_torch(fresh_case(2), "cuda")
            gq.copy_(nq)
            gids.copy_(nids)
            gw.copy_(nw)
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            assert torch.equal(gout, call(nq, kv, nids, nw, variant=variant)), (op, variant, how, "replay")
            ran += 1
            print(f"ran {op} {variant or 'default'} {how}: eager + capture + replay", flush=True)
            del g
    sk.check_errors()

    # The error word: a bad id in an eager plan.run, reported at the next call; later calls correct.
    p = sk.plan(kv, op="decode", max_queries=N_Q, cap=ids.shape[1])
    good = p.run(q, ids, width)
    bad = ids.clone()
    bad[1, 0] = 10**8
    p.run(q, bad, width)
    torch.cuda.synchronize()
    expect_report("eager bad id, next call", lambda: p.run(q, ids, width), "ids: query 1, position 0")
    assert torch.equal(p.run(q, ids, width), good)
    # ... in a replay, reported by sk.check_errors(); replays after it correct.
    gids, gout = ids.clone(), torch.empty_like(q)
    g = capture(lambda: p.run(q, gids, width, out=gout))
    gids[0, 0] = -3                    # query 0: a non-empty width (width0 empties queries i % 5 == 2)
    g.replay()
    torch.cuda.synchronize()
    expect_report("bad id in a replay, sk.check_errors()", sk.check_errors, "ids: query 0, position 0")
    gids.copy_(ids)
    g.replay()
    torch.cuda.synchronize()
    sk.check_errors()
    assert torch.equal(gout, good)
    # ... through the torch op.
    out = torch.empty_like(q)
    torch.ops.strata_kernels.qsa_decode_attn_out(q, *pools, bad, width, out)
    torch.cuda.synchronize()
    expect_report("torch op bad id, sk.check_errors()", sk.check_errors, "ids: query 1, position 0")
    torch.ops.strata_kernels.qsa_decode_attn_out(q, *pools, ids, width, out)
    torch.cuda.synchronize()
    assert torch.equal(out, good)
    print(f"sanitizer workload (call path): {ran} eager + capture + replay runs, 3 error reports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
