"""The runner's worker when items run as batch jobs (`moe-tui run --executor slurm`): the executor's
dispatcher works the queue (`moe_tui.executors.dispatch`), hosted by the controller so that the
runner's control socket, its events and the queue ops are the same as when items run here: the TUI
attaches to a Slurm-working runner as to a local one, adds campaigns, pauses, cancels, and sees the
jobs (the Queue screen's Job column, the Nodes panel read the store).

What differs from the local worker: no server of this runner (the jobs start theirs on their nodes);
no crash recovery of `running` items at start (an item whose job still runs is running: the
dispatcher re-adopts open jobs by id, and interrupts only items that never got a job); and the
runner's children are not marked, nor watched by the watchdog: a batch job inherits the runner's
environment (sbatch exports it), and must outlive the runner that submitted it.

The dispatcher is an injected `BatchWork` (the runner does not import the executors: they import it).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from moe_tui.run.context import RunContext
from moe_tui.store.errors import StoreError

if TYPE_CHECKING:
    from moe_tui.store.db import Store


class BatchWork(Protocol):
    """What the controller runs as its worker in batch mode (`executors.dispatch.Dispatcher`)."""

    async def run(self, *, until_empty: bool = True, retry_interrupted: bool = True,
                  stop: asyncio.Event | None = None, use_lock: bool = True) -> int: ...


# Given the controller's store and its line outlet (a Notice event per line), the dispatcher to run.
BatchFactory = Callable[["Store", Callable[[str], None]], BatchWork]


async def work_batches(ctx: RunContext, batch: BatchWork, *, until_empty: bool, retry_interrupted: bool,
                       stop: asyncio.Event) -> None:
    """Run the dispatcher until the queue and its jobs are done (`until_empty`) or `stop`; a store that
    refuses writes or a dispatcher that crashes stops the runner with the reason (`work.fatal`)."""
    work = ctx.work
    ctx.status("dispatching", "each sweep of the queue a batch job")
    try:
        # The controller holds the data dir's runner lock: the dispatcher takes none of its own.
        if await batch.run(until_empty=until_empty, retry_interrupted=retry_interrupted, stop=stop,
                           use_lock=False):
            work.fatal = "the dispatcher stopped: the store could not be written"
    except StoreError as exc:
        work.fatal = f"the store cannot be written, the queue stops: {exc}"
    except Exception as exc:  # a bug in the dispatcher: stop and say so (the runner exits 1)
        work.fatal = f"the dispatcher crashed: {''.join(traceback.format_exception_only(type(exc), exc)).strip()}"
    if work.fatal:
        ctx.notice("error", work.fatal)
        ctx.status("failed", work.fatal)
    elif until_empty and not stop.is_set():
        ctx.status("drained", "no pending item and no job left")
