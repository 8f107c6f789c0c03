"""The registry of live managed servers in this process (overlap checks, exit handlers that
stop every server the user did not mark keep_running)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from moe_tui.servers.teardown import StopReport, signal_name

# What signal.getsignal returns: a handler, SIG_DFL / SIG_IGN, or None (installed outside Python).
PreviousHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

if TYPE_CHECKING:
    from moe_tui.servers.managed import ManagedServer

# -- the registry of live servers (for overlap checks and exit handlers) ------------------------
_REGISTRY_LOCK = threading.RLock()
_REGISTRY: set[ManagedServer] = set()
_HANDLERS_INSTALLED = False


def managed_servers() -> list[ManagedServer]:
    """Every server this process started and has not yet seen stopped."""
    with _REGISTRY_LOCK:
        return list(_REGISTRY)


def stop_all_managed(reason: str = "moe-tui is exiting") -> list[StopReport]:
    """Synchronously stop every registered server not marked keep_running (exit handlers)."""
    reports = []
    for server in managed_servers():
        if server.keep_running:
            continue
        with contextlib.suppress(Exception):
            report = server.stop_sync(reason)
            if report is not None:
                reports.append(report)
    return reports


def install_exit_handlers(signals: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Stop managed servers (except keep_running ones) at interpreter exit and on SIGTERM/SIGHUP.

    Call once from the main thread of the program that owns servers (not at import: a library
    must not take over signals). A handler that was installed before is chained to afterwards;
    with none, the signal's default action runs, so the exit status still says "killed by SIGTERM".
    A signal this process ignores is left ignored: under `nohup` a hang-up must neither end the
    program nor stop its servers (stopping them and carrying on would leave it running without them).
    """
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(stop_all_managed)
    for sig in signals:
        previous = signal.getsignal(sig)
        if previous == signal.SIG_IGN:
            continue

        def handler(signum: int, frame: FrameType | None, previous: PreviousHandler = previous) -> None:
            stop_all_managed(f"moe-tui got {signal_name(signum)}")
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(sig, handler)
