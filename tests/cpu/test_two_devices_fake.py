"""Two GPUs in one process (issue 16), the Python side with fake devices: which device a call is on, refusals of
arrays split across devices, plans bound to one device, and the per-device error words.

A ``FakeGpuArray`` is a numpy array that says (through ``__dlpack_device__``) it lives on CUDA device 0 or 1; the
package reads a call's device exactly as it does for CuPy or any DLPack array (``_arrays.device``). The plugin the
resolver would return for a CUDA device is the real CPU plugin presented as a GPU plugin: plans, scratch, error
words and launches go through the real loader (``Bound.run`` reads the device's words before each launch), and the
CPU kernels compute on the host memory behind the fake arrays. What this cannot show (the kernel's device, its
stream, the caller's current device, two devices at once) is in tests/gpu/test_two_devices.py.
"""
import numpy as np
import pytest

from strata_kernels import ops, plans, testing

_DL_CUDA = 2


class FakeGpuArray:
    """Host memory that reports CUDA device ``index``."""
    __module__ = "fakegpu"      # its framework's name (_arrays.framework)

    def __init__(self, a, index: int):
        self.a = np.ascontiguousarray(a)
        self.index = index

    shape = property(lambda self: self.a.shape)
    dtype = property(lambda self: self.a.dtype)
    flags = property(lambda self: self.a.flags)

    def __dlpack_device__(self):
        return (_DL_CUDA, self.index)

    def __array__(self, dtype=None, copy=None):
        return self.a


class _FakeFacts(plans._Generic):
    """The plans' array facts for FakeGpuArray: the pointer of the host memory, a stream handle per device."""

    @staticmethod
    def ptr(x) -> int:
        return x.a.ctypes.data

    @staticmethod
    def stream(index: int, stream) -> int:
        return 1000 + index if stream is None else int(stream)   # "the current stream of device index"


class _RecordingBound:
    """The real loader's Bound of the CPU plugin; records the device and stream of every launch."""

    def __init__(self, bound, device: int, launches: list):
        self.bound, self.device, self.launches = bound, device, launches

    def run(self, q, out, ids, width, n_q, cap, steps, stream, *scratch):
        self.launches.append((self.device, stream))
        return self.bound.run(q, out, ids, width, n_q, cap, steps, stream, *scratch)

    def __getattr__(self, name):
        return getattr(self.bound, name)


class GpuPluginOnCpu:
    """The CPU plugin presented as the plugin of CUDA devices 0 and 1 (one object for both, like one loaded file)."""

    has_host_words = True

    def __init__(self, cpu):
        self.cpu, self.manifest = cpu, cpu.manifest
        self.binds, self.words_for, self.launches = [], [], []

    def bind(self, op, variant, fmt, pt, n_pages, k, v, ks, vs, n_head_kv, head_dim, group, phys, kind, index):
        self.binds.append((kind, index))
        b = self.cpu.bind(op, variant, fmt, pt, n_pages, k, v, ks, vs, n_head_kv, head_dim, group, phys, 0, 0)
        return _RecordingBound(b, index, self.launches)

    def host_words(self, kind, index, nbytes):
        self.words_for.append((kind, index))
        return self.cpu.host_words(0, 0, nbytes)

    def sync_stream(self, kind, index, stream):
        pass

    def __getattr__(self, name):
        raise AssertionError(f"the test plugin has no {name!r}: this path was not expected to reach it")


@pytest.fixture()
def gpus(sk, monkeypatch):
    """ops._plugin answers CUDA devices with GpuPluginOnCpu (and records each request); fresh plan caches and
    error words; device arrays of FakeGpuArray allocated as FakeGpuArray."""
    cpu = ops._plugin(("cpu", 0))
    plugin = GpuPluginOnCpu(cpu)
    real_plugin, real_alloc = ops._plugin, ops._framework_alloc
    plugin.requests = []

    def fake_plugin(dev, geometry=None):
        if dev[0] == "cuda":
            plugin.requests.append((dev, geometry))
            return plugin
        return real_plugin(dev, geometry)

    def alloc(like, shape, dtype, fill=None):
        if isinstance(like, FakeGpuArray):
            a = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
            return FakeGpuArray(a, like.index)
        return real_alloc(like, shape, dtype, fill)

    monkeypatch.setattr(ops, "_plugin", fake_plugin)
    monkeypatch.setattr(ops, "_framework_alloc", alloc)
    monkeypatch.setitem(plans._FACTS, FakeGpuArray, _FakeFacts())
    for name in ("_WORDS", "_PLANS", "_SHARED"):
        monkeypatch.setattr(plans, name, {})
    monkeypatch.delenv(plans.ENV_CHECK, raising=False)
    return plugin


@pytest.fixture(scope="module")
def case():
    return testing.make_case("int8", 600, 6, seed=16)


def on(case, index: int, ids=None, width=None):
    """(q, kv, ids, width) of the case as FakeGpuArray on CUDA device ``index``."""
    f = lambda a: FakeGpuArray(a, index)  # noqa: E731
    k = case.kv
    kv = ops.KVCache.int8(f(k.k), f(k.k_scale), f(k.v), f(k.v_scale), f(k.page_table))
    return f(case.q), kv, f(case.ids if ids is None else ids), f(case.width if width is None else width)


def host_ref(sk, case, op):
    call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    return call(case.q, case.kv, case.ids, case.width)


# ---------------------------------------------------------------------------------------------- a call's device

@pytest.mark.parametrize("op", ["decode", "prompt"])
@pytest.mark.parametrize("device", [0, 1])
def test_a_call_launches_on_its_arrays_device_and_that_devices_stream(sk, gpus, case, op, device):
    call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    q, kv, ids, width = on(case, device)
    out = call(q, kv, ids, width)
    assert isinstance(out, FakeGpuArray) and out.index == device
    assert np.asarray(out).tobytes() == host_ref(sk, case, op).tobytes()
    assert {d for d, _ in gpus.requests} == {("cuda", device)}
    assert gpus.binds == [(1, device)]                     # the plan's plugin table bound to (CUDA, device)
    assert gpus.launches == [(device, 1000 + device)]      # launched there, on that device's stream
    assert gpus.words_for == [(1, device)]                 # its error words: that device's


# ---------------------------------------------------------------------------------------------- (a) split arrays

def _split_calls(case):
    """(call args, the argument named, the device of q, the device named against it) for every split."""
    q0, kv0, ids0, w0 = on(case, 0)
    q1, kv1, ids1, w1 = on(case, 1)
    return [
        ((q1, kv0, ids1, w1), "kv", 1, 0),
        ((q0, kv1, ids0, w0), "kv", 0, 1),
        ((q0, kv0, ids1, w0), "ids", 0, 1),
        ((q1, kv1, ids1, w0), "width", 1, 0),
    ]


@pytest.mark.parametrize("op", ["decode", "prompt"])
def test_arrays_split_across_devices_are_refused_before_any_plugin_call(sk, gpus, case, op):
    call = sk.qsa_decode_attn if op == "decode" else sk.qsa_prompt_attn
    for args, name, qdev, other in _split_calls(case):
        with pytest.raises(ValueError, match=rf"^{name}: expected the same device as q \(cuda:{qdev}\), got "
                                             rf"fakegpu .* on cuda:{other}$"):
            call(*args)
        with pytest.raises(ValueError, match=rf"^{name}: expected the same device as q \(cuda:{qdev}\)"):
            sk.which(*args, path=op)
    assert gpus.requests == [] and gpus.binds == [] and gpus.launches == []


def test_out_on_another_device_is_refused_before_the_launch_also_with_a_cached_plan(sk, gpus, case):
    q1, kv1, ids1, w1 = on(case, 1)
    out0 = FakeGpuArray(np.full(case.q.shape, np.nan, np.float32), 0)
    with pytest.raises(ValueError, match=r"^out: expected fakegpu on cuda:1 like q, got fakegpu float32 .* on cuda:0"):
        sk.qsa_decode_attn(q1, kv1, ids1, w1, out=out0)
    assert gpus.launches == []
    sk.qsa_decode_attn(q1, kv1, ids1, w1)        # a plan for cuda:1 is now cached: the hot path's checks refuse too
    assert len(gpus.launches) == 1
    q0, _, ids0, w0 = on(case, 0)
    for args, kw, pat in (((q1, kv1, ids1, w1), {"out": out0}, r"^out: expected fakegpu on cuda:1 like q"),
                          ((q0, kv1, ids0, w0), {}, r"^kv: expected the same device as q \(cuda:0\)"),
                          ((q1, kv1, ids0, w1), {}, r"^ids: expected the same device as q \(cuda:1\)")):
        with pytest.raises(ValueError, match=pat):
            sk.qsa_decode_attn(*args, **kw)
    assert len(gpus.launches) == 1
    assert np.isnan(out0.a).all()


def test_a_kv_cache_split_across_devices_is_refused(sk, case):
    k = case.kv
    f0, f1 = (lambda a: FakeGpuArray(a, 0)), (lambda a: FakeGpuArray(a, 1))
    with pytest.raises(ValueError, match=r"^v_scale: expected the same device as k \(cuda:0\), got .* on cuda:1"):
        ops.KVCache.int8(f0(k.k), f0(k.k_scale), f0(k.v), f1(k.v_scale), f0(k.page_table))
    with pytest.raises(ValueError, match=r"^page_table: expected the same device as k \(cuda:1\), got .* on cuda:0"):
        ops.KVCache.int8(f1(k.k), f1(k.k_scale), f1(k.v), f1(k.v_scale), f0(k.page_table))


# ---------------------------------------------------------------------------------------------- (b) plans

def test_a_plan_made_for_one_device_refuses_another(sk, gpus, case):
    q0, kv0, ids0, w0 = on(case, 0)
    q1, _, ids1, w1 = on(case, 1)
    n_q, n_head, _ = case.q.shape
    p = sk.plan(kv0, op="decode", max_queries=n_q, cap=case.ids.shape[1], n_head=n_head)
    assert np.asarray(p.run(q0, ids0, w0)).tobytes() == host_ref(sk, case, "decode").tobytes()
    assert gpus.launches == [(0, 1000)]
    with pytest.raises(ValueError, match=r"^q: this plan was made for cuda:0 \(its KV cache's device\), got fakegpu "
                                         r"float32 .* on cuda:1; a plan runs on one device"):
        p.run(q1, ids1, w1)
    with pytest.raises(ValueError, match=r"^ids: expected the same device as q \(cuda:0\), got .* on cuda:1"):
        p.run(q0, ids1, w0)
    with pytest.raises(ValueError, match=r"^out: expected fakegpu on cuda:0 like q, got .* on cuda:1"):
        p.run(q0, ids0, w0, out=FakeGpuArray(np.empty_like(case.q), 1))
    assert gpus.launches == [(0, 1000)]
    with pytest.raises(ValueError, match=r"^workspace: expected an array on cuda:0 like the KV cache, got .*cuda:1"):
        sk.plan(kv0, op="decode", max_queries=n_q, cap=case.ids.shape[1], n_head=n_head,
                workspace=FakeGpuArray(np.empty(p.workspace_floats, np.float32), 1))


def test_the_plain_calls_keep_one_plan_per_device(sk, gpus, case):
    args = {d: on(case, d) for d in (0, 1)}
    for device in (0, 1, 0, 1):
        sk.qsa_decode_attn(*args[device])
    assert sorted(p.device for p in plans._PLANS.values()) == [("cuda", 0), ("cuda", 1)]
    assert sorted(plans._SHARED) == [(("cuda", 0), 1000), (("cuda", 1), 1001)]    # scratch per (device, stream)
    assert sorted(gpus.binds) == [(1, 0), (1, 1)]
    assert gpus.launches == [(0, 1000), (1, 1001), (0, 1000), (1, 1001)]


# ---------------------------------------------------------------------------------------------- (c) error words

@pytest.mark.parametrize("bad_device", [1, 0])
def test_an_offence_on_one_device_is_reported_there_and_never_by_the_other(sk, gpus, case, bad_device):
    good_device = 1 - bad_device
    ref = host_ref(sk, case, "decode").tobytes()
    for d in (0, 1):
        assert np.asarray(sk.qsa_decode_attn(*on(case, d))).tobytes() == ref
    words = {w.device: w for w in plans._WORDS.values()}
    assert sorted(words) == [("cuda", 0), ("cuda", 1)]
    assert words[("cuda", 0)].host != words[("cuda", 1)].host          # two blocks of host words, one per device

    bad = case.ids.copy()
    bad[2, 5] = 10**8
    q, kv, ids, width = on(case, bad_device, ids=bad)
    sk.qsa_decode_attn(q, kv, ids, width)          # masked and recorded in that device's word: no exception here
    assert (words[("cuda", good_device)].view == plans._NO_OFFENCE).all()
    assert not (words[("cuda", bad_device)].view == plans._NO_OFFENCE).all()
    for _ in range(3):                             # the other device's calls neither raise nor consume it
        assert np.asarray(sk.qsa_decode_attn(*on(case, good_device))).tobytes() == ref
    with pytest.raises(ValueError, match=rf"^ids: query 2, position 5 .* in an earlier call on cuda:{bad_device} "):
        sk.qsa_decode_attn(*on(case, bad_device))
    assert np.asarray(sk.qsa_decode_attn(*on(case, bad_device))).tobytes() == ref     # reported once, then it runs

    # Through a plan and sk.check_errors(): the same per-device bookkeeping.
    n_q, n_head, _ = case.q.shape
    p = {d: sk.plan(on(case, d)[1], op="decode", max_queries=n_q, cap=case.ids.shape[1], n_head=n_head)
         for d in (0, 1)}
    q, _, ids, width = on(case, bad_device, ids=bad)
    p[bad_device].run(q, ids, width)
    qg, _, ids_g, width_g = on(case, good_device)
    assert np.asarray(p[good_device].run(qg, ids_g, width_g)).tobytes() == ref
    with pytest.raises(ValueError, match=rf"^ids: query 2, position 5 .* in an earlier call on cuda:{bad_device} "):
        sk.check_errors()
    sk.check_errors()


def test_each_devices_plans_bind_that_devices_words(sk, gpus, case):
    """The address each plan hands the loader for the kernels' word, and the block it scans before a launch, are its
    own device's (a plan for cuda:1 bound to cuda:0's words would report cuda:1's offences on cuda:0)."""
    n_q, n_head, _ = case.q.shape
    seen = []
    real_bind = gpus.bind

    def bind(*a):
        b = real_bind(*a)
        real_set = b.bound.set_errors
        b.set_errors = lambda bad, scan, n, local: seen.append((a[-1], bad, scan, n, local)) or real_set(bad, scan,
                                                                                                          n, local)
        return b

    gpus.bind = bind
    for d in (0, 1):
        sk.plan(on(case, d)[1], op="decode", max_queries=n_q, cap=case.ids.shape[1], n_head=n_head)
    words = {w.device[1]: w for w in plans._WORDS.values()}
    for d, bad, scan, n, local in seen:
        assert scan == words[d].host and words[d].dev <= bad < words[d].dev + 16 * plans._ERROR_SLOTS
        assert n == 2 * plans._ERROR_SLOTS and local is False
    assert sorted(d for d, *_ in seen) == [0, 1]
