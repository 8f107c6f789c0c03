"""The Queue screen over a real store of a few thousand items (issue 26): the screen reads one page
(`ControlClient.queue_window`, `store.queue_page`), never the whole queue, and still walks to the
end, filters, and acts on the right item on the last page; a store change re-reads the page and
changes only the row that changed; a status event naming another item marks it. The queue is built
and changed through the store's own write path (`RunQueue`); commands go to it the way the
controller applies them, followed by the QueueChanged event the controller sends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moe_tui.control.reads import StoreReads
from moe_tui.events import ControllerStatus, QueueChanged
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import CampaignPlan, RunQueue
from moe_tui.ui.screens.confirm import ConfirmScreen
from moe_tui.ui.screens.run_detail import RunDetailScreen
from moe_tui.ui.widgets.queue_summary import QueueSummary
from moe_tui.ui.widgets.queue_table import WINDOW, QueueTable
from tests.support.pilot import SIZE, emit, open_queue, plain, press, press_to, settle
from tests.ui.fakes import RecordingAdapter

ITEMS = 3000  # one campaign: 300 concurrencies x 10 repeats of one profile
LAST_RUN = 4242


class StoreQueueClient(RecordingAdapter):
    """The recording fake with the store-backed client's queue reads and queue commands."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.reads = StoreReads()
        self.reads.store = store
        self.run_queue = RunQueue(store)
        self.pages: list[tuple[int, int]] = []  # (offset, rows) of every page read

    def queue_rows(self):
        raise AssertionError("the Queue screen must not read the whole queue")

    def queue_window(self, offset=0, limit=WINDOW, words=(), around=None, current=None):
        window = self.reads.queue_window(offset, limit, words, around, current)
        self.pages.append((window.offset, len(window.rows)))
        return window

    def snapshot(self):
        return replace(super().snapshot(), current_item=None, queue=self.queue_window())

    def _apply(self, change) -> None:
        change()
        self.emit(QueueChanged(reason="test"))

    def cancel(self, item_id):
        super().cancel(item_id)
        self._apply(lambda: self.run_queue.cancel(item_id))

    def retry(self, item_id):
        super().retry(item_id)
        self._apply(lambda: self.run_queue.retry(item_id))

    def delete(self, item_id):
        super().delete(item_id)
        self._apply(lambda: self.run_queue.delete(item_id))

    def move(self, item_id, direction):
        super().move(item_id, direction)
        self._apply(lambda: self.run_queue.move(item_id, direction))


@pytest.fixture
def client(tmp_path):
    store = Store(tmp_path / "queue.sqlite")
    queue = RunQueue(store)
    queue.add_campaign(CampaignPlan(profiles=("alpha",), concurrencies=tuple(range(1, 301)), repeats=10),
                       name="months")
    # The last item has a run: every other item is skipped so that the controller's claim takes it.
    last = queue.add_item("beta", BenchmarkSpec.from_dict({"max_concurrency": 7}))
    queue.skip_profile("alpha", "server failed to start")
    claimed = queue.claim_next()
    assert claimed is not None and claimed.id == last.id
    queue.finish(last.id, "done", run_id=LAST_RUN)
    for item in queue.items(["skipped"])[-3:-1]:  # two pending items on the last page
        queue.retry(item.id)
    yield StoreQueueClient(store)
    store.close()


def _key(table: QueueTable) -> int | None:
    return table.highlighted_item


async def test_end_walks_to_the_last_item_reading_one_page(make_app, client):
    app, _ = make_app(adapter=client)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        assert table.row_count == WINDOW and table.window_start == 0
        assert f"of {ITEMS + 1:,}" in str(table.border_subtitle)
        await press(pilot, app, "G")
        last = client.run_queue.items()[-1]
        assert _key(table) == last.id and table.window_start == ITEMS + 1 - WINDOW
        assert str(table.border_subtitle).endswith(f"-{ITEMS + 1:,} of {ITEMS + 1:,}")
        assert all(rows <= WINDOW for _, rows in client.pages)
        await press(pilot, app, "enter")  # the last item's run opens
        assert isinstance(app.screen, RunDetailScreen) and app.screen.run_id == LAST_RUN
        app.pop_screen()
        await settle(pilot, app)
        await press(pilot, app, "g", "up")
        assert _key(table) == client.run_queue.items()[0].id and table.window_start == 0
        await press(pilot, app, "pageup", "k")  # nothing above the first item
        assert _key(table) == client.run_queue.items()[0].id


async def test_cancel_on_the_last_page_acts_on_that_item_and_keeps_the_cursor(make_app, client):
    app, _ = make_app(adapter=client)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        await press(pilot, app, "end")
        pending = [i for i in client.run_queue.items() if i.state == "pending"]
        assert len(pending) == 2
        for _ in range(3):  # up to the second pending item (the done one is last)
            if _key(table) == pending[-1].id:
                break
            await press(pilot, app, "up")
        assert _key(table) == pending[-1].id
        row = table.cursor_row
        # Moved up among the pending items: the cursor follows the item (the page is read around it).
        await press(pilot, app, "left_square_bracket")
        assert client.calls[-1] == ("move", pending[-1].id, "up")
        order = [i.id for i in client.run_queue.items()]
        assert order.index(pending[-1].id) == order.index(pending[0].id) - 1
        assert _key(table) == pending[-1].id and table.cursor_row == row - 1
        await press_to(pilot, app, ConfirmScreen, "x")
        await press(pilot, app, "y")
        assert ("cancel", pending[-1].id) in client.calls
        assert client.run_queue.item(pending[-1].id).state == "cancelled"
        assert _key(table) == pending[-1].id and "cancelled" in str(table.get_row(str(pending[-1].id)))
        await press(pilot, app, "t")  # and retried
        assert client.run_queue.item(pending[-1].id).state == "pending"


async def test_the_filter_is_applied_by_the_store_and_walks_to_its_last_match(make_app, client):
    app, _ = make_app(adapter=client)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        await press(pilot, app, "slash", *"conc 29", "enter")
        rows = client.reads.queue_rows()
        matching = [r.id for r in rows if "conc" in r.text and "29" in r.text]  # every word, anywhere
        assert WINDOW < len(matching) < ITEMS
        assert f"of {len(matching):,} matching the filter" in str(table.border_subtitle)
        assert [int(k) for k in table.row_keys_in_order] == matching[:WINDOW]
        await press(pilot, app, "end")
        assert _key(table) == matching[-1]
        await press(pilot, app, "slash", *" [b]%_'", "enter")  # markup and wildcards are plain words
        assert table.row_count == 0 and "nothing matches" in str(table.border_subtitle)
        await press(pilot, app, "slash", "escape")
        assert table.row_count == WINDOW and f"of {ITEMS + 1:,}" in str(table.border_subtitle)


async def test_a_store_change_repaints_one_row_and_a_status_event_marks_the_current_item(make_app, client):
    app, _ = make_app(adapter=client)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        await press(pilot, app, "end")
        shown = [int(k) for k in table.row_keys_in_order]
        target = shown[len(shown) // 2]
        written: list[tuple[str, str]] = []
        real = table.update_cell
        table.update_cell = lambda row, col, value, **kw: (written.append((str(row), str(col))),  # type: ignore
                                                            real(row, col, value, **kw))
        client.run_queue.retry(target)  # skipped -> pending, by another process's write
        await emit(pilot, app, QueueChanged(reason=f"item {target} retried"))
        assert {row for row, _ in written} == {str(target)}
        assert "pending" in str(table.get_row(str(target)))
        assert client.pages[-1][1] == WINDOW  # one page read again, not the queue
        # The controller takes an item: the status event names it; the page is read for its row.
        written.clear()
        reads = len(client.pages)
        await emit(pilot, app, ControllerStatus(activity="benchmarking", detail="1 of 1", queue_item_id=target))
        assert len(client.pages) == reads + 1
        assert "▶" in str(table.get_row(str(target))[0]) and {row for row, _ in written} == {str(target)}
        assert f"now: #{target} alpha" in plain(app.screen.query_one(QueueSummary))
        await emit(pilot, app, ControllerStatus(activity="benchmarking", detail="2 of 9", queue_item_id=target))
        assert len(client.pages) == reads + 1  # a tick naming the same item reads nothing


async def test_typing_a_filter_reads_the_store_once_typing_pauses(make_app, client):
    from moe_tui.ui.widgets.filter_bar import FilterBar

    app, _ = make_app(adapter=client)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_queue(pilot, app)
        await pilot.press("slash")
        bar = app.screen.query_one(FilterBar)
        reads = len(client.pages)
        for typed in ("b", "be", "bet", "beta"):  # four keys in a burst: one page read, with the last words
            bar.value = typed
        await settle(pilot, app, 0.5)
        assert len(client.pages) == reads + 1
        assert [int(k) for k in table.row_keys_in_order] == [client.run_queue.items()[-1].id]
