"""Helpers of the Slurm tier: an in-process dispatcher on the test's cluster, driving it, reading back."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from runner_support import scaled

from moe_tui.executors.dispatch import Dispatcher
from moe_tui.executors.nodes import NODE_FILE
from moe_tui.executors.slurm import SlurmExecutor, SlurmSettings
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue

FAST = dict(input_len=64, output_len=32, num_prompts=8, max_concurrency=4)


def job_env(cluster: Any, nodes_tmp: Path) -> dict[str, str]:
    """What sbatch passes on to a job: the cluster's config and the job's own temp folder (its
    private data dir lands there, so what it leaves behind can be looked for)."""
    nodes_tmp.mkdir(parents=True, exist_ok=True)
    return {**cluster.env, "TMPDIR": str(nodes_tmp)}


def dispatcher(store: Store, env: Any, cluster: Any, lines: list[str], **kw: Any) -> Dispatcher:
    settings = SlurmSettings(gpus="exclusive", time_limit_s=kw.pop("time_limit_s", 600))
    executor = SlurmExecutor(lambda request: settings, env=job_env(cluster, env.home / "nodes"))
    return Dispatcher(store, env.profiles, env.data_dir, executor, poll_s=0.3,
                      result_grace_s=kw.pop("result_grace_s", 1.0), on_line=lines.append, **kw)


def open_store(env: Any) -> Store:
    env.data_dir.mkdir(parents=True, exist_ok=True)
    return Store(env.db)


def add(store: Store, profile: str, **spec: Any) -> int:
    return RunQueue(store).add_item(profile, BenchmarkSpec.from_dict({**FAST, **spec}, "test")).id


def drive(d: Dispatcher, timeout: float, on_tick: Callable[[], None] | None = None) -> None:
    """Step `d` until nothing is left (the queue drained and no job open), calling `on_tick` between steps."""
    d.adopt()
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        busy = d.step()
        if on_tick is not None:
            on_tick()
        if not busy:
            return
        time.sleep(d.poll_s)
    raise AssertionError(f"not drained after {timeout} s (scaled); dispatcher said:\n" + "\n".join(d_lines(d)))


def d_lines(d: Dispatcher) -> list[str]:
    return list(getattr(d.on_line, "__self__", []))


def rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def jobs_of(db: Path, item_id: int) -> list[tuple]:
    """(job id, state, node, outcome, run id) of each job the item became, oldest first."""
    return rows(db, "SELECT job_id, state, node, outcome, run_id FROM executor_jobs WHERE queue_item_id = ? ORDER BY id",
                (item_id,))


def runs_of(db: Path, item_id: int) -> list[tuple[int, str, dict[str, Any]]]:
    return [(r[0], r[1], json.loads(r[2])) for r in rows(
        db, "SELECT id, status, provenance_json FROM runs WHERE queue_item_id = ? ORDER BY id", (item_id,))]


def leftovers(root: Path) -> list[str]:
    """Live processes whose private data dir is under `root` (a job's emulator or benchmark left behind)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            home = proc.environ().get("MOE_TUI_HOME", "")
            if home.startswith(str(root)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
    return found


def wait_job_state(db: Path, item_id: int, states: set[str], d: Dispatcher, timeout: float) -> tuple:
    """Step `d` until the item's newest job is in one of `states`; that job's row."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        d.step()
        jobs = jobs_of(db, item_id)
        if jobs and jobs[-1][1] in states:
            return jobs[-1]
        time.sleep(d.poll_s)
    raise AssertionError(f"item {item_id}'s job never reached {states}: {jobs_of(db, item_id)}")


def wait_server_up(env: Any, item_id: int, d: Dispatcher, attempt: int = 1, timeout: float = 60) -> None:
    """Step `d` until the item's job relays its node's GPUs (`executors.nodes`): the job's emulator
    serves (its simulated GPUs exist only while a server runs), so a strike now lands mid-run."""
    relay = env.data_dir / "jobs" / f"item-{item_id}-a{attempt}" / NODE_FILE
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if relay.is_file():
            return
        d.step()
        time.sleep(d.poll_s)
    raise AssertionError(f"item {item_id}'s job never relayed its GPUs ({relay}): {jobs_of(env.db, item_id)}")
