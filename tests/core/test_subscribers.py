"""events.Subscribers: the one subscriber list, one error policy (a failing callback is logged and kept)."""

from __future__ import annotations

import logging
import threading

from moe_tui.events import Subscribers


def test_failing_callback_is_logged_kept_and_does_not_stop_the_others(caplog):
    subs: Subscribers[int] = Subscribers("test events")
    seen: list[int] = []
    calls = {"bad": 0}

    def bad(value: int) -> None:
        calls["bad"] += 1
        raise RuntimeError(f"consumer bug on {value}")

    subs.add(bad)
    subs.add(seen.append)
    with caplog.at_level(logging.ERROR, logger="moe_tui.events"):
        subs.emit(1)
        subs.emit(2)
    assert seen == [1, 2]  # the healthy consumer heard both
    assert calls["bad"] == 2  # kept: the bad one is called again
    assert len(caplog.records) == 2 and "test events" in caplog.records[0].getMessage()
    assert "consumer bug on 1" in caplog.text  # the traceback is in the log


def test_unsubscribe_and_emit_from_threads():
    subs: Subscribers[int] = Subscribers("threads")
    seen: list[int] = []
    lock = threading.Lock()

    def record(value: int) -> None:
        with lock:
            seen.append(value)

    remove = subs.add(record)
    threads = [threading.Thread(target=subs.emit, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seen) == list(range(20)) and len(subs) == 1
    remove()
    remove()  # twice is harmless
    subs.emit(99)
    assert 99 not in seen and len(subs) == 0


def test_a_callback_may_unsubscribe_itself_while_being_called():
    subs: Subscribers[str] = Subscribers("self-removal")
    seen: list[str] = []
    removers = []

    def once(value: str) -> None:
        seen.append(value)
        removers[0]()

    removers.append(subs.add(once))
    subs.emit("a")
    subs.emit("b")
    assert seen == ["a"]
