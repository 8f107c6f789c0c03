"""A new run appearing in an open grid (issue 34), for benches/scale.py: the time and the loop's stall.

The grid is built once on the pair (as the Compare screen holds it); then, `repeats` times, another store
handle (the runner's) queues and runs a new campaign of the pair (a run a side at concurrency 64, of the
spec the grid judges there: a grid's evidence is its pair's own campaigns), and the grid is built again
in a worker thread while a 5 ms asyncio heartbeat runs on the loop.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from benches import history_store


def new_run_in_open_grid(store_path: Path, repeats: int, pair: tuple[str, ...]) -> dict[str, float]:
    """A grid open on the pair (built once, as the Compare screen holds it), then `repeats` times: a new
    run of the candidate committed by another handle (the runner's), and the grid built again in a worker
    thread while a 5 ms asyncio heartbeat runs on the loop (the TUI's shape): the time until the new grid
    is there (with the new run in its cell) and the loop's longest stall meanwhile."""
    from moe_tui.compare import CANDIDATE
    from moe_tui.grids import pair as grids
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store

    a, b = pair
    opened: Any = None
    chosen: list[str] = []  # the spec the open grid judges at concurrency 64 (the new runs are of it)

    def add_run(writer: Store, k: int) -> int:
        """A new campaign of the pair (one item a side, the candidate's first), run as the runner runs it:
        the grid's evidence is the pair's own campaigns, so the new runs are of one (issue 34)."""
        from moe_tui.store.queue import PlannedItem, RunQueue

        spec = BenchmarkSpec.from_dict(dict(opened.specs[chosen[0]]))
        queue = RunQueue(writer)
        queue.add_planned_campaign(f"bench new run {k}", "interleaved", {"kind": "bench"},
                                   [PlannedItem(b, spec, 0, True), PlannedItem(a, spec, 0, True)])
        ids = []
        while (item := queue.claim_next()) is not None:
            prof = history_store.profile(item.profile_name)
            rid = writer.create_run(profile_name=item.profile_name, spec_json=item.spec.canonical_json(),
                                    fingerprint=item.fingerprint, client="moe-tui", profile=prof,
                                    provenance=history_store.provenance(prof, item.id), queue_item_id=item.id,
                                    server_start_id=None)
            writer.finish_run(rid, status="complete", summary={"output_throughput": 3000.0 + k, "completed": 256,
                                                               "failed": 0, "mean_ttft_ms": 100.0},
                              flags=["simulated"], telemetry={}, selfcheck={"client_bound": False},
                              close_item=(item.id, "done", ""))
            ids.append(rid)
        return ids[0]  # the candidate's

    async def measure() -> dict[str, float]:
        nonlocal opened
        loop = asyncio.get_running_loop()
        lags: list[float] = []
        running = True

        async def heartbeat() -> None:
            while running:
                t = loop.time()
                await asyncio.sleep(0.005)
                lags.append(max(0.0, loop.time() - t - 0.005))

        times, stalls = [], []
        with Store(store_path, readonly=True) as reader, Store(store_path) as writer:
            t = time.monotonic()
            opened = await asyncio.to_thread(grids.build_grid, reader, a, b)
            cold = time.monotonic() - t
            chosen.append(opened.point(CANDIDATE, 64).fingerprint)
            beat = asyncio.create_task(heartbeat())
            for k in range(repeats):
                rid = await asyncio.to_thread(add_run, writer, k)
                await asyncio.sleep(0.05)
                lags.clear()
                t = time.monotonic()
                grid = await asyncio.to_thread(grids.build_grid, reader, a, b)
                times.append(time.monotonic() - t)
                stalls.append(max(lags, default=0.0))
                if rid not in grid.point(CANDIDATE, 64).run_ids:
                    raise RuntimeError(f"run {rid} is not in the open grid's cell")
            running = False
            await beat
        return {"new_run_grid_ms": statistics.median(times) * 1000, "new_run_stall_ms": max(stalls) * 1000,
                "open_grid_cold_ms": cold * 1000}

    return asyncio.run(measure())
