"""ci/ncu_source_top.py, the device scripts' summary of ncu's SASS source page: the lines with the most stall samples
and, for a warp-specialised kernel, the samples and instructions of each region between its setmaxnreg
instructions (prologue, consumers, producer) by stall reason."""
import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAD = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed",
        "smsp__pcsamp_warps_issue_stalled_barrier", "smsp__pcsamp_warps_issue_stalled_wait"]
BODY = [
    ["0", "LDC R1, c[0x0][0x28]", "5", "100", "1", "4"],
    ["10", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xd0", "0", "8", "0", "0"],
    ["20", "HGMMA.64x64x16.F32 R24, gdesc[UR24], RZ", "20", "300", "15", "5"],
    ["30", "USETMAXREG.DEALLOC.CTAPOOL 0x58", "1", "4", "1", "0"],
    ["40", "LDGSTS.E.BYPASS.128 [R78], desc[UR24][R12.64]", "30", "600", "0", "30"],
]


def _summary(tmp_path, rows):
    path = tmp_path / "source.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["Kernel", "grouped_ws_kernel"], HEAD, *rows])
    out = subprocess.run([sys.executable, str(ROOT / "ci" / "ncu_source_top.py"), str(path), "3"],
                         capture_output=True, text=True, check=True).stdout
    return out


def test_top_lines_and_regions(tmp_path):
    out = _summary(tmp_path, BODY)
    assert "stall samples: 56" in out
    top = out.split("== top 3 lines by stall samples ==")[1].split("==")[0].strip().splitlines()
    assert top[0].split()[0] == "53.6%" and "LDGSTS" in top[0] and "wait=30" in top[0]
    regions = out.split("== regions (split at USETMAXREG) ==")[1].strip().splitlines()[:3]
    assert len(regions) == 3
    # prologue 5 of 56 samples (wait 4, barrier 1), consumers 20 (barrier 15), producer 31 (wait 30, barrier 1)
    assert "lines 0-0" in regions[0] and "100 warp instructions" in regions[0] and "8.9% of samples" in regions[0]
    assert "wait=80%" in regions[0] and "barrier=20%" in regions[0]
    assert "TRY_ALLOC" in regions[1] and "308 warp instructions" in regions[1] and "35.7% of samples" in regions[1]
    assert "barrier=75%" in regions[1]
    assert "DEALLOC" in regions[2] and "604 warp instructions" in regions[2] and "55.4% of samples" in regions[2]
    assert "wait=97%" in regions[2]


def test_no_setmaxnreg_no_regions(tmp_path):
    out = _summary(tmp_path, [r for r in BODY if "USETMAXREG" not in r[1]])
    assert "== regions" not in out
    assert "stall samples: 55" in out


def test_not_a_source_page(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("ID,Metric\n1,2\n")
    p = subprocess.run([sys.executable, str(ROOT / "ci" / "ncu_source_top.py"), str(path)], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "no SASS source table" in p.stderr
