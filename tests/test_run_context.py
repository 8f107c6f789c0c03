"""The controller's shared part (`moe_tui.run.context.RunContext`) on its own, against a real store:
an abort reaches the running benchmark's stop event (from the loop thread or another), events
emitted from another thread arrive on the controller's loop, and closing an item counts it and
clears the current one even when the queue or the store refuses the close (said, not raised)."""

from __future__ import annotations

import asyncio
import threading
import time

from moe_tui.events import Event, Notice, QueueChanged
from moe_tui.profiles import ProfileSet
from moe_tui.run.context import RunContext
from moe_tui.servers.manager import ServerManager
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import QueueItem


def _context(store: Store, tmp_path) -> RunContext:
    return RunContext(store, ServerManager(store=store), lambda: ProfileSet([], []), None, tmp_path / "data")


def _item(item_id: int) -> QueueItem:
    spec = BenchmarkSpec.from_dict({}, "test spec")
    return QueueItem(id=item_id, position=1.0, campaign_id=None, profile_name="p", spec=spec,
                     fingerprint=spec.fingerprint, repeat_index=0, warmup=False, state="running", attempts=1,
                     run_id=None, error="", created_at=time.time(), updated_at=time.time())


def test_abort_sets_the_verdict_and_stops_the_benchmark(tmp_path):
    with Store(tmp_path / "s.db") as store:
        ctx = _context(store, tmp_path)
        assert ctx.abort_current("skipped", "why") is False  # nothing runs
        assert ctx.work.abort_verdict is None
        ctx.work.current = _item(7)
        ctx.work.bench_stop = asyncio.Event()
        assert ctx.abort_current("cancelled", "cancelled by user") is True
        assert ctx.work.abort_verdict == ("cancelled", "cancelled by user")
        assert ctx.work.bench_stop.is_set()


def test_abort_and_events_from_another_thread_hop_onto_the_loop(tmp_path):
    with Store(tmp_path / "s.db") as store:
        ctx = _context(store, tmp_path)
        seen: list[tuple[Event, int]] = []
        ctx.subscribers.add(lambda event: seen.append((event, threading.get_ident())))

        async def scenario() -> None:
            ctx.loop, ctx.loop_thread = asyncio.get_running_loop(), threading.get_ident()
            ctx.work.current = _item(3)
            stop = ctx.work.bench_stop = asyncio.Event()

            def from_elsewhere() -> None:
                ctx.emit(QueueChanged(reason="from a thread"))
                ctx.abort_current("skipped", "skipped by user while running")

            thread = threading.Thread(target=from_elsewhere)
            thread.start()
            await asyncio.wait_for(stop.wait(), 30)  # set on the loop by call_soon_threadsafe
            thread.join()

        asyncio.run(scenario())
        assert ctx.work.abort_verdict == ("skipped", "skipped by user while running")
        assert [type(e) for e, _ in seen] == [QueueChanged]
        assert seen[0][1] == ctx.loop_thread  # delivered on the loop thread, not the caller's


def test_finish_item_refused_by_the_queue_or_the_store_is_said_counted_and_cleared(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    with Store(path) as store:
        ctx = _context(store, tmp_path)
        notices: list[Event] = []
        ctx.subscribers.add(notices.append)
        ctx.work.current = _item(99)
        ctx.finish_item(_item(99), "done")  # no such item: the queue refuses, the worker goes on
        assert ctx.work.current is None and ctx.work.session["done"] == 1
        assert ctx.work.fatal is None
        assert any(isinstance(n, Notice) and n.level == "warning" and "#99" in n.message for n in notices)
    with Store(path, readonly=True) as store:
        ctx = _context(store, tmp_path)
        ctx.work.current = _item(5)
        ctx.finish_item(_item(5), "failed", "boom")  # the store cannot be written: fatal, said why
        assert ctx.work.current is None and ctx.work.session["failed"] == 1
        assert ctx.work.fatal is not None and "item #5 could not be marked failed" in ctx.work.fatal
