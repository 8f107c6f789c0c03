"""Executor jobs: the batch jobs queue items became (`executor_jobs`, schema 9), for `moe_tui.executors`.

One row per submission: which item and attempt it works, the scheduler's job id (NULL between
recording the row and the scheduler answering: a controller killed there finds its job again by
`name`), the last state the scheduler reported (Slurm's words: PENDING, RUNNING, COMPLETING,
COMPLETED, FAILED, CANCELLED, NODE_FAIL, PREEMPTED, TIMEOUT; GONE when it no longer knows the job),
its node, and how the controller settled it (`outcome`: imported, retried, failed, cancelled,
stale). A row is open until settled; an item has at most one open row. Only the process holding
the runner lock writes here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from moe_tui.records import ExecutorJobJson
from moe_tui.store.db import Store


@dataclass(frozen=True)
class JobRow:
    id: int
    executor: str
    name: str
    job_id: str | None
    item_id: int
    attempt: int
    state: str
    node: str
    reason: str
    result_path: str
    submitted_at: float
    ended_seen_at: float | None
    cancel_asked: bool
    outcome: str
    run_id: int | None

    def to_dict(self) -> ExecutorJobJson:
        return {"executor": self.executor, "job_id": self.job_id, "state": self.state, "node": self.node,
                "reason": self.reason, "attempt": self.attempt, "outcome": self.outcome}


def _row(r: Any) -> JobRow:
    return JobRow(int(r["id"]), r["executor"], r["name"], r["job_id"], int(r["queue_item_id"]), int(r["attempt"]),
                  r["state"], r["node"], r["reason"], r["result_path"], float(r["submitted_at"]), r["ended_seen_at"],
                  bool(r["cancel_asked"]), r["outcome"], r["run_id"])


class ExecutorJobs:
    """The `executor_jobs` table (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def open_jobs(self, executor: str) -> list[JobRow]:
        return [_row(r) for r in self.store.query(
            "SELECT * FROM executor_jobs WHERE executor = ? AND settled_at IS NULL ORDER BY id", (executor,))]

    def latest_for_items(self, item_ids: Iterable[int] | None = None) -> dict[int, JobRow]:
        """Each item's newest job (for `queue list` and the Queue screen); every item's when None.
        A store made before schema 10 (read-only, not migrated) has none."""
        sql = "SELECT * FROM executor_jobs j WHERE j.id = (SELECT MAX(id) FROM executor_jobs WHERE queue_item_id = j.queue_item_id)"
        params: list[Any] = []
        if item_ids is not None:
            ids = list(item_ids)
            sql += f" AND j.queue_item_id IN ({','.join('?' * len(ids))})"
            params = ids
        try:
            rows = self.store.query(sql, params)
        except Exception as exc:  # an older store, read-only: no executor has worked it
            if "no such table" in str(exc):
                return {}
            raise
        return {int(r["queue_item_id"]): _row(r) for r in rows}

    def recent(self, since: float) -> list[JobRow]:
        """Open jobs and those settled or updated since `since` (the dashboard's node rows: an
        ended job's node shows as ended a while). None from a store made before schema 10."""
        try:
            rows = self.store.query("SELECT * FROM executor_jobs WHERE settled_at IS NULL OR settled_at >= ?"
                                    " OR updated_at >= ? ORDER BY id", (since, since))
        except Exception as exc:  # an older store, read-only: no executor has worked it
            if "no such table" in str(exc):
                return []
            raise
        return [_row(r) for r in rows]

    def open_job_of(self, item_id: int) -> JobRow | None:
        """The item's job not yet settled (a running item an executor works), if any."""
        rows = self.store.query("SELECT * FROM executor_jobs WHERE queue_item_id = ? AND settled_at IS NULL", (int(item_id),))
        return _row(rows[0]) if rows else None

    def jobs_of_item(self, item_id: int) -> list[JobRow]:
        return [_row(r) for r in self.store.query(
            "SELECT * FROM executor_jobs WHERE queue_item_id = ? ORDER BY id", (int(item_id),))]

    def record(self, executor: str, name: str, item_id: int, attempt: int, result_path: str) -> int:
        """A submission about to be made (before the scheduler is asked: see the module docstring)."""
        now = time.time()
        with self.store.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO executor_jobs (executor, name, queue_item_id, attempt, state, result_path,"
                " submitted_at, updated_at) VALUES (?,?,?,?, 'SUBMITTING', ?, ?, ?)",
                (executor, name, int(item_id), int(attempt), result_path, now, now))
            return int(cur.lastrowid or 0)

    def set_job_id(self, row_id: int, job_id: str) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE executor_jobs SET job_id = ?, state = 'PENDING', updated_at = ? WHERE id = ?",
                       (job_id, time.time(), row_id))

    def update(self, row_id: int, *, state: str, node: str, reason: str, ended: bool) -> None:
        """The scheduler's latest word; `ended`: the first time it is seen ended, that time is kept."""
        now = time.time()
        with self.store.transaction() as tx:
            tx.execute("UPDATE executor_jobs SET state = ?, node = CASE WHEN ? != '' THEN ? ELSE node END,"
                       " reason = ?, updated_at = ?, ended_seen_at = CASE WHEN ? THEN COALESCE(ended_seen_at, ?)"
                       " ELSE NULL END WHERE id = ?", (state, node, node, reason, now, int(ended), now, row_id))

    def ask_cancel(self, row_id: int) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE executor_jobs SET cancel_asked = 1, updated_at = ? WHERE id = ?", (time.time(), row_id))

    def settle(self, row_id: int, outcome: str, run_id: int | None = None, reason: str | None = None) -> None:
        with self.store.transaction() as tx:
            tx.execute("UPDATE executor_jobs SET settled_at = ?, outcome = ?, run_id = ?,"
                       " reason = COALESCE(?, reason) WHERE id = ? AND settled_at IS NULL",
                       (time.time(), outcome, run_id, reason, row_id))

    def imported_run(self, item_id: int, job_id: str) -> int | None:
        """The run this job's result already closed its item with (the import's idempotency key:
        the run's provenance names the job, and the item points at the run, both set in the one
        transaction `Store.finish_run(close_item=...)` commits)."""
        rows = self.store.query(
            "SELECT r.id FROM runs r JOIN queue_items q ON q.run_id = r.id WHERE q.id = ?"
            " AND json_extract(r.provenance_json, '$.executor.job_id') = ?", (int(item_id), str(job_id)))
        return int(rows[0][0]) if rows else None

    def interrupt_orphan_items(self, reason: str) -> list[int]:
        """Items left `running` with no open job (a controller killed between claiming an item and
        recording its job) become `interrupted`, as the local runner's recovery does."""
        now = time.time()
        with self.store.transaction() as tx:
            ids = [int(r[0]) for r in tx.execute(
                "SELECT id FROM queue_items WHERE state = 'running' AND id NOT IN"
                " (SELECT queue_item_id FROM executor_jobs WHERE settled_at IS NULL)")]
            if ids:
                tx.execute(f"UPDATE queue_items SET state = 'interrupted', error = ?, updated_at = ?"
                           f" WHERE id IN ({','.join('?' * len(ids))})", (reason, now, *ids))
        return ids
