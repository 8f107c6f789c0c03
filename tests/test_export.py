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

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.export import formats as export_mod
from moe_tui.export.formats import (
    CSV_COLUMNS,
    export_comparison,
    render_csv,
    render_markdown,
    render_text,
    write_atomic,
)
from moe_tui.export.text import SIMULATED_BANNER

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
    for needle in ("## Profiles", "Nothing besides the compared field(s) differs", "## Provenance",
                   "| driver_version | 580.65.06 | 580.65.06 |  |", "## Benchmark specs",
                   "different spec: output_len: 1024 vs 512", "noise unknown", "**better**", "unreliable",
                   "Control check: **agrees**", "![Output throughput vs concurrency](x-throughput.png)",
                   "[x-throughput.svg](x-throughput.svg)", "run 30: server resolved MoE backend triton",
                   "## Method", "Holm", "wholly beyond ±2%", "primary",
                   "against the control (concurrency 2) on the same 3 vs 3 server starts"):
        assert needle in md, needle
    # Warnings list every flag of every run (the issue: "Warnings: None" over client-bound runs)
    warnings = md.split("## Warnings")[1].split("## Profiles")[0]
    for needle in ("client-bound", "triton", "60 of 100 requests failed"):
        assert needle in warnings, needle
    # every fingerprint used is listed with its fields
    for fp in grids["mixed"].specs:
        assert f"`{fp[:12]}`" in md
    md2 = render_markdown(grids["control_fail"])
    assert SIMULATED_BANNER in md2 and "ENVIRONMENT DIFFERS" in md2 and "environment_differs" in md2
    assert "| uncontrolled |" in md2 and "control concurrency" in md2


def test_csv_has_one_row_per_concurrency_and_metric():
    grid = _grids()["mixed"]
    rows = list(csv.DictReader(io.StringIO(render_csv(grid))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert [(int(r["concurrency"]), r["metric"]) for r in rows] == [(c.concurrency, c.metric) for c in grid.cells]
    by = {(int(r["concurrency"]), r["metric"]): r for r in rows}
    refused = by[(64, "output_throughput")]
    assert refused["delta"] == "" and refused["verdict"] == "refused"
    assert refused["verdict_words"] == "refused: different spec"
    assert "output_len: 1024 vs 512" in refused["reasons"]
    won = by[(10, "output_throughput")]
    assert won["verdict"] == "better" and float(won["ci_low"]) > 0 and won["baseline_n"] == "3"
    assert by[(1024, "output_throughput")]["candidate_flags"] == "backend_mismatch client_bound"
    assert by[(1024, "output_throughput")]["verdict"] == "unreliable"
    assert by[(1024, "output_throughput")]["candidate_flagged_left_out"] == "2"


def test_untrusted_text_is_escaped_in_markdown_and_csv():
    from compare_data import make_run, snapshot, summary

    evil = "x|y\r\n# h1 `code` <img src=x onerror=alert(1)> [link](http://e)"
    a = [make_run(i, "a", concurrency=8, summary=summary(100.0 + i), profile=snapshot("a", "flashinfer_cutlass"),
                  flags=("=HYPERLINK(\"http://e\")",)) for i in range(3)]
    b = [make_run(10 + i, "b", concurrency=8, summary=summary(130.0 + i),
                  profile=snapshot("b", "flashinfer_cutedsl", description=evil)) for i in range(3)]
    grid = build_grid_from_runs(a, b, baseline_name="# base|line", candidate_name="<b>cand</b>")
    md = render_markdown(grid)
    assert "<img" not in md and "<b>" not in md and "&lt;b&gt;cand&lt;/b&gt;" in md
    assert "# base|line" not in md and "\\# base\\|line" in md
    for line in md.splitlines():
        assert not line.startswith("# ") or line.startswith("# moe-tui comparison")
    rows = list(csv.reader(io.StringIO(render_csv(grid))))
    cells = [c for r in rows for c in r]
    assert not any(c.startswith(("=", "+", "@")) for c in cells)
    assert any(c.startswith("'=HYPERLINK") for c in cells)
    text = render_text(grid)
    assert "\r" not in text


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


def test_roofline_csv_text_cells_never_start_like_a_formula(tmp_path):
    """The roofline CSV beside the grid carries text (a reason, the gate's words) that can come from
    a profile or an imported record: the same formula guard as the grid CSV; numbers stay numbers."""
    import dataclasses

    from moe_tui.gate.correctness import GateVerdict
    from moe_tui.grids.extras import GridExtras, RooflineCell

    a, b = golden_runs()
    grid = build_grid_from_runs(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    evil = "=HYPERLINK(\"http://x\")"
    extras = GridExtras(GateVerdict("not_comparable", "-1 prompts"),
                        {64: RooflineCell(64, None, -12.5, 3, None, why_not=evil)}, {})
    export_mod.export_comparison(dataclasses.replace(grid, extras=extras), tmp_path, stem="x")
    rows = list(csv.reader(io.StringIO((tmp_path / "x-roofline.csv").read_text())))
    assert rows[1] == ["64", "baseline", "", "'" + evil, "-12.500", ""], rows
    gate = list(csv.reader(io.StringIO((tmp_path / "x-gate.csv").read_text())))
    assert gate == [["gate_status", "gate_words"], ["not_comparable", "'-1 prompts"]]
    assert all(r[0].lstrip("-").isdigit() for r in rows[1:])  # every row of the roofline table is a concurrency
