"""Summarise ncu's SASS source page (CSV): the lines with the most warp-stall samples (with each line's stall
reasons), the samples of each region of the kernel (split at its setmaxnreg instructions, USETMAXREG: in a warp-
specialised kernel the prologue, the consumers' and the producer's code) by stall reason, and the most excessive
shared-memory wavefronts. Usage: python3 ci/ncu_source_top.py source.csv [N]."""
import csv
import sys


def num(x):
    try:
        return float(str(x).replace(",", ""))
    except ValueError:
        return 0.0


rows = list(csv.reader(open(sys.argv[1], errors="replace")))
start = next((i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r)), None)
if start is None:
    sys.exit(f"{sys.argv[1]}: no SASS source table (a 'Source' column) in this CSV: ncu --page source --csv")
head, body = rows[start], rows[start + 1:]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
col = {h.strip(): i for i, h in enumerate(head)}
src = col.get("Source")
samp = next((i for h, i in col.items() if h.startswith("Warp Stall Sampling (All")), None)
exc = next((i for h, i in col.items() if "Shared Excessive" in h and "Wavefronts" in h), None)
ins = next((i for h, i in col.items() if h.startswith("Instructions Executed")), None)
reasons = [(h, i) for h, i in col.items() if h.startswith("stall_") or h.startswith("smsp__pcsamp_warps_issue_stalled")]


def short(h):
    """A stall reason's column name without ncu's metric prefix."""
    return h.replace("smsp__pcsamp_warps_issue_stalled_", "")


total = sum(num(r[samp]) for r in body if len(r) > samp) if samp is not None else 0
print(f"columns: {len(head)}; stall samples: {total:.0f}")
if samp is not None:
    print(f"\n== top {n} lines by stall samples ==")
    for r in sorted((r for r in body if len(r) > samp), key=lambda r: -num(r[samp]))[:n]:
        why = sorted(((num(r[i]), h) for h, i in reasons if len(r) > i and num(r[i]) > 0), reverse=True)[:3]
        print(f"{num(r[samp]) / max(total, 1) * 100:5.1f}%  {r[src].strip()[:80]:80s}  " +
              " ".join(f"{short(h)}={v:.0f}" for v, h in why))
    # regions split at each USETMAXREG (address order), their samples by reason
    cuts = [k for k, r in enumerate(body) if len(r) > src and "USETMAXREG" in r[src]]
    if cuts:
        print("\n== regions (split at USETMAXREG) ==")
        for a, b in zip([0] + cuts, cuts + [len(body)]):
            part = [r for r in body[a:b] if len(r) > samp]
            s_ = sum(num(r[samp]) for r in part)
            why = sorted(((sum(num(r[i]) for r in part if len(r) > i), h) for h, i in reasons), reverse=True)[:6]
            first = part[0][src].strip()[:40] if part else ""
            n_ins = (f"{sum(num(r[ins]) for r in part if len(r) > ins):.4g} warp instructions, "
                     if ins is not None else "")
            print(f"lines {a}-{b - 1} ({first}): {n_ins}{s_ / max(total, 1) * 100:5.1f}% of samples; " +
                  " ".join(f"{short(h)}={v / max(s_, 1) * 100:.0f}%" for v, h in why if v > 0))
if exc is not None:
    print(f"\n== top 15 lines by excessive shared wavefronts ==")
    for r in sorted((r for r in body if len(r) > exc), key=lambda r: -num(r[exc]))[:15]:
        if num(r[exc]) > 0:
            print(f"{num(r[exc]):12.0f}  {r[src].strip()[:100]}")
print("\nall columns:", [h for h in head][:80])
