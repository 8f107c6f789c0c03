"""Issue 23 item 3: one way back in. The header names the data dir, every "attach again" message
prints the exact command for this data dir, and the demo never queues its campaign twice."""

from __future__ import annotations

import sys
from pathlib import Path

from moe_tui.control import launch
from moe_tui.control.launch import DEMO_CAMPAIGN, attach_command
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue
from moe_tui.ui.screens.quit import QuitScreen
from tests.support.pilot import SIZE
from tests.ui.fakes import RecordingAdapter
from tests.ui.waiting import workers_finished


def test_attach_command_names_this_data_home_and_this_installs_moe_tui(monkeypatch, tmp_path):
    # A venv's bin is rarely on PATH (`make demo` never activates one): the script by its full path.
    script = Path(sys.executable).parent / "moe-tui"
    assert script.is_file()
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "my home"))
    assert attach_command(tmp_path / "profiles", demo=True) == f"MOE_TUI_HOME='{tmp_path}/my home' {script} demo --attach"
    assert attach_command(Path("/p")) == f"MOE_TUI_HOME='{tmp_path}/my home' {script} --attach --profiles-dir /p"
    monkeypatch.delenv("MOE_TUI_HOME")
    assert attach_command(Path("/p q")) == f"{script} --attach --profiles-dir '/p q'"


class Attached(RecordingAdapter):
    can_detach = True

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.attach_command = f"MOE_TUI_HOME={data_dir.parent} moe-tui demo --attach"


async def test_header_shows_the_data_dir_and_quit_prints_the_command(make_app, tmp_path):
    app, adapter = make_app(adapter=Attached(tmp_path / "data"))
    async with app.run_test(size=SIZE) as pilot:
        await workers_finished(app)
        await pilot.pause()
        assert "_data_dir0/data" in app.sub_title  # the tail that tells data dirs apart, the head elided
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        from textual.widgets import Label

        words = " ".join(str(label.render()) for label in app.screen.query(Label))
        assert f"attach again with: {adapter.attach_command}" in words
        assert app.exit_note == ""
        await pilot.press("l")  # leave the campaign running: the line is printed after the App exits
        await workers_finished(app)
        assert app.exit_note.endswith(f"attach again with: {adapter.attach_command}"), app.exit_note
        assert str(tmp_path / "data") in app.exit_note


class Adds:
    """The client's add_campaign as the controller's op does it: the campaign lands in the store."""

    def __init__(self, store: Store) -> None:
        self.store, self.added = store, 0

    def add_campaign(self, request) -> int:
        from moe_tui.control.reads import campaign_args
        from moe_tui.spec import BenchmarkSpec
        from moe_tui.store.queue_plan import CampaignPlan

        args = campaign_args(request)
        plan = CampaignPlan(profiles=tuple(args["profiles"]), concurrencies=tuple(args["concurrencies"]),
                            base_spec=BenchmarkSpec.from_dict({**args["spec"], "max_concurrency": 1}),
                            repeats=args["repeats"], policy=args["policy"],
                            prompts_per_concurrency=args.get("prompts_per_concurrency"))
        self.added += 1
        return len(RunQueue(self.store).add_campaign(plan, name=request.name)[1])


def test_demo_campaign_is_queued_once(tmp_path):
    store = Store(tmp_path / "store.sqlite3")
    client = Adds(store)
    queue = RunQueue(store)
    assert "demo campaign queued" in launch._queue_demo_campaign(client, store)[0]
    assert client.added == 1
    # The runner stopped with the items not run (say they failed): `make demo` again adds nothing.
    for item in queue.items():
        queue.cancel(item.id) if item.id % 2 else queue.skip(item.id)
    note = launch._queue_demo_campaign(client, store)[0]
    assert client.added == 1 and "already in the queue" in note
    # Every item cancelled (the user threw it away): the demo may queue it again.
    for item in queue.items():
        if item.state != "cancelled":
            queue.retry(item.id)
            queue.cancel(item.id)
    assert "demo campaign queued" in launch._queue_demo_campaign(client, store)[0]
    store.close()


def test_demo_campaign_is_not_queued_into_cells_that_hold_runs(tmp_path):
    from tests.support.stores import stored_row as _stored
    from tests.ui.fakes import demo_runs

    store = Store(tmp_path / "store.sqlite3")
    a, b = demo_runs()
    store.import_runs([_stored(r) for r in a + b])
    assert set(DEMO_CAMPAIGN.profiles) <= set(store.profile_names_with_runs())
    client = Adds(store)
    assert "already hold runs" in launch._queue_demo_campaign(client, store)[0]
    assert client.added == 0 and RunQueue(store).items() == []
    store.close()


class DemoAttached(Attached):
    mode = "attached to runner pid 123456"


async def test_an_80_column_header_keeps_demo_and_the_data_dirs_tail(make_app, tmp_path):
    """Textual cuts the header at its end: the part that tells the demo's data dir from the default
    one (`…/demo-home/data`) and the word DEMO must come before the cut, not after it."""
    data = tmp_path / "a-rather-long-folder-name-for-a-home" / "moe-tui" / "demo-home" / "data"
    app, adapter = make_app(adapter=DemoAttached(data), subtitle="DEMO  ·  attached to runner pid 123456")
    async with app.run_test(size=(80, 24)) as pilot:
        await workers_finished(app)
        await pilot.pause()
        header = app.screen.query_one("HeaderTitle")
        shown = "".join(segment.text for segment in header.render_line(0))
        assert "DEMO" in shown and "/moe-tui/demo-home/data" in shown and "attached" in shown, shown


async def test_toasts_leave_the_quit_dialogs_buttons_visible_at_80x24(make_app, tmp_path):
    """Toasts stack at the bottom right, over the quit dialog's buttons at 80x24: the dialog clears
    them (they came before the question; what is printed on leaving says the rest)."""
    app, _ = make_app(adapter=Attached(tmp_path / "data"))
    async with app.run_test(size=(80, 24)) as pilot:
        await workers_finished(app)
        for n in range(3):
            app.notify(f"toast number {n} with words enough to take a few lines of the rack", timeout=30)
        await pilot.pause()
        assert len(app._notifications) == 3
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitScreen)
        assert len(app._notifications) == 0
