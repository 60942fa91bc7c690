"""The Python statement of the automatic dispatch (dispatch_model) against QSA_SPEC §5.2-§5.4, and what
`explain --simulate` prints with it. (The model is compared with the plugins' own which() in tests/cpu,
tests/toolchain/test_hip_dispatch.py and tests/gpu.)"""
from __future__ import annotations

import pytest

from strata_kernels import dispatch_model as dm
from strata_kernels import resolve, targets

T = targets.all_targets()


def variants(name: str) -> list[str]:
    return list(T[name].variants)


# §5.2 device × format matrix, no switches (prompt operation), with the plugin the tables build for that device.
MATRIX = [
    ("cuda", "sm_75", "sm_75", {"fp16": "v1", "int8": "v1", "k8v4": "v1", "q4_0": "fp32"}),
    ("cuda", "sm_80", "sm_80", {"fp16": "v1", "int8": "v2", "k8v4": "v1", "q4_0": "v1"}),
    ("cuda", "sm_86", "sm_86", {"fp16": "v1", "int8": "v2", "k8v4": "v1", "q4_0": "v1"}),
    ("cuda", "sm_90", "sm_90", {"fp16": "grouped", "int8": "grouped", "k8v4": "grouped", "q4_0": "grouped"}),
    ("cuda", "sm_100", "sm_100", {"fp16": "grouped", "int8": "grouped", "k8v4": "grouped", "q4_0": "grouped"}),
    ("cuda", "sm_103", "sm_103", {"fp16": "grouped", "int8": "grouped", "k8v4": "grouped", "q4_0": "grouped"}),
    ("cuda", "sm_110", "sm_110", {"fp16": "grouped", "int8": "grouped", "k8v4": "grouped", "q4_0": "grouped"}),
    ("cuda", "sm_120", "sm_120", {"fp16": "v1", "int8": "v2", "k8v4": "v1", "q4_0": "v1"}),
    ("cuda", "sm_121", "sm_120", {"fp16": "v1", "int8": "v2", "k8v4": "v1", "q4_0": "v1"}),
    ("cuda", "sm_70", "sm_70", {"fp16": "v70", "int8": "v70", "k8v4": "v70", "q4_0": "fp32"}),
    ("cuda", "sm_61", "sm_70", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
    ("hip", "gfx1030", "gfx1030", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
    ("hip", "gfx1100", "gfx1100", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
    ("hip", "gfx1201", "gfx1201", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
    ("sycl", "sycl", "sycl", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
    ("cpu", "cpu", "cpu", {"fp16": "fp32", "int8": "fp32", "k8v4": "fp32", "q4_0": "fp32"}),
]


@pytest.mark.parametrize("kind,arch,plugin,expect", MATRIX, ids=[m[1] for m in MATRIX])
def test_no_switches_matrix(kind, arch, plugin, expect):
    got = {f: dm.choose(kind, arch, "prompt", f, variants(plugin), env={})[0] for f in dm.FORMATS}
    assert got == expect


# §5.3 / §5.4 switches: (kind, arch, plugin, env, fmt, op, n_q, expected variant)
SWITCH_CASES = [
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_IMMA": "1"}, "int8", "prompt", 1, "imma"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_IMMA": "1", "STRATA_PROMPT_ATTN_V1": ""}, "int8", "prompt", 1,
     "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_OLD": "1"}, "int8", "prompt", 1, "fp32"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_WARP": "attn"}, "int8", "prompt", 1, "v1"),      # Turing branch
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_WARP": "select"}, "int8", "prompt", 1, "grouped"),  # scorer only
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_GROUPED": "0"}, "int8", "prompt", 1, "v2"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_GROUPED": "0"}, "fp16", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_V1": ""}, "fp16", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_WARP": "attn"}, "fp16", "prompt", 1, "v1"),      # Turing branch
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_GROUPED": "0"}, "k8v4", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_V1": ""}, "k8v4", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_WARP": "attn"}, "k8v4", "prompt", 1, "v1"),      # Turing branch
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_GROUPED": "0"}, "q4_0", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_V1": ""}, "q4_0", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_GROUPED": "0", "STRATA_PROMPT_ATTN_IMMA": "1"}, "int8", "prompt",
     1, "imma"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_OLD": "1", "STRATA_PROMPT_ATTN_GROUPED": "1"}, "int8", "prompt", 1,
     "fp32"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_WARP": "1", "STRATA_PA_V2T": "1"}, "int8", "prompt", 1, "v1"),
    ("cuda", "sm_75", "sm_75", {"STRATA_PA_V2T": "1"}, "int8", "prompt", 1, "v2t"),
    ("cuda", "sm_75", "sm_75", {"STRATA_PA_V2T": "0"}, "int8", "prompt", 1, "v1"),
    ("cuda", "sm_90", "sm_90", {"STRATA_PROMPT_ATTN_Q4": "0"}, "q4_0", "prompt", 1, "fp32"),
    ("cuda", "sm_90", "sm_90", {"STRATA_EMULATE_CC": "75"}, "q4_0", "prompt", 1, "fp32"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_SPLIT_ATTN": "1"}, "int8", "decode", 1, "split"),
    ("cuda", "sm_90", "sm_90", {"STRATA_QSA_SPLIT_ATTN": "1"}, "fp16", "decode", 1, "flash"),
    ("cuda", "sm_90", "sm_90", {}, "int8", "decode", 1, "flash"),
    ("cuda", "sm_90", "sm_90", {}, "int8", "decode", 8, "flash"),      # flash at every query count (measured)
    ("cuda", "sm_90", "sm_90", {}, "int8", "decode", 64, "flash"),
    ("cuda", "sm_86", "sm_86", {}, "q4_0", "decode", 8, "flash"),
    ("cuda", "sm_90", "sm_90", {"STRATA_DECODE_FLASH": "0"}, "k8v4", "decode", 1, "fp32"),
    ("cuda", "sm_90", "sm_90", {"STRATA_ATTN_LANECELL": "1"}, "int8", "decode", 1, "fp32"),  # same bits, not built
    ("cuda", "sm_75", "sm_75", {"STRATA_QSA_SPLIT_ATTN": "1"}, "int8", "decode", 1, "fp32"),
    ("hip", "gfx1100", "gfx1100", {"STRATA_HIP_WMMA": "1"}, "int8", "prompt", 1, "wmma"),
    ("hip", "gfx1100", "gfx1100", {"STRATA_HIP_WMMA": "1"}, "fp16", "prompt", 1, "fp32"),
    ("hip", "gfx1201", "gfx1201", {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1"}, "int8", "prompt", 1,
     "wmma_fast"),
    ("hip", "gfx1201", "gfx1201", {"STRATA_HIP_WMMA": "1", "STRATA_PA_FAST": "1", "STRATA_PF_SWITCH_MIN_T": "64"},
     "int8", "prompt", 63, "wmma"),
    ("hip", "gfx1030", "gfx1030", {"STRATA_HIP_WMMA": "1"}, "int8", "prompt", 1, "fp32"),
    ("hip", "gfx1030", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1"}, "int8", "prompt", 1, "rdna2"),
    ("hip", "gfx1030", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1yes"}, "int8", "prompt", 1, "fp32"),  # exactly "1"
    ("hip", "gfx1030", "gfx1030", {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "0"}, "int8", "prompt", 1,
     "fp32"),
    ("hip", "gfx1100", "gfx1100", {"STRATA_PROMPT_ATTN_RDNA2": "1"}, "int8", "prompt", 1, "fp32"),
    ("hip", "gfx1100", "gfx1100", {"STRATA_PROMPT_ATTN_RDNA2": "1", "STRATA_ATTN_PRE75": "1"}, "int8", "prompt", 1,
     "rdna2"),
    ("hip", "gfx1100", "gfx1100", {"STRATA_HIP_WMMA": "1", "STRATA_PROMPT_ATTN_RDNA2": "1",
                                   "STRATA_ATTN_PRE75": "1"}, "int8", "prompt", 1, "wmma"),  # WMMA first
]


@pytest.mark.parametrize("case", SWITCH_CASES, ids=lambda c: f"{c[1]}-{c[4]}-{c[5]}-{'-'.join(sorted(c[3]))}")
def test_switches(case):
    kind, arch, plugin, env, fmt, op, n_q, expect = case
    assert dm.choose(kind, arch, op, fmt, variants(plugin), env=env, n_q=n_q)[0] == expect


def test_wish_not_in_plugin_falls_back_and_says_so():
    # A plugin without v2 (e.g. a custom build) runs the FP32 algorithm and names the missing variant.
    name, why = dm.choose("cuda", "sm_86", "prompt", "int8", ["fp32", "v1"], env={})
    assert name == "fp32" and "'v2' is not in the plugin" in why
    name, why = dm.choose("cuda", "sm_90", "prompt", "int8", ["fp32", "v1", "v2"], env={})
    assert name == "fp32" and "'grouped' is not in the plugin" in why
    # sm_80 SASS on an sm_86 device: the dispatch keys on the device's compute capability.
    assert dm.choose("cuda", "sm_86", "prompt", "int8", variants("sm_80"), env={})[0] == "v2"


def test_grouped_prompt_takes_any_grid_where_its_union_has_a_fast_path():
    # (head_dim, G, n_head_kv, multiprocessors): G 12 puts 5 queries in a block, G 4 sixteen.
    h200 = variants("sm_90")
    assert dm.grouped_blocks(2048, 12, 2) == 820 and dm.grouped_blocks(256, 4, 2) == 32
    def pick(n_q, shape, arch="sm_90", cap=2051, cells=2100):
        return dm.choose("cuda", arch, "prompt", "int8", variants(arch), env={}, n_q=n_q, shape=shape, cells=cells,
                         cap=cap)
    assert pick(2048, (256, 12, 2, 132), cells=32768)[0] == "grouped"
    # few blocks: grouped's pieces (H200: 2100 x 8 at (256, 12), 4 blocks, 34 us against v2's 124)
    assert pick(8, (256, 12, 2, 132))[0] == "grouped" and pick(16, (128, 4, 2, 132))[0] == "grouped"
    # (128, 4) at cap 2051: the running union outgrows shared memory; on sm_90 the cluster form takes it, elsewhere
    # it runs in global memory and a grid of a quarter of the multiprocessors is asked for
    assert pick(256, (128, 4, 2, 132))[0] == "grouped"
    name, why = pick(256, (128, 4, 2, 132), arch="sm_100")
    assert name == "v2" and "32 blocks" in why and "132 multiprocessors" in why and "global memory" in why
    assert pick(264, (128, 4, 2, 132), arch="sm_100")[0] == "grouped"        # 34 blocks
    assert pick(256, (128, 4, 2, 132), arch="sm_100", cap=1024)[0] == "grouped"  # 16 x 1024 x 8 bytes fit
    assert pick(256, (128, 4, 2, 132), cells=1 << 20)[0] == "grouped"        # 64 windows: the cluster form's batches
    assert pick(256, (128, 4, 2, 132), cells=1 << 24)[0] == "v2"             # 1024: 128 batches, past its 64
    assert pick(256, (128, 8, 2, 132))[0] == "grouped" and pick(256, (128, 4, 8, 132))[0] == "grouped"
    # head_dim 64: grouped runs only when forced
    assert dm.choose("cuda", "sm_90", "prompt", "int8", h200, env={}, n_q=2048, shape=(64, 8, 2, 132))[0] == "v2"
    # without a call's shape (explain): the answer for a full grid
    assert dm.choose("cuda", "sm_90", "prompt", "int8", h200, env={}, n_q=1)[0] == "grouped"
    # FP16 follows the same rule, with v1 where grouped does not pay
    assert dm.choose("cuda", "sm_90", "prompt", "fp16", h200, env={}, n_q=2048, shape=(256, 12, 2, 132))[0] == "grouped"
    name, why = dm.choose("cuda", "sm_100", "prompt", "fp16", variants("sm_100"), env={}, n_q=256,
                          shape=(128, 4, 2, 132), cells=2100, cap=2051)
    assert name == "v1" and why.startswith("FP16 on sm_80+: v1") and "32 blocks" in why
    assert dm.choose("cuda", "sm_90", "prompt", "fp16", h200, env={}, n_q=2048, shape=(64, 8, 2, 132))[0] == "v1"
    assert dm.choose("cuda", "sm_80", "prompt", "fp16", variants("sm_80"), env={})[0] == "v1"  # 163 KB


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="fmt"):
        dm.choose("cuda", "sm_90", "prompt", "int4", ["fp32"])
    with pytest.raises(ValueError, match="op"):
        dm.choose("cuda", "sm_90", "forward", "int8", ["fp32"])


def test_explain_simulate_names_plugin_and_variant(monkeypatch):
    for k in [k for k in __import__("os").environ if k.startswith("STRATA_")]:
        monkeypatch.delenv(k)
    text = resolve.explain("gfx1030,gfx1100,gfx1201,sm_90", plugins=[])
    blocks = text.split("\n\n")[1:]
    assert len(blocks) == 4  # the four simulated devices
    by_arch = {b.split()[1]: b for b in blocks}
    for arch in ("gfx1030", "gfx1100", "gfx1201", "sm_90"):
        assert f"with {arch} it would run: prompt: " in by_arch[arch], by_arch[arch]
        assert f'STRATA_TARGETS="cpu;{arch}" pip install .' in by_arch[arch]
    assert "int8 grouped" in by_arch["sm_90"]
    monkeypatch.setenv("STRATA_HIP_WMMA", "1")
    text = resolve.explain("gfx1030,gfx1100", plugins=[])
    assert "int8 wmma " in text and "switches: STRATA_HIP_WMMA" in text
    assert text.count("int8 wmma ") == 1  # gfx1030 is outside the WMMA gate


def test_int8_decode_is_flash_without_a_shape_and_split_only_when_forced():
    for n_q in (1, 2, 3, 8, 16, 24, 64, 256):
        assert dm.choose("cuda", "sm_90", "decode", "int8", variants("sm_90"), env={}, n_q=n_q)[0] == "flash"
        assert dm.choose("cuda", "sm_90", "decode", "int8", variants("sm_90"), env={"STRATA_QSA_SPLIT_ATTN": "1"},
                         n_q=n_q)[0] == "split"
        assert dm.choose("cuda", "sm_90", "decode", "int8", variants("sm_90"), env={"STRATA_QSA_SPLIT_ATTN": "1"},
                         n_q=n_q, shape=(256, 12, 2, 132))[0] == "split"


@pytest.mark.parametrize("fmt", ["int8", "fp16", "k8v4", "q4_0"])
def test_decode_runs_grouped_from_72_query_kv_head_pairs(fmt):
    def pick(n_q, shape=(256, 12, 2, 132), arch="sm_90", env=None, plugin=None):
        return dm.choose("cuda", arch, "decode", fmt, plugin or variants(arch), env=env or {}, n_q=n_q, shape=shape)
    def at(arch, n_q, cells):
        return dm.choose("cuda", arch, "decode", fmt, variants(arch), env={}, n_q=n_q, shape=(256, 12, 2, 132),
                         cells=cells)[0]
    if fmt == "q4_0":  # Q4_0's bar is 152 pairs a window (at (256, 12): its grouped kernel lost at 26 blocks, won
        # from 40; 32 blocks are 76 queries x 2 KV heads)
        assert [pick(n)[0] for n in (1, 8, 75, 76, 96, 256)] == ["flash"] * 3 + ["grouped"] * 3
        assert [pick(n, shape=(128, 8, 2, 132))[0] for n in (75, 76)] == ["flash", "grouped"]  # pairs, not blocks
        assert [pick(n, shape=(128, 8, 8, 132))[0] for n in (18, 19)] == ["flash", "grouped"]
        # caches a ONE form covers count as one window (16 groups); longer ones need 472 pairs (236 queries)
        assert [at("sm_90", n, 262144) for n in (75, 76, 80, 81)] == ["flash", "grouped", "grouped", "flash"]
        assert [at("sm_90", n, 524288) for n in (80, 235, 236)] == ["flash", "flash", "grouped"]
        assert dm.DECODE_LONG_PAIRS_Q4 == 472
        return
    # (256, 12), two KV heads: a block per 5 queries and KV head, so 16 blocks from 36 queries on
    assert [pick(n)[0] for n in (1, 8, 35, 36, 64, 256)] == ["flash"] * 3 + ["grouped"] * 3
    why = pick(64)[1]
    assert "128 (query, KV head) pairs, at least 72" in why and "26 blocks of 5 queries" in why
    assert "STRATA_DECODE_GROUPED=0" in why
    # pairs, not blocks: at (128, 8) 36 queries x 2 KV heads are 5 blocks, 9 x 8 KV heads 8 blocks, 72 x 1 KV head 9
    assert [pick(n, shape=(128, 8, 2, 132))[0] for n in (35, 36)] == ["flash", "grouped"]
    assert [pick(n, shape=(128, 8, 8, 132))[0] for n in (8, 9)] == ["flash", "grouped"]
    assert [pick(n, shape=(128, 8, 1, 132))[0] for n in (64, 71, 72, 96)] == ["flash", "flash", "grouped", "grouped"]
    assert pick(256, shape=(64, 8, 2, 132))[0] == "flash"      # head_dim 64: grouped is not chosen automatically
    assert pick(256, arch="sm_86")[0] == "flash"               # 99 KB of shared memory: grouped does not fit
    assert pick(256, env={"STRATA_DECODE_GROUPED": "0"})[0] == "flash"
    assert "STRATA_DECODE_GROUPED=0" in pick(256, env={"STRATA_DECODE_GROUPED": "0"})[1]
    assert pick(256, env={"STRATA_PROMPT_ATTN_GROUPED": "0"})[0] == "grouped"  # the prompt's switch is the prompt's
    assert pick(256, env={"STRATA_DECODE_FLASH": "0"})[0] == "fp32"
    assert pick(256, plugin=[v for v in variants("sm_90") if v != "grouped"])[0] == "flash"
    # a longer cache: 16 blocks per 32768-cell window of the union pre-pass (G 12), at most 12 windows; where the
    # pre-pass runs in clusters (sm_90), caches of up to four windows count as one, and longer ones need 30 blocks,
    # FP16 20 (DECODE_LONG_PAIRS 142 and 92: the search path's union does not grow with the cache) ...
    assert [at("sm_90", n, 131072) for n in (35, 36)] == ["flash", "grouped"]       # 14 / 16 blocks
    assert [at("sm_90", n, 65536) for n in (35, 36)] == ["flash", "grouped"]
    if fmt == "fp16":  # 20 blocks (FP16's flash grid passes one wave sooner)
        assert [at("sm_90", n, 524288) for n in (45, 46, 64)] == ["flash", "grouped", "grouped"]  # 18 / 20 / 26
        assert dm.DECODE_LONG_PAIRS_FP16 == 92
    else:
        assert [at("sm_90", n, 524288) for n in (64, 70, 71)] == ["flash", "flash", "grouped"]  # 26 / 28 / 30
        assert [at("sm_90", n, 294912) for n in (64, 70, 71)] == ["flash", "flash", "grouped"]  # nine windows
        assert dm.DECODE_LONG_PAIRS == 142
    # ... except caches that a ONE form of the pre-pass covers (at most 8 windows at G 12, 8 x the groups within the
    # 132 multiprocessors: up to 16 groups of 5 queries), which count as one window
    assert [at("sm_90", n, 262144) for n in (35, 36, 64, 80, 81)] == ["flash"] + ["grouped"] * 4
    assert [at("sm_90", n, 163840) for n in (35, 36, 64)] == ["flash", "grouped", "grouped"]  # five windows
    assert [dm.choose("cuda", "sm_90", "decode", fmt, variants("sm_90"), env={}, n_q=40, shape=(256, 12, 2, sms),
                      cells=262144)[0] for sms in (64, 60)] == ["grouped", "flash"]  # 8 groups x 8 > 60
    assert [at("sm_100", n, 131072) for n in (143, 144)] == ["flash", "grouped"]    # no clusters: 4 x 72 pairs
    assert at("sm_90", 956, 1 << 22) == "grouped"                                   # 384 blocks >= 16 x 12


def test_decode_takes_flash_where_the_union_would_run_in_global_memory():
    # At G 1-4 a group has 16-32 queries, so at cap 2051 its running union (16 x 2051 x 8 bytes at G 4) outgrows
    # shared memory: the union pre-pass then has a fast path only in the ONE cluster form (sm_90, caches of at most
    # grouped_union_cb_max windows, in several waves if need be, and longer ones in batches of windows, up to 64
    # batches), and the global-memory path otherwise made grouped 2-5x slower than flash (H200, (128, 4), 8 KV heads)
    def at(n_q, cells, cap=2051, arch="sm_90", shape=(128, 4, 8, 132)):
        return dm.choose("cuda", arch, "decode", "int8", variants(arch), env={}, n_q=n_q, shape=shape, cells=cells,
                         cap=cap)
    assert [at(n, 32768)[0] for n in (8, 9, 32, 2128)] == ["flash", "grouped", "grouped", "grouped"]
    assert [at(n, 131072)[0] for n in (256, 272)] == ["grouped", "grouped"]   # eight windows: MANY at CB 8
    assert [at(64, c)[0] for c in (131072, 131076, 1 << 20)] == ["grouped"] * 3  # 9 / 64 windows: MANY in batches
    assert "global memory" in at(64, 1 << 24)[1] and "cap 2051" in at(64, 1 << 24)[1]  # 128 batches
    assert at(64, 32768, arch="sm_100")[0] == "flash"                      # no clusters there
    assert at(64, 32768, cap=1024, arch="sm_100")[0] == "grouped"          # 16 x 1024 x 8 bytes fit
    assert at(64, 1 << 20, cap=1024)[0] == "grouped"
    assert at(64, 1 << 20, cap=0)[0] == "grouped"                          # cap unknown: assumed to fit
    # G 2: 32 queries a group, windows of 8192 cells, clusters of at most 4: 64 batches of four windows
    assert [at(64, c, shape=(128, 2, 8, 132))[0] for c in (32768, 32772, 1 << 21, (1 << 21) + 4)] == \
        ["grouped", "grouped", "grouped", "flash"]
    # (256, 12): 5 queries a group, the union fits at any cap the spec's caches take
    assert [at(n, 1 << 20, shape=(256, 12, 2, 132))[0] for n in (64, 128)] == ["flash", "grouped"]
