"""A within-noise cell whose interval bounds nothing (two server starts a side, wild spread: the demo's c=1
TTFT read [-99.7%, +107157.6%]) shows no delta and no interval numbers as if they were one: it says it is
too wide to bound, with how many starts, in every renderer; scripts keep the numbers and `ci_too_wide`.
Also `compare --format json` carries the emulator clock each cell ran at, as text/CSV/Markdown do."""

from __future__ import annotations

import dataclasses
import json

from compare_data import make_run, snapshot, summary

from moe_tui.compare import WITHIN_NOISE, CompareSettings
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.compare.grid import too_wide
from moe_tui.export.formats import render_csv, render_json, render_markdown, render_text
from moe_tui.ui.widgets.compare_grid import cell_cells

SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)


def grid_of(a_values, b_values, snaps=(SNAP_A, SNAP_B)):
    a = [make_run(1 + i, "a", concurrency=64, summary=summary(v), profile=snaps[0]) for i, v in enumerate(a_values)]
    b = [make_run(10 + i, "b", concurrency=64, summary=summary(v), profile=snaps[1]) for i, v in enumerate(b_values)]
    return build_grid_from_runs(a, b, settings=dataclasses.replace(CompareSettings(), accept_uncontrolled=True))


def test_the_rule_is_past_halving_and_doubling():
    assert too_wide(-50.0, 100.0) and too_wide(-99.7, 107157.6)
    assert not too_wide(-49.0, 100.0) and not too_wide(-50.0, 99.0) and not too_wide(-3.0, 4.0)


def test_an_interval_that_bounds_nothing_shows_no_delta_and_says_why():
    grid = grid_of([200.0, 40.0], [300.0, 30.0])
    c = grid.cell(64, "output_throughput")
    assert c.verdict == WITHIN_NOISE and c.ci_too_wide
    assert c.ci_low_pct is not None and c.ci_low_pct < -50 and c.ci_high_pct is not None and c.ci_high_pct > 100
    assert c.delta_text == "" and c.ci_text == "too wide (2+2 server starts)"
    assert "too wide to bound with 2+2 server starts" in c.verdict_text
    assert c.reasons[0].startswith("too wide to bound: with 2+2 server starts the ") and "unknown, not small" in c.reasons[0]
    row = json.loads(render_json(grid))["cells"][0]
    assert row["ci_too_wide"] is True and row["verdict"] == "within_noise"
    # the delta's numbers as a delta appear nowhere a person reads
    pct = f"{c.delta_pct:+.1f}%"
    for text in (render_text(grid, 400), render_markdown(grid, generated_at="now")):
        assert "too wide (2+2 server starts)" in text and pct not in text
    assert "too wide to bound: with 2+2 server starts" in render_csv(grid)  # CSV keeps the numbers, with the reason
    shown = [getattr(x, "plain", str(x)) for x in cell_cells(c, True)]
    assert "—" in shown and "too wide (2+2 server starts)" in shown


def test_a_narrow_within_noise_interval_is_shown_as_before():
    c = grid_of([200.0, 201.0, 199.0], [200.5, 201.5, 199.0]).cell(64, "output_throughput")
    assert c.verdict == WITHIN_NOISE and not c.ci_too_wide
    assert c.delta_text.startswith(("+", "-")) and c.ci_text.startswith("[")


def test_compare_json_carries_the_emulator_clock():
    sim = {"time_scale": 10.0}
    sims = (snapshot("a", "flashinfer_cutlass", engine="sim", sim=sim),
            snapshot("b", "flashinfer_cutedsl", engine="sim", port=30001, sim=sim))
    data = json.loads(render_json(grid_of([200.0, 201.0, 199.0], [260.0, 261.0, 259.0], sims)))
    assert {c["sim_time_scale"] for c in data["cells"]} == {10.0}
    assert data["sim_clock"].startswith("emulator clock x10")
    real = json.loads(render_json(grid_of([200.0, 201.0, 199.0], [260.0, 261.0, 259.0])))
    assert {c["sim_time_scale"] for c in real["cells"]} == {None} and real["sim_clock"] is None
