"""Exports: golden Markdown/CSV/text (the bytes are the contract), atomic writes, the plot.

To regenerate the golden files after an intended change: `MOE_TUI_REGEN_GOLDEN=1 pytest
tests/test_export.py`, then read the diff before committing it.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest
from compare_data import control_fail_runs, golden_runs

from moe_tui import export as export_mod
from moe_tui.compare import build_grid_from_runs
from moe_tui.export import (
    CSV_COLUMNS,
    SIMULATED_BANNER,
    export_comparison,
    render_csv,
    render_markdown,
    render_text,
    write_atomic,
)

GOLDEN = Path(__file__).parent / "golden"
STAMP = "2026-01-01T00:00:00Z"


def _grids():
    a, b = golden_runs()
    mixed = build_grid_from_runs(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    a, b = control_fail_runs()
    control = build_grid_from_runs(a, b, baseline_name="sim-cutlass", candidate_name="sim-cutedsl")
    return {"mixed": mixed, "control_fail": control}


def _rendered(name, grid):
    return {
        f"{name}.md": render_markdown(grid, generated_at=STAMP, plot_name=f"{name}-throughput.png", version="0.1.0"),
        f"{name}.csv": render_csv(grid),
        f"{name}.txt": render_text(grid),
    }


@pytest.mark.parametrize("name", ["mixed", "control_fail"])
def test_golden_files(name):
    outputs = _rendered(name, _grids()[name])
    if os.environ.get("MOE_TUI_REGEN_GOLDEN"):
        for fname, text in outputs.items():
            (GOLDEN / fname).write_bytes(text.encode("utf-8"))
    for fname, text in outputs.items():
        expected = (GOLDEN / fname).read_bytes()
        assert text.encode("utf-8") == expected, f"{fname} differs from tests/golden/{fname}"


def test_markdown_carries_what_a_reader_needs():
    grids = _grids()
    md = render_markdown(grids["mixed"], plot_name="x-throughput.png")
    assert SIMULATED_BANNER not in md
    for needle in ("## Profiles", "extra_args --cuda-graph-max-bs", "LAUNCH SETTING DIFFERS", "## Provenance",
                   "| driver_version | 580.65.06 | 580.82.07 | DIFFERS |", "## Benchmark specs",
                   "different spec: output_len: 1024 vs 512", "n=1, noise unknown", "**better**", "**worse**",
                   "Control check (agrees)", "![Output throughput vs concurrency](x-throughput.png)",
                   "[x-throughput.svg](x-throughput.svg)", "run 30: server resolved MoE backend triton"):
        assert needle in md, needle
    # every fingerprint used is listed with its fields
    for fp in grids["mixed"].specs:
        assert f"`{fp[:12]}`" in md
    md2 = render_markdown(grids["control_fail"])
    assert SIMULATED_BANNER in md2 and "ENVIRONMENT DIFFERS" in md2 and "environment_differs" in md2


def test_csv_has_one_row_per_concurrency_and_metric():
    grid = _grids()["mixed"]
    rows = list(csv.DictReader(io.StringIO(render_csv(grid))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert [(int(r["concurrency"]), r["metric"]) for r in rows] == [(c.concurrency, c.metric) for c in grid.cells]
    by = {(int(r["concurrency"]), r["metric"]): r for r in rows}
    refused = by[(64, "output_throughput")]
    assert refused["delta"] == "" and refused["verdict"] == "different spec"
    assert "output_len: 1024 vs 512" in refused["refusal"]
    won = by[(10, "output_throughput")]
    assert won["verdict"] == "better" and float(won["ci_low"]) > 0 and won["baseline_n"] == "3"
    assert by[(1024, "output_throughput")]["candidate_flags"] == "backend_mismatch client_bound"


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.md"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"]


def test_write_atomic_failure_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_text("old")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_mod.os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_export_writes_markdown_csv_png_svg_side_by_side(tmp_path):
    grid = _grids()["mixed"]
    paths = export_comparison(grid, tmp_path / "exports", generated_at=STAMP)
    assert [p.name for p in paths.all()] == [
        "glm5-cutlass-vs-glm5-cutedsl.md", "glm5-cutlass-vs-glm5-cutedsl.csv",
        "glm5-cutlass-vs-glm5-cutedsl-throughput.png", "glm5-cutlass-vs-glm5-cutedsl-throughput.svg"]
    assert paths.png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and paths.png.stat().st_size > 5000
    svg = paths.svg.read_text()
    assert "<svg" in svg and "glm5-cutedsl" in svg
    md = paths.markdown.read_text()
    assert f"]({paths.png.name})" in md and paths.csv.read_text() == render_csv(grid)
    assert sorted(p.name for p in paths.markdown.parent.iterdir()) == sorted(p.name for p in paths.all())
