"""One page of the run queue (`store.queue_page`, issue 26): counts, the queue's order, the `/`
filter applied in SQL with `%`, `_`, quotes and backslashes taken literally, a page centred on an
item, and the control client's window built on it (read again only after a change; the same page
the in-memory `QueueWindow.of` cuts). Stores are built through the queue's own write path."""

from __future__ import annotations

import pytest

from moe_tui.control.api import QueueWindow
from moe_tui.control.reads import StoreReads
from moe_tui.spec import BenchmarkSpec
from moe_tui.store import queue_page
from moe_tui.store.db import Store
from moe_tui.store.queue import CampaignPlan, RunQueue


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "q.sqlite")
    yield s
    s.close()


def _campaign(queue: RunQueue, name: str, profiles=("alpha", "beta"), concs=(1, 2, 4), repeats=2) -> list[int]:
    _, items = queue.add_campaign(CampaignPlan(profiles=tuple(profiles), concurrencies=tuple(concs),
                                               repeats=repeats, base_spec=BenchmarkSpec()), name=name)
    return [i.id for i in items]


def _ids(page: queue_page.QueuePage) -> list[int]:
    return [r["id"] for r in page.rows]


def _reads(store: Store) -> StoreReads:
    reads = StoreReads()
    reads.store = store
    return reads


def test_a_page_is_a_slice_of_the_queue_in_its_order_with_every_states_count(store):
    queue = RunQueue(store)
    ids = _campaign(queue, "first") + _campaign(queue, "second")
    queue.move(ids[5], "top")
    queue.cancel(ids[0])
    order = [i.id for i in queue.items()]
    assert order[0] == ids[5]
    page = queue_page.read_page(store, offset=3, limit=4)
    assert _ids(page) == order[3:7] and page.offset == 3 and page.total == len(order)
    assert page.counts == {"pending": len(order) - 1, "cancelled": 1}
    assert page.rows[0]["concurrency"] in (1, 2, 4) and page.rows[0]["campaign"] in ("first", "second")
    # Past the end: the last full page, not an empty one; a limit of 0 is refused.
    last = queue_page.read_page(store, offset=10_000, limit=5)
    assert _ids(last) == order[-5:] and last.offset == len(order) - 5
    near_end = queue_page.read_page(store, offset=len(order) - 7, limit=5)  # read from the end, in queue order
    assert _ids(near_end) == order[-7:-2] and near_end.offset == len(order) - 7
    with pytest.raises(ValueError, match="limit must be at least 1"):
        queue_page.read_page(store, limit=0)


def test_the_filter_keeps_items_holding_every_word_case_insensitively(store):
    queue = RunQueue(store)
    _campaign(queue, "Months-A")
    _campaign(queue, "other", profiles=("gamma",))
    queue.add_item("alpha", BenchmarkSpec.from_dict({"max_concurrency": 48}))
    page = queue_page.read_page(store, words=["ALPHA", "months-a"], limit=100)
    full = queue.light_items()
    expect = [r["id"] for r in full if r["profile_name"] == "alpha" and r["campaign"] == "Months-A"]
    assert _ids(page) == expect and page.total == len(expect) == 6
    assert page.counts["pending"] == len(full)  # counts are of the whole queue, filter or not
    # The same text the screen shows for an item (`QueueRow.text`), words anywhere in it.
    rows = _reads(store).queue_rows()
    for words in (["conc", "48"], ["conc 4"], ["pending", "gamma"], ["19"]):
        expect = [r.id for r in rows if all(w.lower() in r.text.lower() for w in words)]
        assert _ids(queue_page.read_page(store, words=words)) == expect and expect, words
    assert queue_page.read_page(store, words=["nothing-like-this"]).total == 0


@pytest.mark.parametrize("word", ["%", "_", "'", '"', "\\", "a%", "50%_x", "'; DROP TABLE queue_items; --"])
def test_wildcards_quotes_and_backslashes_are_matched_as_typed(store, word):
    queue = RunQueue(store)
    for name in ("plain", "has 50%_x here", "it's \"quoted\" \\ back", "'; DROP TABLE queue_items; --"):
        _campaign(queue, name, profiles=("p",), concs=(1,), repeats=1)
    expect = [r["id"] for r in queue.light_items() if word.lower() in (r["campaign"] or "").lower()
              or word.lower() in r["profile_name"].lower()]
    page = queue_page.read_page(store, words=[word])
    assert _ids(page) == expect
    assert len(queue.light_items()) == 4  # the table is still there


def test_like_pattern_escapes_its_wildcards():
    assert queue_page.like_pattern("5%_\\") == "%5\\%\\_\\\\%"


def test_a_page_asked_around_an_item_holds_it_and_says_where_it_is(store):
    queue = RunQueue(store)
    ids = [i for n in range(10) for i in _campaign(queue, f"c{n}")]  # 120 items
    order = [i.id for i in queue.items()]
    target = order[90]
    assert queue_page.index_of(store, target) == 90
    page = queue_page.read_page(store, offset=0, limit=20, around=target)
    assert target in _ids(page) and page.offset == 80
    kept = queue_page.read_page(store, offset=85, limit=20, around=target)
    assert kept.offset == 85  # already inside the page asked for: the page stays
    assert queue_page.index_of(store, target, ["no-such-word"]) is None
    assert queue_page.read_page(store, offset=0, limit=20, around=10**9).offset == 0  # gone: no move
    assert queue_page.read_page(store, limit=5, current=ids[-1]).current["id"] == ids[-1]
    assert queue_page.read_page(store, limit=5, current=10**9).current is None


def test_the_clients_window_is_read_again_only_after_a_change_and_agrees_with_the_rows(store):
    queue = RunQueue(store)
    _campaign(queue, "w", concs=(1, 2, 4, 8, 16), repeats=3)
    reads = _reads(store)
    first = reads.queue_window(offset=7, limit=10, words=("beta",), current=3)
    assert reads.queue_window(offset=7, limit=10, words=("beta",), current=3) is first
    assert first == QueueWindow.of(reads.queue_rows(), offset=7, limit=10, words=("beta",), current=3)
    queue.cancel(first.rows[0].id)
    second = reads.queue_window(offset=7, limit=10, words=("beta",), current=3)
    assert second is not first and second.rows[0].state == "cancelled" and second.counts["cancelled"] == 1


def test_live_state_asks_for_the_page_shown_and_knows_when_the_running_item_is_new():
    from moe_tui.control.live import LiveState
    from moe_tui.events import ControllerStatus

    live = LiveState()
    live.queue_view.offset, live.queue_view.words, live.queue_view.around = 200, ("alpha",), 7
    live.current_item = 3
    assert live.queue_request() == {"offset": 200, "limit": 100, "words": ("alpha",), "around": 7, "current": 3}
    assert not live.queue_stale()
    live.apply(ControllerStatus(activity="benchmarking", detail="", queue_item_id=3))
    assert not live.queue_stale()  # the same item: nothing to read
    live.apply(ControllerStatus(activity="benchmarking", detail="", queue_item_id=4))
    assert live.queue_stale()  # its row is not in the last read
    live.queue_request()
    assert not live.queue_stale()
