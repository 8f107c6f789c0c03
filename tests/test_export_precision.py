"""Issue 23 item 6: exports carry numbers a script can use: p-values in full precision (a tiny
p-value is not "0.000000"), and one table per CSV (the gate is not a row of the roofline table)."""

from __future__ import annotations

import csv
import dataclasses
import io

from compare_data import golden_runs

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.export.formats import export_comparison, render_csv


def test_p_values_are_written_in_full_precision():
    a, b = golden_runs()
    grid = build_grid_from_runs(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    tiny = next(c for c in grid.cells if c.p_value is not None)
    grid = dataclasses.replace(grid, cells=tuple(dataclasses.replace(c, p_value=3.2e-09, p_adjusted=1.28e-08)
                                                 if c is tiny else c for c in grid.cells))
    rows = list(csv.DictReader(io.StringIO(render_csv(grid))))
    row = next(r for r in rows if (int(r["concurrency"]), r["metric"]) == (tiny.concurrency, tiny.metric))
    assert float(row["p_value"]) == 3.2e-09 and float(row["p_holm"]) == 1.28e-08
    for r, c in zip(rows, grid.cells):
        if c.p_value is not None:
            assert float(r["p_value"]) == c.p_value  # reads back as the very float


def test_roofline_and_gate_are_tables_of_their_own(tmp_path):
    from moe_tui.gate.correctness import GateVerdict
    from moe_tui.grids.extras import GridExtras, RooflineCell

    a, b = golden_runs()
    grid = build_grid_from_runs(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    extras = GridExtras(GateVerdict("same", "identical tokens"), {64: RooflineCell(64, None, 12.5, 3, None)}, {})
    paths = export_comparison(dataclasses.replace(grid, extras=extras), tmp_path, stem="x")
    assert {p.name for p in paths.all()} == {p.name for p in tmp_path.iterdir()}
    roofline = list(csv.DictReader(io.StringIO((tmp_path / "x-roofline.csv").read_text())))
    assert [r["concurrency"] for r in roofline] == ["64"]  # a numeric column stays numeric
    gate = list(csv.DictReader(io.StringIO((tmp_path / "x-gate.csv").read_text())))
    assert gate == [{"gate_status": "same", "gate_words": "identical tokens"}]
