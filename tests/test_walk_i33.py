"""The second user walk (issue 33): numbers a user cannot misread, on plain data."""

from __future__ import annotations


def test_the_emulator_clock_is_said_where_simulated_numbers_are_shown():
    """The x10 emulator time scale was said only in run detail: a user reading 104 tok/s at
    concurrency 1 against the seed's 10.4 needs it beside the numbers (text, Markdown, CSV)."""
    import csv
    import dataclasses
    import io
    from pathlib import Path

    from compare_data import control_fail_runs, golden_runs

    from moe_tui.compare.build import build_grid_from_runs
    from moe_tui.export.formats import render_csv, render_markdown, render_text
    from moe_tui.export.text import sim_clock_note
    from moe_tui.profiles import load_profiles

    a, b = control_fail_runs()
    grid = build_grid_from_runs(a, b, baseline_name="sim-cutlass", candidate_name="sim-cutedsl")
    for text in (render_text(grid), render_markdown(grid)):
        assert "emulator clock x10: simulated tok/s are the modelled box's times the clock" in text
    rows = list(csv.DictReader(io.StringIO(render_csv(grid))))
    assert {r["sim_time_scale"] for r in rows} == {"10"}
    # the demo's profiles: 256 and 1024 run on a slower clock (one client keeps up), said per cell
    demo = load_profiles(Path(__file__).parent.parent / "server_profiles" / "demo").by_name(
        "sim-flashinfer-cutlass").snapshot()
    sweep = dataclasses.replace(grid, baseline_profile=demo, candidate_profile=demo,
                                concurrencies=(1, 2, 10, 64, 256, 1024))
    assert sim_clock_note(sweep).startswith("emulator clock x10 (concurrency 256 at x1.2, 1024 at x0.62)")
    a, b = golden_runs()  # real GPUs: nothing said, the column empty
    real = build_grid_from_runs(a, b, baseline_name="glm5-cutlass", candidate_name="glm5-cutedsl")
    assert sim_clock_note(real) == "" and {r["sim_time_scale"] for r in csv.DictReader(io.StringIO(render_csv(real)))} == {""}


def test_explain_column_heads_tell_the_sides_apart():
    """Both columns were headed `sim-flashinfer-c…`: the shared start gives way to the part that differs."""
    from moe_tui.explain.render import column_heads

    assert column_heads("sim-flashinfer-cutlass", "sim-flashinfer-cutedsl", 17) == ("…cutlass", "…cutedsl")
    assert column_heads("glm5-nvfp4-flashinfer-cutlass", "glm5-nvfp4-flashinfer-cutedsl", 17) == (
        "…cutlass", "…cutedsl")
    assert column_heads("short-a", "short-b", 17) == ("short-a", "short-b")
    a, b = column_heads("x" * 30 + "-left", "y" * 30 + "-right", 17)
    assert a != b and len(a) <= 17 and len(b) <= 17


def test_the_control_line_says_its_state_once():
    """Compare read `control check: absent: control check absent: concurrency 2 was not measured ...`."""
    from compare_data import control_fail_runs

    from moe_tui.compare.build import build_grid_from_runs
    from moe_tui.ui.screens.compare import diff_text

    a, b = control_fail_runs()
    grid = build_grid_from_runs(a[-1:], b[-1:], baseline_name="sim-cutlass", candidate_name="sim-cutedsl")
    assert grid.control.state == "absent"
    line = next(x for x in diff_text(grid).plain.splitlines() if x.startswith("control check"))
    assert line.startswith("control check: absent: concurrency 2 was not measured by both sides"), line
    assert line.count("absent") == 1, line
