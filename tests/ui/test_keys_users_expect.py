"""Issue 23 item 5: the keys k9s/lazygit users expect. The main table has the focus at start (a
visible cursor), j/k and `/` work on the tables, enter on a grid cell opens its runs, the palette
offers every key of the screen, state is never colour-only, typed keys are never lost, and the
add form starts from the demo campaign's spec."""

from __future__ import annotations

from textual.widgets import DataTable, Input, Select

from moe_tui.control.launch import DEMO_CAMPAIGN
from moe_tui.ui.screens.add_campaign import AddCampaignScreen
from moe_tui.ui.screens.cell_runs import CellRunsScreen
from moe_tui.ui.screens.compare import CompareScreen
from moe_tui.ui.screens.run_detail import RunDetailScreen
from moe_tui.ui.widgets.check_list import SELECTED, UNSELECTED, CheckList
from moe_tui.ui.widgets.throughput_chart import SERIES_MARKERS
from tests.support.pilot import SIZE, open_add_form, open_compare, open_queue, press, press_to, settle
from tests.ui.waiting import until


def field(form: AddCampaignScreen, wid: str) -> str:
    return form.query_one(wid, Input).value


async def test_every_screen_starts_with_its_table_focused_and_j_k_move(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.focused is not None and app.focused.id == "server-table"
        for key, wanted in (("2", "queue-table"), ("3", "compare-grid")):
            await press(pilot, app, key)
            assert app.focused is not None and app.focused.id == wanted, (key, app.focused)
        table = app.screen.query_one("#compare-grid", DataTable)
        assert table.cursor_row == 0
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1


async def test_slash_filters_the_queue_and_the_grid(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        everything = table.row_count
        await pilot.press("slash", *"failed")
        # the words are asked for once typing pauses (the screen's own timer): wait on the table, not a clock
        await until(pilot, lambda: table.row_count != everything, "the typed filter applied")
        await settle(pilot, app)
        assert 0 < table.row_count < everything
        await pilot.press("enter")
        assert app.focused is table  # enter keeps the filter and goes back to the table
        await press(pilot, app, "slash", "escape")
        assert table.row_count == everything
        await press(pilot, app, "3")
        grid = app.screen.query_one("#compare-grid", DataTable)
        await press(pilot, app, "slash", *"tok/s")
        assert grid.row_count == 4 and all(k.value.endswith("/output_throughput") for k in grid.rows)


async def test_enter_on_a_grid_cell_lists_its_runs_and_opens_one(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_compare(pilot, app)
        runs = (await press_to(pilot, app, CellRunsScreen, "enter")).query_one("#runs-table", DataTable)
        assert runs.row_count == 4  # two runs a side at concurrency 1, both averaged
        assert all(str(runs.get_row_at(i)[3]).startswith("averaged") for i in range(4))
        await press_to(pilot, app, RunDetailScreen, "enter")


async def test_the_palette_offers_every_key_of_the_screen(make_app):
    from moe_tui.ui.palette import screen_verbs

    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_queue(pilot, app)
        texts = {text: cb for text, cb, _ in screen_verbs(app.screen)}
        assert {"queue: add (a)", "queue: filter (/)"} <= set(texts)
        texts = {text: cb for text, cb, _ in screen_verbs(await press_to(pilot, app, CompareScreen, "3"))}
        assert {"compare: swap (w)", "compare: investigate (i)", "compare: markdown (e)"} <= set(texts)
        base = app.screen.query_one("#compare-baseline", Select).value
        texts["compare: swap (w)"]()
        await settle(pilot, app)
        assert app.screen.query_one("#compare-candidate", Select).value == base


async def test_checkboxes_and_chart_series_differ_in_glyph_not_only_colour(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await open_add_form(pilot, app)
        boxes = app.screen.query_one("#campaign-profiles", CheckList)
        boxes.deselect(boxes.get_option_at_index(1).value)
        await settle(pilot, app)
        first, second = (boxes.render_line(y).text for y in (0, 1))
        assert first.lstrip()[1] == SELECTED and second.lstrip()[1] == UNSELECTED, (first, second)
    assert len(set(SERIES_MARKERS)) == 2


async def test_add_form_starts_from_the_demo_spec_and_keeps_every_key(make_app):
    app, adapter = make_app()
    async with app.run_test(size=SIZE) as pilot:
        form = await open_add_form(pilot, app)
        assert field(form, "#campaign-concurrencies") == ",".join(map(str, DEMO_CAMPAIGN.concurrencies))
        assert field(form, "#spec-input_len") == str(DEMO_CAMPAIGN.spec["input_len"])
        assert field(form, "#spec-output_len") == str(DEMO_CAMPAIGN.spec["output_len"])
        assert field(form, "#campaign-ppc") == str(DEMO_CAMPAIGN.prompts_per_concurrency)
        form.query_one("#spec-input_len", Input).focus()
        await pilot.press("end", *["backspace"] * 6, *"2048")  # a burst of Backspace, then typing at once
        await settle(pilot, app)
        assert field(form, "#spec-input_len") == "2048"
        await press(pilot, app, "ctrl+s")
        (call,) = [c for c in adapter.calls if c[0] == "add_campaign"]
        assert call[1].spec["input_len"] == 2048
        assert call[1].prompts_per_concurrency == DEMO_CAMPAIGN.prompts_per_concurrency


async def test_a_screen_key_lands_on_the_screen_not_on_a_detail_left_open(make_app):
    from moe_tui.ui.screens.dashboard import DashboardScreen

    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.open_run(3)  # the run detail, over the dashboard
        await settle(pilot, app)
        assert isinstance(app.screen, RunDetailScreen)
        await press_to(pilot, app, CompareScreen, "3")
        await press_to(pilot, app, DashboardScreen, "1")
        app.open_run(3)
        await settle(pilot, app)
        assert isinstance(app.screen, RunDetailScreen)
        await press_to(pilot, app, DashboardScreen, "1")  # from the detail itself


async def test_one_navigation_scheme_on_every_table_and_on_help(make_app):
    """g/Home first, G/End last, j/k, on the compare grid (where g was Reload and G did nothing), the
    server table and help (which scrolled with Down only); Reload is ctrl+r; help lists the keys."""
    app, adapter = make_app()
    asked: list[tuple] = []
    comparison = adapter.comparison
    adapter.comparison = lambda *a, **k: asked.append(a) or comparison(*a, **k)
    async with app.run_test(size=SIZE) as pilot:
        grid = (await open_compare(pilot, app)).query_one("#compare-grid", DataTable)
        reloads = len(asked)
        for key, row in (("G", grid.row_count - 1), ("g", 0), ("end", grid.row_count - 1), ("home", 0)):
            await press(pilot, app, key)
            assert grid.cursor_row == row, key
        assert len(asked) == reloads  # g is not Reload
        await press(pilot, app, "ctrl+r")
        assert len(asked) > reloads
        await press(pilot, app, "question_mark")
        table = app.screen.query_one("#help-table", DataTable)
        assert app.focused is table
        words = [table.get_row_at(r)[1].plain for r in range(table.row_count)]
        assert "Move" in words and "Reload" in words
        await pilot.press("G")
        assert table.cursor_row == table.row_count - 1
        await pilot.press("k", "g")
        assert table.cursor_row == 0


async def test_the_slash_filter_shows_what_is_typed_at_80x24(make_app):
    """At 80x24 the focused filter drew Input's focus border in its one row: two border lines and no text."""
    from moe_tui.ui.widgets.filter_bar import FilterBar

    app, _ = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await open_queue(pilot, app)
        await press(pilot, app, "slash", *"failed")
        bar = app.screen.query_one(FilterBar)
        assert app.focused is bar and bar.content_region.height >= 1, bar.content_region
        shown = "".join(segment.text for segment in bar.render_line(0))
        assert "failed" in shown, shown


async def test_the_line_under_the_grid_follows_the_filtered_cursor(make_app):
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        grid = (await open_compare(pilot, app)).query_one("#compare-grid", DataTable)
        assert grid.cursor_row == 0 and grid.highlighted_cell.metric == "output_throughput"
        await press(pilot, app, "slash", *"ttft")
        cell = grid.highlighted_cell
        assert "ttft" in cell.metric
        line = str(app.screen.query_one("#compare-cell").render())
        assert line.startswith(f"conc {cell.concurrency} {cell.label}"), line


async def test_add_form_on_real_profiles_starts_from_the_clis_defaults(make_app):
    """The form said 128/32 n=16 where `moe-tui queue add` plans 1024/1024 n=100: a campaign from
    each then had two fingerprints and never compared. On real profiles both start from the spec's."""
    from dataclasses import replace

    from moe_tui.spec import BenchmarkSpec
    from tests.ui.fakes import RecordingAdapter

    adapter = RecordingAdapter()
    adapter.servers = tuple(replace(row, profile=row.profile.replace("sim-", "glm5-"), engine="sglang")
                            for row in adapter.servers)
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_add_form(pilot, app)
        spec = BenchmarkSpec()
        assert (field(form, "#spec-input_len"), field(form, "#spec-output_len"), field(form, "#spec-num_prompts")) == \
            (str(spec.input_len), str(spec.output_len), str(spec.num_prompts))
        assert field(form, "#campaign-ppc") == ""  # the CLI's --prompts-per-concurrency default: none
