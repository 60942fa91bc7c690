"""The engine's call path on the GPU (ARCHITECTURE §6, hot path): no device sync in the default path, lazy
out-of-range reports through the mapped error word, CUDA-graph capture and replay (prompt, decode, the chunk + merge
fallback, split decode), threads x streams, a busy side stream, torch.compile(mode="reduce-overhead"), CuPy."""
import numpy as np
import pytest

import strata_kernels as sk
from strata_kernels import testing


@pytest.fixture()
def gpu_case(to_cuda):
    case = testing.make_case("int8", 2100, 8)
    return case, to_cuda(case)


def _clean(torch):
    """Leave no pending error word behind for the next test."""
    torch.cuda.synchronize()
    try:
        sk.check_errors()
    except ValueError:
        pass


def test_the_default_call_never_synchronises(gpu_case, torch_cuda):
    torch = torch_cuda
    _, (q, kv, ids, width) = gpu_case
    out = torch.empty_like(q)
    ref = sk.qsa_decode_attn(q, kv, ids, width)
    prompt_ref = sk.qsa_prompt_attn(q, kv, ids, width)
    p = sk.plan(kv, op="decode", max_queries=8, cap=ids.shape[1], n_head=q.shape[1])
    p.run(q, ids, width, out=out)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            sk.qsa_decode_attn(q, kv, ids, width, out=out)
            p.run(q, ids, width, out=out)
            sk.qsa_prompt_attn(q, kv, ids, width, out=out)
            sk.check_errors()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.equal(out, prompt_ref)
    assert torch.equal(p.run(q, ids, width), ref)


def test_out_of_range_ids_raise_at_the_call_with_the_sync_setting(gpu_case, torch_cuda, monkeypatch):
    case, _ = gpu_case
    case.ids[3, 5] = 10**8
    q, kv, ids, width = sk.testing.to_torch(case, "cuda")
    monkeypatch.setenv("STRATA_KERNELS_CHECK_IDS", "sync")
    with pytest.raises(ValueError, match="ids: query 3, position 5 holds cell 100000000"):
        sk.qsa_decode_attn(q, kv, ids, width)
    with pytest.raises(ValueError, match="ids: query 3, position 5 holds cell 100000000"):
        sk.qsa_prompt_attn(q, kv, ids, width)
    _clean(torch_cuda)


@pytest.mark.parametrize("op", ["decode", "prompt"])
def test_out_of_range_ids_are_reported_at_the_next_call_and_later_calls_work(gpu_case, torch_cuda, op):
    torch = torch_cuda
    _clean(torch)
    case, (q, kv, ids, width) = gpu_case
    call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    good = call(q, kv, ids, width)
    bad_ids = ids.clone()
    bad_ids[3, 5] = 10**8
    out = call(q, kv, bad_ids, width)          # no exception here: the kernel masked the cell and flagged it
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"ids: query 3, position 5 .*earlier call on cuda:0"):
        call(q, kv, ids, width)
    # The flagged call did not poison anything: the next calls run and match.
    assert torch.equal(call(q, kv, ids, width), good)
    assert out.shape == good.shape
    # sk.check_errors() reports without a call; a width outside [0, cap] too.
    bad_width = width.clone()
    bad_width[6] = ids.shape[1] + 7
    call(q, kv, ids, bad_width)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"width: query 6 had a width outside"):
        sk.check_errors()
    sk.check_errors()


def _graph_equal_to_eager(torch, run, q, ids, width, out, fresh):
    """Warm up on a side stream, capture, change q / ids / width in place, replay, compare with eager bitwise."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            run(q, ids, width, out)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run(q, ids, width, out)
    for step in range(4):
        q2, ids2, width2 = fresh(step)
        q.copy_(q2)
        ids.copy_(ids2)
        width.copy_(width2)
        for _ in range(25):
            g.replay()
        torch.cuda.synchronize()
        eager = torch.empty_like(out)
        run(q2.clone(), ids2.clone(), width2.clone(), eager)
        torch.cuda.synchronize()
        assert torch.equal(out, eager), f"replay {step} differs from eager"
    return g


def _fresh_inputs(torch, n_q, ctx):
    def fresh(step):
        c = testing.make_case("int8", ctx, n_q, seed=100 + step)
        return torch.from_numpy(c.q).cuda(), torch.from_numpy(c.ids).cuda(), torch.from_numpy(c.width).cuda()
    return fresh


@pytest.mark.parametrize("op,variant", [("decode", None), ("decode", "split"), ("decode", "flash"), ("prompt", None),
                                        ("prompt", "fp32")])
@pytest.mark.parametrize("how", ["plan", "plain"])
def test_cuda_graph_capture_and_replay_equal_eager(torch_cuda, op, variant, how):
    torch = torch_cuda
    _clean(torch)
    case = testing.make_case("int8", 2100, 16, seed=7)
    q, kv, ids, width = sk.testing.to_torch(case, "cuda")
    out = torch.empty_like(q)
    if how == "plan":
        p = sk.plan(kv, op=op, max_queries=16, cap=ids.shape[1], variant=variant, n_head=q.shape[1])

        def run(q, ids, width, out):
            p.run(q, ids, width, out=out)
    else:
        call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn

        def run(q, ids, width, out):
            call(q, kv, ids, width, out=out, variant=variant)
    _graph_equal_to_eager(torch, run, q, ids, width, out, _fresh_inputs(torch, 16, 2100))


def test_bad_ids_during_replay_are_reported_at_the_next_check(torch_cuda):
    torch = torch_cuda
    _clean(torch)
    case = testing.make_case("int8", 2100, 16, seed=3)
    q, kv, ids, width = sk.testing.to_torch(case, "cuda")
    out = torch.empty_like(q)
    p = sk.plan(kv, op="decode", max_queries=16, cap=ids.shape[1], n_head=q.shape[1])
    g = _graph_equal_to_eager(torch, lambda q, i, w, o: p.run(q, i, w, out=o), q, ids, width, out,
                              _fresh_inputs(torch, 16, 2100))
    good_ids = ids.clone()
    ids[9, 0] = -5                 # position 0: inside every non-empty width
    g.replay()
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"ids: query 9, position 0 .*earlier call on cuda:0"):
        sk.check_errors()
    ids.copy_(good_ids)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    sk.check_errors()
    assert torch.equal(out, p.run(q.clone(), ids.clone(), width.clone()))
    # Bad ids in a replay, then an eager call: that call raises, the one after runs.
    ids[0, 0] = 10**9
    g.replay()
    ids.copy_(good_ids)
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"ids: query 0, position 0 "):
        p.run(q, ids, width, out=torch.empty_like(q))
    p.run(q, ids, width, out=torch.empty_like(q))


def _with_references(torch, seed):
    """A 16-query case on the GPU with its eager decode and prompt outputs (no pending error word)."""
    _clean(torch)
    q, kv, ids, width = sk.testing.to_torch(testing.make_case("int8", 2100, 16, seed=seed), "cuda")
    return q, kv, ids, width, sk.qsa_decode_attn(q, kv, ids, width), sk.qsa_prompt_attn(q, kv, ids, width)


def test_eight_threads_on_eight_streams_are_bitwise_equal(torch_cuda):
    torch = torch_cuda
    q, kv, ids, width, ref_d, ref_p = _with_references(torch, seed=5)
    streams = [torch.cuda.Stream() for _ in range(8)]
    torch.cuda.synchronize()

    def work(i):
        with torch.cuda.stream(streams[i]):
            d = sk.qsa_decode_attn(q, kv, ids, width)
            pr = sk.qsa_prompt_attn(q, kv, ids, width)
        streams[i].synchronize()
        return d, pr

    for d, pr in testing.in_threads(work, 8, repeats=5):
        assert torch.equal(d, ref_d) and torch.equal(pr, ref_p)


def test_a_call_on_a_busy_side_stream_follows_its_producer(torch_cuda):
    torch = torch_cuda
    case = testing.make_case("int8", 2100, 16, seed=6)
    q, kv, ids, width = sk.testing.to_torch(case, "cuda")
    ref = sk.qsa_decode_attn(q, kv, ids, width)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):
            big = big @ big.T / 64  # keep the stream busy
        q2 = q * 1.0                  # the producer, behind the busy work
        out = sk.qsa_decode_attn(q2, kv, ids, width)
    s.synchronize()
    assert torch.equal(out, ref)


def test_torch_compile_reduce_overhead_captures_the_calls(torch_cuda):
    torch = torch_cuda
    from torch._dynamo.utils import counters
    q, kv, ids, width, ref_d, ref_p = _with_references(torch, seed=8)
    torch._dynamo.reset()
    counters.clear()

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def step(q, ids, width):
        return sk.qsa_decode_attn(q, kv, ids, width), sk.qsa_prompt_attn(q, kv, ids, width)

    for _ in range(4):
        d, pr = step(q, ids, width)
        torch.cuda.synchronize()
        assert torch.equal(d, ref_d) and torch.equal(pr, ref_p)
    assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])

    @torch.compile(fullgraph=True)
    def into(q, ids, width, out):
        torch.ops.strata_kernels.qsa_decode_attn_out(q, "int8", kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table,
                                                     ids, width, out)
        return out

    out = torch.empty_like(q)
    into(q, ids, width, out)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_d)


def test_the_torch_ops_allocate_nothing_per_call(gpu_case, torch_cuda):
    """The _out ops' plans share a scratch per (device, stream) like the plain calls (decode's chunk + merge needs
    one): after the first call, no call allocates."""
    torch = torch_cuda
    _clean(torch)
    _, (q, kv, ids, width) = gpu_case
    out = torch.empty_like(q)
    args = (q, "int8", kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table, ids, width, out)
    for name, call in (("qsa_decode_attn_out", sk.qsa_decode_attn), ("qsa_prompt_attn_out", sk.qsa_prompt_attn)):
        op = getattr(torch.ops.strata_kernels, name)
        op(*args)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        for _ in range(5):
            op(*args)
        torch.cuda.synchronize()
        assert torch.cuda.memory_stats()["allocation.all.allocated"] == before, name
        assert torch.equal(out, call(q, kv, ids, width))


def test_opcheck_on_the_gpu(torch_cuda):
    torch = torch_cuda
    case = testing.make_case("int8", 600, 4, seed=9)
    q, kv, ids, width = sk.testing.to_torch(case, "cuda")
    args = (q, "int8", kv.k, kv.k_scale, kv.v, kv.v_scale, kv.page_table, ids, width)
    for name in ("qsa_prompt_attn", "qsa_decode_attn"):
        torch.library.opcheck(getattr(torch.ops.strata_kernels, name).default, args)
        torch.library.opcheck(getattr(torch.ops.strata_kernels, name + "_out").default, args + (torch.empty_like(q),))


def _cupy_case(cupy):
    """The INT8 case of the CuPy tests, its KV cache and q, ids, width as CuPy arrays."""
    case = testing.make_case("int8", 2100, 8, seed=10)
    k = case.kv
    c = cupy.asarray
    kv = sk.KVCache.int8(c(k.k), c(k.k_scale), c(k.v), c(k.v_scale), c(k.page_table))
    return case, kv, c(case.q), c(case.ids), c(case.width)


def test_cupy_arrays_in_and_out_through_a_plan(torch_cuda):
    cupy = pytest.importorskip("cupy")
    case, kv, q, ids, width = _cupy_case(cupy)
    ref = sk.qsa_decode_attn(q, kv, ids, width)
    p = sk.plan(kv, op="decode", max_queries=8, cap=case.ids.shape[1], n_head=q.shape[1])
    out = cupy.empty_like(q)
    p.run(q, ids, width, out=out)
    cupy.cuda.get_current_stream().synchronize()
    assert isinstance(out, cupy.ndarray) and bool((out == ref).all())
    host = sk.qsa_decode_attn(case.q, case.kv, case.ids, case.width)
    assert np.abs(cupy.asnumpy(out) - host).max() <= 1e-5 * np.abs(host).max()


def test_a_cupy_plan_refuses_q_or_out_off_a_16_byte_boundary(torch_cuda):
    """A CuPy plan passes addresses to the loader, which refuses q or out off a 16-byte boundary (MISALIGNED, nothing
    launched); the plan's checks then name the argument."""
    cupy = pytest.importorskip("cupy")
    case, kv, q, ids, width = _cupy_case(cupy)
    p = sk.plan(kv, op="decode", max_queries=8, cap=case.ids.shape[1], n_head=q.shape[1])
    flat = cupy.full(q.size + 4, 7.0, dtype=cupy.float32)
    off = (-flat.data.ptr % 16 + 4) // 4  # a view 4 bytes past a 16-byte boundary
    bad = flat[off:off + q.size].reshape(q.shape)
    assert bad.data.ptr % 16 == 4 and bad.flags.c_contiguous
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        p.run(q, ids, width, out=bad)
    cupy.cuda.get_current_stream().synchronize()
    assert bool((bad == 7.0).all())  # untouched: no kernel wrote to it
    bad[...] = q
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        p.run(bad, ids, width)
    out = cupy.empty_like(q)
    p.run(q, ids, width, out=out)
    cupy.cuda.get_current_stream().synchronize()
    assert bool((out == sk.qsa_decode_attn(q, kv, ids, width)).all())


def test_cuda_q_and_out_off_a_16_byte_boundary_are_refused_before_any_kernel(gpu_case, torch_cuda):
    """The plugin ABI needs 16-byte aligned q and out (several kernels move them in 16-byte vectors): a CUDA view 4
    bytes past a boundary is refused by a plain call and by a plan, naming the argument, and nothing runs."""
    torch = torch_cuda
    _, (q, kv, ids, width) = gpu_case
    flat = torch.zeros(q.numel() + 4, device=q.device)
    off = (-flat.data_ptr() % 16 + 4) // 4
    bad = flat[off:off + q.numel()].view(q.shape)
    assert bad.data_ptr() % 16 == 4 and bad.is_contiguous()
    bad.copy_(q)
    p = sk.plan(kv, op="decode", max_queries=q.shape[0], cap=ids.shape[1], n_head=q.shape[1])
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        sk.qsa_prompt_attn(bad, kv, ids, width)
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        sk.qsa_decode_attn(q, kv, ids, width, out=bad)
    with pytest.raises(ValueError, match="q: expected data aligned to 16 bytes"):
        p.run(bad, ids, width)
    with pytest.raises(ValueError, match="out: expected data aligned to 16 bytes"):
        p.run(q, ids, width, out=bad)
    assert torch.equal(bad, q)  # untouched: no kernel wrote to it
    out = torch.empty_like(q)
    assert torch.equal(p.run(q, ids, width, out=out), sk.qsa_decode_attn(q, kv, ids, width))
    _clean(torch)


@pytest.mark.parametrize("op,variant", [("prompt", "grouped"), ("decode", "flash")])
def test_graphs_captured_while_the_plugins_own_scratch_grows_replay_as_eager(torch_cuda, op, variant):
    """A call given no scratch takes the plugin's own buffer: grouped's union buffer of its stream, flash's decode
    workspace of its device. A capture that needs more than an earlier capture on the same stream grows that buffer
    inside the capture; the new buffer is allocated and the old one kept (no sync or free inside a capture, which
    would break it, and the first graph still holds the old one), so both graphs replay as the eager calls."""
    torch = torch_cuda
    from strata_kernels import ops
    _clean(torch)
    code = ops._OP_PROMPT if op == "prompt" else ops._OP_DECODE
    s = torch.cuda.Stream()
    calls = []
    for n_q, ctx in ((16, 2100), (300, 4096)):  # the second needs the larger union and workspace
        q, kv, ids, width = sk.testing.to_torch(testing.make_case("int8", ctx, n_q, seed=n_q), "cuda")
        c = ops._check_call(q, kv, ids, width, code)
        plugin = ops._plugin_for_call(c)
        bad = ops._framework_alloc(q, (2,), "int64", ops._INT64_MAX)
        out = torch.zeros_like(q)

        def call(stream, c=c, kv=kv, plugin=plugin, bad=bad, out=out):
            st, msg = plugin.call(code, variant, kv.format_code, c.q, out, c.ids, c.width, c.width_stride,
                                  kv.page_table, kv.k, kv.v, kv.k_scale, kv.v_scale, kv.n_head_kv, kv.head_dim,
                                  c.group, kv.n_phys_pages, None, bad, 0, stream)
            assert st == 0, msg
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            call(s.cuda_stream)
        calls.append((g, call, out))
    for g, call, out in calls:  # the first graph after the second was captured
        out.zero_()
        g.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        call(torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        assert torch.count_nonzero(replayed) > 0
        assert torch.equal(replayed, out)
    _clean(torch)
