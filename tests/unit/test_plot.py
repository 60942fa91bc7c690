"""`bench --plot` draws the benchmark rows as a PNG (matplotlib is optional: the test skips without it), and the
bench table says its units and shapes and leaves out columns nothing fills."""
from __future__ import annotations

import pytest

from strata_kernels import bench

ROWS = [
    bench.BenchRow("4096x64", "int8", "plugin auto (fp32)", 12.0, 1.0, 1e-6, 2e-7),
    bench.BenchRow("4096x64", "int8", "numpy fp32 gather+softmax+matmul", 30.0, 2.5, 2e-6, 4e-7),
    bench.BenchRow("4096x64", "int8", "torch fp32 gather+SDPA", None, None, None, None, "not run: no torch"),
    bench.BenchRow("4096x64", "int8", "gather floor, per query", 1.5, 0.125, None, None, "reads 0.01 GB"),
    bench.BenchRow("1500x64", "int8", "plugin auto (fp32)", 3.0, 1.0, 1e-6, 2e-7, "", None, 3.0),
]


def test_bench_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (pip install 'strata-kernels[plot]')")
    from strata_kernels.plot import plot_rows
    out = plot_rows(ROWS, tmp_path / "bench.png", "test")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_refuses_rows_without_times(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (pip install 'strata-kernels[plot]')")
    from strata_kernels.plot import plot_rows
    with pytest.raises(ValueError, match="nothing to draw"):
        plot_rows([ROWS[2]], tmp_path / "x.png")


def test_bench_table_names_units_and_drops_empty_columns():
    text = bench.format_rows(ROWS, "cpu")
    head = text.splitlines()[0]
    assert head.startswith("context x queries") and "ms per call" in head
    assert "peak MB" not in head and "wall ms" not in head          # nothing fills them on the CPU
    assert "median wall time of single calls" in text
    gpu = [bench.BenchRow("32768x2048", "int8", "plugin auto (v2)", 2.0, 1.0, 1e-6, 2e-7, "", 0.0, 2.1)]
    gpu_text = bench.format_rows(gpu, "cuda")
    assert "wall ms" in gpu_text.splitlines()[0] and "peak MB" in gpu_text.splitlines()[0]
    assert "events around back-to-back calls" in gpu_text
    assert "GB/s" not in gpu_text.splitlines()[0]                     # a prompt row reads no counted bytes


def test_decode_rows_give_gb_s_by_events_and_by_graph_replay():
    row = bench.BenchRow("32768x64", "int8", "plugin (flash)", 0.0673, 1.0, 1e-6, 5e-7, "", 0.0, 0.091, 0.0634,
                         138.6e6 / (0.0673 * 1e6), 138.6e6 / (0.0634 * 1e6))
    text = bench.format_rows([row], "cuda")
    head, _, cells = text.splitlines()[:3]
    cols = [c for c in head.split("  ") if c.strip()]
    assert "GB/s" in cols and "graph GB/s" in cols
    vals = cells.split()  # the method "plugin (flash)" is two words: values sit one place right of their column
    assert vals[cols.index("GB/s") + 1] == "2059" and vals[cols.index("graph GB/s") + 1] == "2186"
    assert "graph GB/s: the same bytes / graph ms" in text
