"""The grouped prompt kernel's scratch as Python sizes it (ops.grouped_scratch_floats, what a plan allocates so that no
call allocates) must hold what the launcher in templates/cuda/grouped.cu.j2 asks for: the union (an entry's cell,
membership word and, where shared memory cannot hold it, the running union: 16 bytes an entry at most), the entry
counts, and the partial results of the work units it runs in pieces (at most MAX_SLOTS pieces, and at most 8 per
unit, of ROWS x HD output floats plus 2 x ROWS maxima and sums, and 16 bytes of alignment), or of the packed form's
blocks (two slots a block)."""
import re
from pathlib import Path

import pytest

from strata_kernels import ops
from strata_kernels.targets import GROUPED_PAIR_GEOMETRY, grouped_queries

SOURCE = (Path(__file__).resolve().parents[2] / "templates" / "cuda" / "grouped.cu.j2").read_text()


def _constant(name: str) -> int:
    m = re.search(rf"constexpr int {name} = (\d+);", SOURCE)
    assert m, f"{name} not found in grouped.cu.j2"
    return int(m.group(1))


def _pieces(units: int, sms: int, cap: int, max_slots: int) -> tuple[int, int]:
    """(whole, pieces) as the launcher's makespan model picks them (grouped.cu.j2)."""
    tl, o = max(cap / 64, 1.0), 3.0
    rem = units % sms
    best, whole, pieces = -1.0, units, 1
    w, k = units - rem, 0
    while w >= 0 and k < 4:
        for n in range(1, 9):
            split = units - w
            if n > 1 and (split == 0 or split * n > max_slots):
                break
            cost = (w // sms) * (tl + o) + -(-split * n // sms) * (tl / n + o)
            if best < 0 or cost < best - 1e-9:
                best, whole, pieces = cost, (units if n == 1 else w), n
        w, k = w - sms, k + 1
    return whole, pieces


def _launcher_bytes(n_q: int, cap: int, group: int, head_dim: int, n_head_kv: int, sms: int,
                    packed: bool = True, rows: int = 0) -> int:
    """The launcher's request (grouped.cu.j2, worst case: the union in global memory; packed: or the packed form's);
    rows 128: the pair form's (variant gpair)."""
    rows, max_slots = rows or _constant("ROWS"), _constant("MAX_SLOTS")
    nq = grouped_queries(group, rows)
    groups = -(-n_q // nq)
    union = groups * nq * cap * 16 + groups * 4 + 64
    units = groups * n_head_kv
    whole, pieces = _pieces(units, sms, cap, max_slots)
    slot = (rows * head_dim + 2 * rows) * 4
    need = union
    if whole < units:
        assert (units - whole) * pieces <= max_slots and pieces <= 8
        need = union + (units - whole) * pieces * slot + 16
    # grouped_ws's packed form (taken by its model or STRATA_GROUPED_PACK=1): nb = min(sms, 4 units, MAX_SLOTS / 2)
    # blocks, two slots each, where a block touches at most WS_MAX_ITEMS units
    nb = min(sms, 4 * units, max_slots // 2)
    ws_src = (Path(__file__).resolve().parents[2] / "templates" / "cuda" / "grouped_ws.inc.j2").read_text()
    max_items = int(re.search(r"constexpr int WS_MAX_ITEMS = (\d+);", ws_src).group(1))
    if packed and nb >= 1 and units <= (max_items - 2) * nb:
        need = max(need, union + 2 * nb * slot + 16)
    return need


def test_the_piece_model_keeps_the_prompt_split_and_splits_decode_sized_calls():
    # H200 (132 SMs), (256, 12), two KV heads, cap 2051: 2048 queries keep 792 whole units and 28 in quarters; 192
    # queries (78 units, one partial wave) run in thirds; 256 (104 units) stay whole; 64 (26 units) in fifths.
    assert _pieces(820, 132, 2051, 512) == (792, 4)
    assert _pieces(78, 132, 2051, 512) == (0, 3)
    assert _pieces(104, 132, 2051, 512) == (104, 1)
    assert _pieces(26, 132, 2051, 512) == (0, 5)


@pytest.mark.parametrize("n_q,cap,group,head_dim,n_head_kv", [
    (2048, 2051, 12, 256, 2), (1500, 2051, 12, 256, 2), (256, 2051, 12, 256, 2), (6, 300, 12, 256, 2),
    (2048, 2051, 4, 128, 2), (65541, 200, 12, 256, 2), (1, 1, 1, 128, 8), (300, 4096, 8, 128, 16),
    (192, 2051, 12, 256, 2), (64, 2051, 12, 256, 2), (40, 64, 12, 256, 2), (4096, 2051, 1, 128, 4)])
@pytest.mark.parametrize("sms", [1, 20, 108, 132, 148, 170, 300, 1000])
def test_plan_scratch_holds_what_the_launcher_asks(n_q, cap, group, head_dim, n_head_kv, sms):
    floats = ops.grouped_scratch_floats(n_q, cap, group, head_dim, n_head_kv)
    assert floats * 4 >= _launcher_bytes(n_q, cap, group, head_dim, n_head_kv, sms)


@pytest.mark.parametrize("n_q", [2048, 1500, 256, 192, 64, 6, 65541])
@pytest.mark.parametrize("sms", [1, 20, 132, 300])
def test_plan_scratch_holds_the_pair_forms_request_at_256_12(n_q, sms):
    # the CUDA dispatch runs grouped's INT8 prompts at GROUPED_PAIR_GEOMETRY, (256, 12), in the pair form (128-row
    # units of 10 queries)
    assert GROUPED_PAIR_GEOMETRY == (256, 12)
    assert re.search(r"constexpr int ROWS = 128;", SOURCE)
    floats = ops.grouped_scratch_floats(n_q, 2051, 12, 256, 2)
    assert floats * 4 >= _launcher_bytes(n_q, 2051, 12, 256, 2, sms, rows=128)
    assert floats * 4 >= _launcher_bytes(n_q, 2051, 12, 256, 2, sms)


def test_the_split_pieces_are_counted():
    # 2048 queries at G 12 (410 groups) x 2 KV heads on 132 SMs: 28 units run as 4 pieces each, 7.4 MB of partials
    # beyond the union; without them in the plan's scratch every such call would fall back to the plugin's buffer.
    with_pieces = _launcher_bytes(2048, 2051, 12, 256, 2, 132, packed=False)
    union_only = _launcher_bytes(2048, 2051, 12, 256, 2, 1, packed=False)
    assert with_pieces - union_only == 28 * 4 * (64 * 256 + 128) * 4 + 16
    assert ops.grouped_scratch_floats(2048, 2051, 12, 256, 2) * 4 >= with_pieces
    # packed over 132 blocks instead: two slots a block
    packed = _launcher_bytes(2048, 2051, 12, 256, 2, 132)
    assert packed - union_only == 2 * 132 * (64 * 256 + 128) * 4 + 16
    assert ops.grouped_scratch_floats(2048, 2051, 12, 256, 2) * 4 >= packed
