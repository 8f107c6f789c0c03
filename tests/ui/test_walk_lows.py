"""The second user walk's low findings (docs/walk-2026-12-05.md): 9, the attach command copyable
from the quit dialog at 80x24; 15, no blank rows where a user needs to be told something."""

from __future__ import annotations

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
    scrolls sideways (the row shows its head, then its tail), and `c` copies it."""
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
