"""grouped_ws's packed form (templates/cuda/grouped.cu.j2: pack_range, pack_tiles, grouped_pack_merge_kernel;
grouped_ws.inc.j2: the block's items), mirrored: block b of nb takes the unit fractions [b U / nb, (b + 1) U / nb),
unit u's tiles [floor(nt lo / nb), floor(nt hi / nb)). Every tile of every unit must be taken exactly once, a block's
items must fit its warp of lanes, the partial-result slots must be distinct and within the 2 nb the launcher sizes,
and the merge must visit every unit taken in more than one segment exactly once, with its segments' slots in
order."""
import random
import re
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "cuda"
WS_MAX_ITEMS = int(re.search(r"constexpr int WS_MAX_ITEMS = (\d+);",
                             (TEMPLATES / "grouped_ws.inc.j2").read_text()).group(1))


def pack_range(b: int, nb: int, units: int, u: int, nt: int) -> tuple[int, int]:
    lo = max(b * units, u * nb) - u * nb
    hi = min((b + 1) * units, (u + 1) * nb) - u * nb
    return (nt * lo // nb, nt * hi // nb) if lo < hi else (0, 0)


def pack_tiles(L: int, T: int = 64) -> int:
    return -(-L // T) if L > T else 1


def block_items(b: int, nb: int, units: int, nts: list[int]) -> list[tuple[int, int, int, int]]:
    """(unit, t0, t1, slot) of block b as its warp 0 builds them (slot -1: whole, written to out): every unit whose
    fraction range meets the block's, a unit cut by a block boundary taking slot 2 b (the block's first) or 2 b + 1
    even where it has no tile here."""
    first, end = b * units // nb, -(-(b + 1) * units // nb)
    assert end - first <= 32, "a block's units must fit one warp's lanes"
    items = []
    for lane, u in enumerate(range(first, end)):
        t0, t1 = pack_range(b, nb, units, u, nts[u])
        whole = b * units <= u * nb and (u + 1) * nb <= (b + 1) * units
        if whole:
            assert (t0, t1) == (0, nts[u])
        items.append((u, t0, t1, -1 if whole else 2 * b + (0 if lane == 0 else 1)))
    return items


def merged_units(nb: int, units: int) -> list[tuple[int, list[int]]]:
    """(unit, its slots in order) that grouped_pack_merge_kernel merges (its blocks x - 1 for x = 1 .. nb - 1)."""
    out = []
    for x in range(1, nb):
        u = x * units // nb
        if x * units == u * nb or x != u * nb // units + 1:
            continue
        b0, b1 = u * nb // units, -(-(u + 1) * nb // units)
        assert b1 - b0 <= 5, "the merge holds 5 segments (the launcher keeps nb <= 4 U)"
        out.append((u, [2 * b + (0 if u == b * units // nb else 1) for b in range(b0, b1)]))
    return out


CASES = [(104, 132), (26, 104), (52, 132), (78, 132), (820, 132), (2, 8), (1, 4), (7, 28), (3960, 132),
         (133, 132), (131, 132), (264, 132), (5, 3), (30, 1)]


@pytest.mark.parametrize("units,nb", CASES)  # as the launcher picks them: nb <= 4 units
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_tile_is_taken_once_and_every_split_unit_merged_once(units, nb, seed):
    rng = random.Random(seed)
    # union sizes: mostly like the spec's (~2,234 entries), some empty (width 0 everywhere), some under one tile
    nts = [pack_tiles(rng.choice([0, 1, 40, 64, 65, 2234, 2234, 2400, rng.randrange(0, 9000)])) for _ in range(units)]
    taken = {u: [] for u in range(units)}
    slots = set()
    for b in range(nb):
        items = block_items(b, nb, units, nts)
        assert len(items) <= WS_MAX_ITEMS
        for u, t0, t1, slot in items:
            taken[u].append((b, t0, t1, slot))
            if slot >= 0:
                assert slot not in slots and 0 <= slot < 2 * nb
                slots.add(slot)
        # a unit outside the block's lanes has no tile in it
        lanes = set(range(b * units // nb, -(-(b + 1) * units // nb)))
        for u in set(range(units)) - lanes:
            t0, t1 = pack_range(b, nb, units, u, nts[u])
            assert t0 == t1
    split = []
    for u, segs in taken.items():
        ranges = [(t0, t1) for _, t0, t1, _ in segs]  # in block order
        assert ranges[0][0] == 0 and ranges[-1][1] == nts[u]
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), f"unit {u}: {ranges}"
        assert [b for b, *_ in segs] == sorted(b for b, *_ in segs)
        if len(segs) > 1:
            assert all(slot >= 0 for *_, slot in segs)
            split.append((u, [slot for *_, slot in segs]))
        else:
            assert segs[0][3] == -1
    assert merged_units(nb, units) == split


def test_the_launcher_bound_keeps_items_within_a_warp():
    # the launcher packs only U <= (WS_MAX_ITEMS - 2) nb units: a block then touches at most WS_MAX_ITEMS - 1
    for nb in (1, 7, 132, 256):
        units = (WS_MAX_ITEMS - 2) * nb
        assert max(-(-(b + 1) * units // nb) - b * units // nb for b in range(nb)) <= WS_MAX_ITEMS - 1


def test_the_templates_spell_the_mirrored_rules():
    src = (TEMPLATES / "grouped.cu.j2").read_text()
    assert "const int lo = (b * U > u * nb ? b * U : u * nb) - u * nb;" in src
    assert "t0 = lo < hi ? int(unsigned(nt * lo) / unsigned(nb)) : 0;" in src
    assert "return L > T ? (L + T - 1) / T : 1;" in src
    assert "if (x * U == u * nb || x != int(unsigned(u * nb) / unsigned(U)) + 1) return;" in src
    ws = (TEMPLATES / "grouped_ws.inc.j2").read_text()
    assert "sm.it_slot[at] = whole ? -1 : 2 * bb + (lane == 0 ? 0 : 1);" in ws
    assert "const bool whole = bb * U <= u * nb && (u + 1) * nb <= (bb + 1) * U;" in ws
    assert "slot[i] = 2 * b + (u == b * U / nb ? 0 : 1);" in src
