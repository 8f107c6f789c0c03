"""The exported chart's data: a concurrency only flagged runs measured (c=256/1024 on a client-bound
box) is drawn hollow at those runs' mean, as the chart's note promises, not dropped."""

from __future__ import annotations

from compare_data import make_run, snapshot, summary

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.export.plot import PlotPoint, plot_points

SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)


def _runs(name, conc, values, start, snap, **kw):
    return [make_run(start + i, name, concurrency=conc, summary=summary(v), profile=snap, **kw)
            for i, v in enumerate(values)]


def test_flagged_cells_are_drawn_hollow_at_the_flagged_mean():
    a = _runs("a", 64, [200.0, 202.0], 1, SNAP_A) + _runs("a", 256, [300.0, 310.0], 5, SNAP_A, flags=("client_bound",))
    b = _runs("b", 64, [260.0, 262.0], 10, SNAP_B) + _runs("b", 256, [400.0], 15, SNAP_B, flags=("client_bound",))
    grid = build_grid_from_runs(a, b)
    assert grid.cell(256, "output_throughput").baseline.mean is None  # left out of the cell's mean
    base = plot_points(grid.baseline_series)
    assert [p.concurrency for p in base] == [64, 256]
    assert base[1] == PlotPoint(256, 305.0, 0.0, filled=False, flagged=True)
    assert plot_points(grid.candidate_series)[1] == PlotPoint(256, 400.0, 0.0, filled=False, flagged=True)
    assert not base[0].flagged and base[0].value == 201.0
