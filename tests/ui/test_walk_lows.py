"""The second user walk's low findings (docs/walk-2026-12-05.md): 9, the attach command copyable
from the quit dialog at 80x24; 15, no blank rows where a user needs to be told something."""

from __future__ import annotations

import dataclasses
import io
import sys
from pathlib import Path

from rich.console import Console

from moe_tui.control import launch
from moe_tui.ui.screens.quit import QuitScreen
from tests.ui.fakes import RecordingAdapter
from tests.ui.waiting import workers_finished

NARROW = (80, 24)


def screen_rows(app) -> list[str]:
    """The screen as a terminal shows it, one string a row (what a mouse selection copies from)."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), record=True,
                      color_system=None, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text().splitlines()


class Attached(RecordingAdapter):
    can_detach = True

    def __init__(self, command: str) -> None:
        super().__init__()
        self.attach_command = command


# A venv in a checkout under a long home: 76 characters, the dialog's row at 80 columns; with a data
# home named in full, longer than that row.
VENV = "/home/a-long-user-name/src/moe-tui-checkout/.venv/bin/moe-tui"
LONG = f"MOE_TUI_HOME=/srv/moe/demo-home {VENV} demo --attach"


async def test_the_quit_dialog_shows_the_attach_command_on_one_row_a_terminal_copies_whole(make_app):
    """Finding 9: at 80x24 the command wrapped inside the dialog's border, so a copy came back as
    two broken lines. It sits on a row of its own now, never folded; longer than the row, it
    scrolls sideways (the row shows its head, then its tail), and `c` copies it. Where the terminal
    has the columns (120), the dialog widens to hold the longest on one row."""
    for command in (LONG, f"{VENV} demo --attach"):
        app, _ = make_app(adapter=Attached(command))
        async with app.run_test(size=NARROW) as pilot:
            await workers_finished(app)
            await pilot.press("q")
            await pilot.pause()
            assert isinstance(app.screen, QuitScreen)
            rows = screen_rows(app)
            if len(command) <= 76:  # the dialog's row at 80 columns
                assert any(command in row for row in rows), "\n".join(rows)
            else:
                head = command[:60]
                on_one_row = [i for i, r in enumerate(rows) if head in r]
                assert on_one_row, "the command folded:\n" + "\n".join(rows)
                row = on_one_row[0]
                assert command[60:70] not in rows[row + 1], "folded onto the next row"
                scroller = app.screen.query_one("#quit-command-row")
                scroller.scroll_to(x=scroller.max_scroll_x, animate=False)
                await pilot.pause()
                assert command[-40:] in screen_rows(app)[row]
            # Textual keeps what it sent to the terminal's clipboard (OSC 52).
            await pilot.press("c")
            await pilot.pause()
            assert app.clipboard == command
            assert any("copied to the clipboard" in r for r in screen_rows(app))
    app, _ = make_app(adapter=Attached(LONG))
    async with app.run_test(size=(120, 40)) as pilot:
        await workers_finished(app)
        await pilot.press("q")
        await pilot.pause()
        assert any(LONG in row for row in screen_rows(app)), "\n".join(screen_rows(app))


def test_the_demos_attach_command_needs_no_data_home_when_it_is_the_default_one(monkeypatch, tmp_path):
    """`moe-tui demo` finds its default home by itself: the line is the venv's `moe-tui demo --attach`,
    short enough for one row at 80 columns. Paths under the home folder are written `~/...`."""
    import platformdirs

    script = Path(sys.executable).parent / "moe-tui"
    monkeypatch.setenv("MOE_TUI_HOME", str(Path(platformdirs.user_data_dir("moe-tui")) / "demo-home"))
    assert launch.attach_command(tmp_path, demo=True) == f"{launch.shell_path(script)} demo --attach"
    monkeypatch.setenv("HOME", str(script.parents[2]))
    assert launch.attach_command(tmp_path, demo=True) == "~/.venv/bin/moe-tui demo --attach"
    monkeypatch.setenv("HOME", str(tmp_path))
    assert launch.shell_path(tmp_path / "my profiles") == f"'{tmp_path}/my profiles'"  # a quoted ~ would not expand
    assert launch.shell_path(tmp_path / "profiles") == "~/profiles"
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "other" / "demo-home"))
    assert launch.attach_command(tmp_path, demo=True).startswith(f"MOE_TUI_HOME={tmp_path}/other/demo-home ")


# -- finding 15: before the first run, and the GPU table's clock-event column -----------------------

class BeforeTheFirstRun(RecordingAdapter):
    """Nothing queued, nothing run, nothing benchmarking (or, `paused`, the demo's campaign queued and paused)."""

    def __init__(self, paused: bool = False) -> None:
        super().__init__()
        self.paused = paused
        self.queue = tuple(dataclasses.replace(r, state="pending", run_id=None) for r in self.queue) if paused else ()

    def snapshot(self):
        return dataclasses.replace(super().snapshot(), activity="paused" if self.paused else "idle", detail="",
                                   paused=self.paused, current_item=None)


async def test_before_the_first_run_the_live_benchmark_says_how_to_get_one(make_app):
    """Finding 15: before the first run the live benchmark said `no benchmark running` over an
    empty chart. Now it says there is no run yet and which key gets one (the queue empty: 2 then a;
    queued and paused: r), at 120x40 and at 80x24, with no empty chart."""
    for adapter, wanted in ((BeforeTheFirstRun(), "the queue is empty: 2 opens the Queue, a adds a campaign there"),
                            (BeforeTheFirstRun(paused=True), "16 item(s) queued, the queue is paused: r resumes it")):
        for size in ((120, 40), NARROW):
            app, _ = make_app(adapter=adapter)
            async with app.run_test(size=size) as pilot:
                await workers_finished(app)
                await pilot.pause(0.2)
                text = "\n".join(screen_rows(app))
                assert "no run yet" in text and wanted in text, text
                assert "3 Compare shows the verdicts once both sides have runs · ? lists every key" in text, text
                assert not app.screen.query_one("#bench-spark").display  # no empty chart


def test_the_clock_column_says_none_idle_or_n_a_and_the_panel_gives_its_legend():
    """Finding 15: the simulated GPUs report no clock event (NVML's bitmask 0: clocks as high as they
    go) and the column was blank, as it was when NVML said nothing at all. Now `none`, `n/a`,
    `idle`, a configuration reason dim, a stress reason as its red badge."""
    from moe_tui.telemetry import GpuSample
    from moe_tui.ui.widgets.gpu_panel import CLOCK_LEGEND, COLUMNS, gpu_cells

    column = [key for key, _, _ in COLUMNS].index("events")

    def cell(bits):
        return str(gpu_cells(GpuSample(index=0, t=0.0, wall=0.0, clock_event_bits=bits, processes=()), (), (), {})[column])

    assert [cell(b) for b in (0, None, 0x001, 0x002, 0x004, 0x005)] == ["none", "n/a", "idle", "app clk", "PWR CAP", "PWR CAP"]
    assert "none = clocks at their highest" in CLOCK_LEGEND


async def test_the_gpu_panel_carries_the_clock_legend(make_app):
    from moe_tui.ui.widgets.gpu_panel import CLOCK_LEGEND, GpuPanel
    from tests.ui.fakes import gpu_snapshot, telemetry_message

    app, _ = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await workers_finished(app)
        app.post_message(telemetry_message(gpu_snapshot(), {}))
        await pilot.pause(0.3)
        panel = app.screen.query_one(GpuPanel)
        assert CLOCK_LEGEND in str(panel.border_subtitle)
        assert "none" in "\n".join(screen_rows(app))


async def test_the_dashboards_help_gives_the_clock_legend_at_80x24(make_app):
    """At 80x24 the panels draw no bottom border, so the GPU panel's legend is not on screen: the
    Dashboard's `?` gives it, under the keys (and only the Dashboard's)."""
    from tests.ui.fakes import gpu_snapshot, telemetry_message

    app, _ = make_app()
    async with app.run_test(size=NARROW) as pilot:
        await workers_finished(app)
        app.post_message(telemetry_message(gpu_snapshot(), {}))
        await pilot.pause(0.3)
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        text = " ".join(r.strip(" │▎▊█") for r in screen_rows(app))
        assert "none: no reason, clocks at their highest" in " ".join(text.split()), text
        await pilot.press("escape", "2", "question_mark")
        await pilot.pause(0.3)
        assert not app.screen.query_one("#help-legend").display
