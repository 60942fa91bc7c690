"""Two GPUs in one process (issue 16): calls on the second device, per-device plans and error words, one host thread
per device, CUDA-graph capture on cuda:1, explain's listing. Skipped with the reason on a machine with fewer than
two CUDA devices; the Python side is also tested without a GPU (tests/cpu/test_two_devices_fake.py).

Run on the 2-GPU machine by ci/gpu_two_devices.sh. The two devices are assumed to be of one model (the bitwise
comparisons between them need the same kernels and the same decode split sizes)."""
import ctypes
import subprocess
import sys
import threading

import pytest

import strata_kernels as sk
from strata_kernels import testing

from test_callpath_gpu import _fresh_inputs, _graph_equal_to_eager  # the capture + replay check of one device

CTX, N_Q = 2100, 16


@pytest.fixture(scope="module")
def two(torch_cuda):
    torch = torch_cuda
    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip(f"needs two CUDA devices in one process; this machine has {n} (run ci/gpu_two_devices.sh on "
                    f"an nvidia-h200-x2)")
    names = {torch.cuda.get_device_name(d) for d in (0, 1)}
    if len(names) != 1:
        pytest.skip(f"the bitwise comparisons need two devices of one model, got {sorted(names)}")
    return torch


def _clean(torch):
    """Leave no pending error word on either device for the next test."""
    for d in (0, 1):
        torch.cuda.synchronize(d)
    for _ in range(4):
        try:
            sk.check_errors()
            return
        except ValueError:
            pass


def _on(torch, to_cuda, case, device):
    """(q, kv, ids, width) of the case on cuda:device (to_cuda moves to the current device)."""
    with torch.cuda.device(device):
        return to_cuda(case)


def _call(op):
    return sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn


def _libcuda():
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        pytest.skip(f"libcuda.so.1: {e}")


def _current_context() -> int:
    """The driver's current context of this thread (what cudaGetDevice reads), as an integer."""
    ctx = ctypes.c_void_p()
    assert _libcuda().cuCtxGetCurrent(ctypes.byref(ctx)) == 0
    return ctx.value or 0


@pytest.fixture(scope="module")
def refs(two, to_cuda):
    """Per op: the output of the call on cuda:0 with cuda:0 current (host copies)."""
    torch = two
    case = testing.make_case("int8", CTX, N_Q, seed=16)
    with torch.cuda.device(0):
        args = to_cuda(case)
        out = {op: _call(op)(*args).cpu() for op in ("decode", "prompt")}
    _clean(torch)
    return case, out


# ------------------------------------------------------------------------------------- calls on the other device

@pytest.mark.parametrize("op", ["decode", "prompt"])
@pytest.mark.parametrize("how", ["plain", "plan", "torch_op"])
@pytest.mark.parametrize("arrays,current", [(1, 0), (0, 1)])
def test_a_call_on_the_other_device_equals_cuda0_and_leaves_the_current_device(two, to_cuda, refs, op, how, arrays,
                                                                                current):
    torch = two
    case, ref = refs
    q, kv, ids, width = _on(torch, to_cuda, case, arrays)
    out = torch.full_like(q, float("nan"))
    with torch.cuda.device(current):
        torch.cuda.current_stream().synchronize()   # makes the current device's context current in this thread
        ctx = _current_context()
        if how == "plain":
            _call(op)(q, kv, ids, width, out=out)
        elif how == "plan":
            sk.plan(kv, op=op, max_queries=N_Q, cap=ids.shape[1], n_head=q.shape[1]).run(q, ids, width, out=out)
        else:
            name = f"qsa_{op}_attn_out"
            getattr(torch.ops.strata_kernels, name)(q, "int8", kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table,
                                                    ids, width, out)
        assert torch.cuda.current_device() == current
        assert _current_context() == ctx, "the call left another context current"
    assert out.device == torch.device("cuda", arrays)
    assert torch.equal(out.cpu(), ref[op])


@pytest.mark.parametrize("op", ["decode", "prompt"])
def test_the_call_runs_on_the_current_stream_of_the_arrays_device(two, to_cuda, refs, op):
    """cuda:1's current stream is held back by a long kernel, then writes q: a launch on any other stream (cuda:0's,
    cuda:1's default) would read q before that write and give NaN."""
    torch = two
    case, ref = refs
    q, kv, ids, width = _on(torch, to_cuda, case, 1)
    q_late = torch.full_like(q, float("nan"))
    torch.cuda.synchronize(1)
    s1 = torch.cuda.Stream(device=1)
    with torch.cuda.device(1), torch.cuda.stream(s1):
        torch.cuda._sleep(200_000_000)                 # ~0.1 s of spinning on s1
        q_late.copy_(q)
        with torch.cuda.device(0):                     # cuda:0 current; cuda:1's current stream stays s1
            out = _call(op)(q_late, kv, ids, width)
            assert torch.cuda.current_device() == 0
    s1.synchronize()
    assert torch.equal(out.cpu(), ref[op])


# ------------------------------------------------------------------------------------- arrays split across devices

@pytest.mark.parametrize("op", ["decode", "prompt"])
def test_arrays_split_across_devices_are_refused_before_any_launch(two, to_cuda, refs, op):
    torch = two
    case, _ = refs
    q0, kv0, ids0, w0 = _on(torch, to_cuda, case, 0)
    q1, kv1, ids1, w1 = _on(torch, to_cuda, case, 1)
    out1 = torch.full_like(q1, float("nan"))
    out0 = torch.full_like(q0, float("nan"))
    cases = [((q1, kv0, ids1, w1, out1), r"kv: expected the same device as q \(cuda:1\), got torch int8 .* on cuda:0"),
             ((q0, kv1, ids0, w0, out0), r"kv: expected the same device as q \(cuda:0\), got torch int8 .* on cuda:1"),
             ((q1, kv1, ids0, w1, out1), r"ids: expected the same device as q \(cuda:1\), got torch int32 .*cuda:0"),
             ((q1, kv1, ids1, w0, out1), r"width: expected the same device as q \(cuda:1\), got .* on cuda:0"),
             ((q1, kv1, ids1, w1, out0), r"out: expected torch on cuda:1 like q, got torch float32 .* on cuda:0")]
    _call(op)(q1, kv1, ids1, w1)                 # a cached plan for cuda:1 exists: the hot path's checks refuse too
    for (q, kv, ids, w, out), msg in cases:
        with pytest.raises(ValueError, match=msg):
            _call(op)(q, kv, ids, w, out=out)
        with pytest.raises(ValueError, match=msg):
            getattr(torch.ops.strata_kernels, f"qsa_{op}_attn_out")(q, "int8", kv.k, kv.k_scale, kv.v, kv.v_scale,
                                                                    kv.page_table, ids, w, out)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    assert out0.isnan().all() and out1.isnan().all()   # nothing was launched into them


def test_a_plan_made_for_one_device_refuses_another(two, to_cuda, refs):
    torch = two
    case, ref = refs
    q0, kv0, ids0, w0 = _on(torch, to_cuda, case, 0)
    q1, _, ids1, w1 = _on(torch, to_cuda, case, 1)
    p = sk.plan(kv0, op="decode", max_queries=N_Q, cap=ids0.shape[1], n_head=q0.shape[1])
    out1 = torch.full_like(q1, float("nan"))
    with pytest.raises(ValueError, match=r"q: this plan was made for cuda:0 \(its KV cache's device\), got torch "
                                         r"float32 .* on cuda:1"):
        p.run(q1, ids1, w1, out=out1)
    with pytest.raises(ValueError, match=r"out: expected torch on cuda:0 like q, got .* on cuda:1"):
        p.run(q0, ids0, w0, out=out1)
    torch.cuda.synchronize(1)
    assert out1.isnan().all()
    assert torch.equal(p.run(q0, ids0, w0).cpu(), ref["decode"])


# ------------------------------------------------------------------------------------- per-device error words

@pytest.mark.parametrize("bad_device", [1, 0])
def test_an_offence_on_one_device_is_reported_there_never_on_the_other(two, to_cuda, refs, bad_device):
    torch = two
    case, ref = refs
    _clean(torch)
    good_device = 1 - bad_device
    args = {d: _on(torch, to_cuda, case, d) for d in (0, 1)}
    q, kv, ids, width = args[bad_device]
    bad_ids = ids.clone()
    bad_ids[3, 5] = 10**8
    sk.qsa_decode_attn(q, kv, bad_ids, width)       # masked and recorded in that device's word: no exception here
    torch.cuda.synchronize(bad_device)
    for _ in range(3):                              # the other device's calls neither raise nor consume it
        out = sk.qsa_decode_attn(*args[good_device])
        assert torch.equal(out.cpu(), ref["decode"])
        qg, kvg, ids_g, width_g = args[good_device]
        sk.plan(kvg, op="prompt", max_queries=N_Q, cap=ids.shape[1], n_head=qg.shape[1]).run(qg, ids_g, width_g)
    with pytest.raises(ValueError, match=rf"ids: query 3, position 5 .*earlier call on cuda:{bad_device} "):
        sk.qsa_decode_attn(*args[bad_device])
    assert torch.equal(sk.qsa_decode_attn(*args[bad_device]).cpu(), ref["decode"])
    # Reported by sk.check_errors() as well (after a sync of that device), naming the device.
    sk.qsa_prompt_attn(q, kv, bad_ids, width)
    torch.cuda.synchronize(bad_device)
    sk.qsa_prompt_attn(*args[good_device])
    with pytest.raises(ValueError, match=rf"ids: query 3, position 5 .*earlier call on cuda:{bad_device} "):
        sk.check_errors()
    sk.check_errors()


# ------------------------------------------------------------------------------------- one host thread per device

CALLS = 2000


def test_two_threads_one_per_device_a_few_thousand_calls_each(two, to_cuda):
    """Each thread alternates plain decode and prompt calls and a plan's run on its device's own stream, with its own
    data; every 100th output is kept and all must equal that device's reference."""
    torch = two
    _clean(torch)
    cases = {d: testing.make_case("int8", CTX, N_Q, seed=160 + d) for d in (0, 1)}
    args = {d: _on(torch, to_cuda, cases[d], d) for d in (0, 1)}
    refs = {}
    for d in (0, 1):
        with torch.cuda.device(d):
            refs[d] = (sk.qsa_decode_attn(*args[d]), sk.qsa_prompt_attn(*args[d]))
    kept = {0: [], 1: []}

    def work(d):
        q, kv, ids, width = args[d]
        with torch.cuda.device(d):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            plan = sk.plan(kv, op="decode", max_queries=N_Q, cap=ids.shape[1], n_head=q.shape[1])
            with torch.cuda.stream(s):
                outs = [torch.empty_like(q) for _ in range(3)]
                for i in range(CALLS):
                    kind = i % 3
                    if kind == 0:
                        sk.qsa_decode_attn(q, kv, ids, width, out=outs[0])
                    elif kind == 1:
                        sk.qsa_prompt_attn(q, kv, ids, width, out=outs[1])
                    else:
                        plan.run(q, ids, width, out=outs[2])
                    if i % 100 < 3:
                        kept[d].append((kind, outs[kind].clone()))
            s.synchronize()

    testing.in_threads(work, 2, repeats=1)
    for d in (0, 1):
        assert len(kept[d]) == 3 * (CALLS // 100)
        for kind, out in kept[d]:
            assert torch.equal(out, refs[d][1 if kind == 1 else 0]), f"cuda:{d}, call kind {kind}"


def _block_stream(torch, stream):
    """Hold ``stream`` back until the returned function is called: a cuStreamWaitValue32 on pinned host memory."""
    lib = _libcuda()
    flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
    wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    r = wait(ctypes.c_void_p(stream.cuda_stream), ctypes.c_uint64(flag.data_ptr()), 1, 0)   # 0: wait until >= 1
    if r != 0:
        pytest.skip(f"cuStreamWaitValue32 returned {r}: stream memory operations unavailable here")

    def release():
        flag.numpy()[0] = 1
    return release


@pytest.mark.parametrize("blocked", [0, 1])
def test_calls_on_one_device_never_wait_for_the_other(two, to_cuda, blocked):
    """The blocked device's stream waits on a host flag; the other device's thread makes its calls and syncs its own
    stream meanwhile. A call that synchronised the blocked device (or its stream) would hang that thread: the join's
    timeout is only there to report such a hang, and the flag is released either way."""
    torch = two
    _clean(torch)
    free = 1 - blocked
    case = testing.make_case("int8", CTX, N_Q, seed=161)
    args = {d: _on(torch, to_cuda, case, d) for d in (0, 1)}
    with torch.cuda.device(free):
        ref = sk.qsa_decode_attn(*args[free])
    with torch.cuda.device(blocked):
        sk.qsa_decode_attn(*args[blocked])          # the blocked device's plan, scratch and words exist already
        torch.cuda.synchronize(blocked)
        stream = torch.cuda.current_stream()
        release = _block_stream(torch, stream)
    results, errors = {}, []

    def on_blocked():                               # queued behind the wait: must return without waiting
        with torch.cuda.device(blocked):
            results["queued"] = sk.qsa_decode_attn(*args[blocked])
            results["event"] = torch.cuda.Event()
            results["event"].record(stream)

    def on_free():
        with torch.cuda.device(free):
            out = torch.empty_like(args[free][0])
            for _ in range(500):
                sk.qsa_decode_attn(*args[free], out=out)
                sk.qsa_prompt_attn(*args[free])
            torch.cuda.current_stream().synchronize()
            results["free"] = torch.equal(out, ref)

    def guarded(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(fn,)) for fn in (on_blocked, on_free)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    hung = [fn.__name__ for t, fn in zip(threads, (on_blocked, on_free)) if t.is_alive()]
    held = "event" in results and not results["event"].query()
    release()
    for t in threads:
        t.join()
    torch.cuda.synchronize(blocked)
    assert not hung, f"{hung} waited for the blocked cuda:{blocked}"
    assert not errors, errors[0]
    assert held, f"the stream wait did not hold cuda:{blocked} back, so this run shows nothing"
    assert results["free"] is True
    assert torch.equal(results["queued"], sk.qsa_decode_attn(*args[blocked]))


# ------------------------------------------------------------------------------------- CUDA graphs on cuda:1

@pytest.mark.parametrize("op", ["decode", "prompt"])
@pytest.mark.parametrize("how", ["plan", "plain"])
def test_cuda_graph_capture_and_replay_on_cuda1(two, to_cuda, op, how):
    torch = two
    _clean(torch)
    case = testing.make_case("int8", CTX, N_Q, seed=7)
    q, kv, ids, width = _on(torch, to_cuda, case, 1)
    out = torch.empty_like(q)
    plan = sk.plan(kv, op=op, max_queries=N_Q, cap=ids.shape[1], n_head=q.shape[1]) if how == "plan" else None

    def run(q, ids, width, out):
        if plan is not None:
            plan.run(q, ids, width, out=out)
        else:
            _call(op)(q, kv, ids, width, out=out)

    with torch.cuda.device(1):                       # capture on cuda:1 (test_callpath_gpu's helper, bitwise)
        g = _graph_equal_to_eager(torch, run, q, ids, width, out, _fresh_inputs(torch, N_Q, CTX))
    assert torch.cuda.current_device() == 0
    # Replayed with cuda:0 current, on fresh inputs: still equal to an eager call.
    c = testing.make_case("int8", CTX, N_Q, seed=200)
    q2, _, ids2, width2 = _on(torch, to_cuda, c, 1)
    q.copy_(q2)
    ids.copy_(ids2)
    width.copy_(width2)
    g.replay()
    torch.cuda.synchronize(1)
    eager = torch.empty_like(out)
    run(q2, ids2, width2, eager)
    torch.cuda.synchronize(1)
    assert torch.equal(out, eager)


# ------------------------------------------------------------------------------------- explain

def test_explain_lists_both_devices_with_their_choice(two):
    torch = two
    for text in (sk.explain(),
                 subprocess.run([sys.executable, "-m", "strata_kernels", "explain"], capture_output=True, text=True,
                                check=True).stdout):
        blocks = {b.split(" ", 1)[0]: b for b in text.split("\n\n")[1:]}
        for d in (0, 1):
            arch = "sm_{}{}".format(*torch.cuda.get_device_capability(d))
            assert blocks[f"cuda:{d}"].startswith(f"cuda:{d} {arch} ("), text
            assert "=> chosen: " in blocks[f"cuda:{d}"], blocks[f"cuda:{d}"]


# ------------------------------------------------------------------------------------- a process on cuda:1 only

_ONLY_CUDA1 = r"""
import ctypes, torch, strata_kernels as sk
from strata_kernels import testing
lib = ctypes.CDLL("libcuda.so.1")
def active(d):
    dev, flags, on = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    assert lib.cuDeviceGet(ctypes.byref(dev), d) == 0
    assert lib.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(on)) == 0
    return on.value
c = testing.make_case("int8", 2100, 4)
q, kv, ids, width = testing.to_torch(c, "cuda:1")
before = active(0)
out = sk.qsa_decode_attn(q, kv, ids, width)
out = sk.qsa_prompt_attn(q, kv, ids, width)
torch.cuda.synchronize(1)
print("cuda0_context_before", before, "after", active(0))
"""


def test_a_process_that_uses_only_cuda1_gets_no_context_on_cuda0(two):
    """torch creates no context on a device that is not used; the plugin's switch back to the caller's device must
    not create one on cuda:0 either (~0.5 GB of device memory per process)."""
    r = subprocess.run([sys.executable, "-c", _ONLY_CUDA1], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = r.stdout.strip().splitlines()[-1]
    if line.startswith("cuda0_context_before 1"):
        pytest.skip(f"torch made cuda:0's context before the calls here, so this cannot tell: {line}")
    assert line == "cuda0_context_before 0 after 0", line
