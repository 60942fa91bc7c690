"""Tables of ci/gpu_geometries.sh's results (Markdown on stdout), and the coverage check of its parity runs.

  python ci/geometry_tables.py parity OUT 256x12 128x4 ...   one row per geometry: each variant of the plugin (from
      OUT/plugin.json) passed / failed / skipped; exit 1 when a geometry's JSON is missing, any case failed, or a
      variant of the plugin passed no case at some geometry (every variant must run at every prebuilt geometry)
  python ci/geometry_tables.py bench OUT 128x4 128x8 256x12  ms per call per (shape, method) with one column per
      geometry, prompt and decode; exit 1 when a geometry's JSON is missing
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def parity(out: Path, geometries: list[str]) -> int:
    variants = json.loads((out / "plugin.json").read_text())["variants"]
    bad: list[str] = []
    print("| geometry | " + " | ".join(variants) + " | summary |")
    print("|---" * (len(variants) + 2) + "|")
    for g in geometries:
        doc = _load(out / f"parity_{g}.json")
        if doc is None:
            bad.append(f"{g}: no parity JSON (the run failed or timed out; see parity_{g}.txt)")
            print(f"| {g} | " + " | ".join("-" for _ in variants) + " | no result |")
            continue
        cells = []
        for v in variants:
            rows = [r for r in doc["results"] if v in r["variant"].split(",")]
            passed = sum(r["status"] == "PASS" for r in rows)
            failed = sum(r["status"] == "FAIL" for r in rows)
            cells.append(f"{passed} pass" + (f", **{failed} FAIL**" if failed else ""))
            if failed:
                bad.append(f"{g}: {v} failed {failed} case(s)")
            if not passed:
                bad.append(f"{g}: {v} passed no case (not run at this geometry?)")
        s = doc["summary"]
        print(f"| {g} | " + " | ".join(cells) + f" | {s['passed']} passed, {s['failures']} failed |")
    for line in bad:
        print(f"- {line}")
    print(f"\nparity coverage: {'OK' if not bad else 'INCOMPLETE'} ({len(geometries)} geometries x "
          f"{len(variants)} variants)")
    return 1 if bad else 0


def bench(out: Path, geometries: list[str]) -> int:
    missing = 0
    for op in ("prompt", "decode"):
        table: dict[tuple[str, str], dict[str, float | None]] = {}
        for g in geometries:
            doc = _load(out / f"bench_{op}_{g}.json")
            if doc is None:
                missing += 1
                continue
            for r in doc["rows"]:
                table.setdefault((r["shape"], r["method"]), {})[g] = r["ms"]
        print(f"\n{op}, int8, ms per call (median; H = head_dim x G):\n")
        print("| shape | method | " + " | ".join(geometries) + " |")
        print("|---|---|" + "---|" * len(geometries))
        for (shape, method), ms in table.items():
            cells = [f"{ms[g]:.3f}" if ms.get(g) is not None else "-" for g in geometries]
            print(f"| {shape} | {method} | " + " | ".join(cells) + " |")
    return 1 if missing else 0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("parity", "bench"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, out, geometries = argv[0], Path(argv[1]), argv[2:]
    return parity(out, geometries) if kind == "parity" else bench(out, geometries)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
