"""The controller's loop over an executor: submit items as jobs, watch them, import results, retry.

`Dispatcher` holds the runner lock of the data dir (no local runner works the queue meanwhile) and,
every `poll_s`:

1. asks the executor for the state of every open job and records it (`store.jobs`: state, node);
2. settles each job that has handed back its result file (`results.import_result`: once, by job
   and item), or that ended without one: after `result_grace_s` (shared storage may show a file
   late), a job lost to preemption, node failure, its time limit or a `scancel` from outside is
   retried as the local runner retries an interrupted item (the item back to pending: a new job, a
   new attempt), up to `max_attempts`; a job that failed on its own fails its item with its log's
   tail; a job whose cancel was asked (`ExecutorJobs.ask_cancel`) cancels its item;
3. claims pending items (queue order) and submits each **sweep** as one job, up to the executor's
   `max_in_flight`: a campaign's consecutive pending items of one profile and repeat (its sweep over
   the concurrencies, the control's included) run on one server start in one job, as the local
   runner runs them on one start, so each cell has its control on the same start (and node). With
   `node_blocks`, the sweeps of repeat r are pinned to node `node_blocks[r % len]` (`--nodelist`):
   each repeat block (both profiles, the control) is measured on one node, and every node holds
   whole blocks, balanced between the sides when the repeats divide evenly over the nodes.

Killed and started again, it re-adopts its jobs by id from the store (and, for a job recorded but
never answered for, by its unique name), interrupts only items that have no job, and goes on: a job
that finished while it was down is imported from its file. Stopping the dispatcher leaves the jobs
running under the scheduler; the next start picks them up.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from moe_tui.executors.base import LOST, Executor, ExecutorError, JobRequest, JobStatus
from moe_tui.executors.job import job_payload
from moe_tui.executors.results import ResultError, import_result, read_result
from moe_tui.executors.slurm import time_limit_for
from moe_tui.profiles import load_profiles
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs, JobRow
from moe_tui.store.queue import QueueError, QueueItem, RunQueue

LOG_TAIL_CHARS = 800


class Dispatcher:
    """Works the queue through an `Executor` (see the module docstring)."""

    def __init__(self, store: Store, profiles_dir: Path, data_dir: Path, executor: Executor, *,
                 max_attempts: int = 3, poll_s: float = 1.0, result_grace_s: float = 10.0,
                 on_line: Callable[[str], None] | None = None, node_blocks: Sequence[str] = ()) -> None:
        self.store, self.executor = store, executor
        self.profiles_dir, self.data_dir = Path(profiles_dir).resolve(), Path(data_dir)
        self.queue, self.jobs = RunQueue(store), ExecutorJobs(store)
        self.max_attempts, self.poll_s, self.result_grace_s = max_attempts, poll_s, result_grace_s
        self.on_line = on_line or (lambda line: None)
        self.node_blocks = tuple(node_blocks)
        self.jobs_dir = self.data_dir / "jobs"
        self._tag = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:8]
        self._seen: dict[int, tuple[str, str]] = {}
        self._cancel_sent: set[int] = set()
        self._lost: dict[int, list[str]] = {}  # job row -> its nodes the scheduler said lost when it ended
        self.counts = {"submitted": 0, "imported": 0, "retried": 0, "failed": 0, "cancelled": 0, "stale": 0}

    # -- start and loop -------------------------------------------------------------------------
    def adopt(self, retry_interrupted: bool = True) -> None:
        """After a start: items without a job interrupted (then requeued), runs an import left
        half-written kept as incomplete, open jobs taken back."""
        orphans = self.jobs.interrupt_orphan_items("interrupted: the controller stopped before the item's job was submitted")
        self.store.mark_running_runs("incomplete", "interrupted: the controller stopped while importing this run")
        open_jobs = self.jobs.open_jobs(self.executor.name)
        if open_jobs:
            self.on_line(f"re-adopted {len(open_jobs)} {self.executor.name} job(s): "
                         + ", ".join(f"{j.job_id or j.name} (item #{j.item_id})" for j in open_jobs))
        if orphans:
            self.on_line(f"{len(orphans)} item(s) had no job: interrupted")
        if retry_interrupted:
            requeued = self.queue.retry_interrupted()
            if requeued:
                self.on_line(f"requeued {len(requeued)} interrupted item(s): " + ", ".join(f"#{i}" for i in requeued))

    async def run(self, *, until_empty: bool = True, retry_interrupted: bool = True,
                  stop: asyncio.Event | None = None, use_lock: bool = True) -> int:
        """Adopt, then step until the queue is drained (`until_empty`) or `stop` is set. 0, or 1 on a
        fatal store error."""
        lock = None
        if use_lock:
            from moe_tui.run.rendezvous import RunnerLock

            lock = RunnerLock(self.data_dir, self.store.path).acquire(role=f"{self.executor.name} dispatcher")
        stop = stop or asyncio.Event()
        try:
            self.adopt(retry_interrupted)
            while not stop.is_set():
                busy = await asyncio.to_thread(self.step)
                if until_empty and not busy:
                    self.on_line("drained: no pending item and no job left " + json.dumps(self.counts))
                    return 0
                try:
                    await asyncio.wait_for(stop.wait(), self.poll_s)
                except TimeoutError:
                    pass
            left = len(self.jobs.open_jobs(self.executor.name))
            self.on_line(f"stopped; {left} job(s) left with {self.executor.name} (the next start re-adopts them)")
            return 0
        finally:
            if lock is not None:
                lock.release()

    def step(self) -> bool:
        """One poll, settle and submit; whether work is left (open jobs or pending items)."""
        open_jobs = self.jobs.open_jobs(self.executor.name)
        try:
            statuses = self.executor.poll([j.job_id for j in open_jobs if j.job_id])
        except ExecutorError as exc:
            self.on_line(f"cannot ask {self.executor.name} (nothing concluded, asking again): {exc}")
            return True
        for row in open_jobs:
            self._settle(row, statuses.get(row.job_id) if row.job_id else None)
        self._submit_more()
        return bool(self.jobs.open_jobs(self.executor.name)) or self.queue.next_pending() is not None

    # -- settling -------------------------------------------------------------------------------
    def _settle(self, row: JobRow, status: JobStatus | None) -> None:
        if row.job_id is None:  # recorded, the scheduler's answer never stored: find it by name
            found = self.executor.find(row.name)
            if found is not None:
                self.jobs.set_job_id(row.id, found)
            else:
                self._retry(row, "its job never reached the scheduler")
            return
        state = status.state if status is not None else "GONE"
        ended = status is None or status.ended
        node = status.node if status is not None else ""
        if self._seen.get(row.id) != (state, node) or (ended and row.ended_seen_at is None):
            before = self._seen.get(row.id, ("", row.node))[1]
            self._seen[row.id] = (state, node)
            reason = status.reason if status else ""
            if (state in LOST or reason == "NodeDown") and row.id not in self._lost:
                # which node: asked at once (a node that comes back is soon idle again), from the
                # nodes the job held before Slurm took the failed one off it
                self._lost[row.id] = self.executor.lost_nodes(before or node, now=node, reason=reason)
                reason = "; ".join(filter(None, [reason, *self._lost[row.id]]))
            self.jobs.update(row.id, state=state, node=node, reason=reason, ended=ended)
            self.on_line(f"item #{row.item_id} job {row.job_id}: {state}{' on ' + node if node else ''}")
        if row.cancel_asked and not ended and row.id not in self._cancel_sent:
            self._cancel_sent.add(row.id)
            try:
                self.executor.cancel(row.job_id)
            except ExecutorError as exc:
                self.on_line(str(exc))
        try:
            result = read_result(Path(row.result_path), row.item_id)
        except ResultError as exc:
            self._fail(row, f"its result cannot be imported: {exc}")
            return
        if result is not None and result.get("lost_nodes"):  # a node of a multi-node server died under it
            self._retry(row, f"job {row.job_id}: node {', '.join(map(str, result['lost_nodes']))} lost mid-run")
            return
        if result is not None:
            outcome, run_id = import_result(self.store, row, result)
            self.jobs.settle(row.id, outcome, run_id)
            self.counts[outcome] += 1
            self.on_line(f"item #{row.item_id} job {row.job_id}: result {outcome}"
                         + (f" as run {run_id} ({result['item_state']})" if run_id is not None else f" ({result['item_state']})"))
            return
        if not ended or row.ended_seen_at is None or time.time() - row.ended_seen_at < self.result_grace_s:
            return  # still working, or ended a moment ago: its file may not be visible yet
        if row.cancel_asked:
            self._close(row, "cancelled", f"cancelled by user (job {row.job_id})", "cancelled")
        elif state in LOST or state == "CANCELLED":
            why = state
            if state == "CANCELLED":  # by the user for another item of its sweep, or from outside moe-tui
                asked = self.store.query("SELECT queue_item_id FROM executor_jobs WHERE executor = ? AND job_id = ?"
                                         " AND cancel_asked = 1 ORDER BY id LIMIT 1", (row.executor, row.job_id))
                why = f"cancelled with item #{asked[0][0]} of its sweep" if asked else "cancelled outside moe-tui"
            lost = self._lost.get(row.id) or []
            self._retry(row, f"job {row.job_id} {why}{' on ' + row.node if row.node else ''} without a result"
                        + (f": node {', '.join(lost)} lost" if lost else ""))
        else:
            self._fail(row, f"job {row.job_id} ended {state} without a result{self._log_tail(row)}")

    def _close(self, row: JobRow, state: str, error: str, outcome: str) -> None:
        try:
            if self.queue.item(row.item_id).state == "running":
                self.queue.finish(row.item_id, state, error=error)
        except QueueError:
            pass  # deleted behind our back: nothing to close
        self.jobs.settle(row.id, outcome, reason=error)
        self.counts[outcome] += 1
        self.on_line(f"item #{row.item_id}: {state}: {error}")

    def _fail(self, row: JobRow, error: str) -> None:
        self._close(row, "failed", error, "failed")

    def _retry(self, row: JobRow, why: str) -> None:
        """As the local runner's interrupted item: back to pending (a new job, a new attempt)."""
        try:
            item = self.queue.item(row.item_id)
        except QueueError:
            item = None
        if item is not None and item.state == "running" and item.attempts >= self.max_attempts:
            self._fail(row, f"{why}; {item.attempts} attempts, no more retries")
            return
        if item is not None and item.state == "running":
            self.queue.finish(row.item_id, "interrupted", error=f"interrupted: {why}")
            self.queue.retry(row.item_id)
        self.jobs.settle(row.id, "retried", reason=why)
        self.counts["retried"] += 1
        self.on_line(f"item #{row.item_id}: retried: {why}")

    def _log_tail(self, row: JobRow) -> str:
        log = Path(row.result_path).parent / f"job-{row.job_id}.log"
        try:
            tail = log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:].strip()
        except OSError:
            return ""
        return f"; its log ({log}) ends: {tail}" if tail else ""

    # -- submitting -----------------------------------------------------------------------------
    def _submit_more(self) -> None:
        cap = self.executor.max_in_flight
        in_flight = len(self.jobs.open_jobs(self.executor.name))
        while (cap is None or in_flight < cap) and not self.queue.paused:
            item = self.queue.claim_next()
            if item is None:
                return
            sweep = [item, *self._claim_sweep(item)]
            if self._submit(sweep):
                in_flight += len(sweep)

    def _claim_sweep(self, first: QueueItem) -> list[QueueItem]:
        """The rest of `first`'s sweep: the next pending items of its campaign, profile and repeat."""
        out: list[QueueItem] = []
        while first.campaign_id is not None:
            nxt = self.queue.next_pending()
            if nxt is None or (nxt.campaign_id, nxt.profile_name, nxt.repeat_index) != \
                    (first.campaign_id, first.profile_name, first.repeat_index):
                break
            claimed = self.queue.claim_next()
            if claimed is None:
                break
            out.append(claimed)
        return out

    def block_node(self, item: QueueItem) -> str:
        """The node `item`'s repeat block is pinned to ("" without `node_blocks`)."""
        return self.node_blocks[item.repeat_index % len(self.node_blocks)] if self.node_blocks else ""

    def _submit(self, sweep: list[QueueItem]) -> bool:
        item = sweep[0]
        try:
            profile = load_profiles(self.profiles_dir).by_name(item.profile_name)
        except KeyError as exc:
            for it in sweep:
                self.queue.finish(it.id, "failed", error=f"profile: {exc.args[0]}")
            return False
        attempt = item.attempts
        workdir = self.jobs_dir / f"item-{item.id}-a{attempt}"
        workdir.mkdir(parents=True, exist_ok=True)
        result_path = workdir / "result.json"  # one file for the job: every item's part, written at once
        job_file = workdir / "job.json"
        job_file.write_text(json.dumps(job_payload([it.to_dict() for it in sweep], attempt, str(self.profiles_dir),
                                                   str(result_path), self.executor.name)), encoding="utf-8")
        bench = sum(time_limit_for(0.0, it.spec.num_prompts, it.spec.max_concurrency, it.spec.output_len,
                                   it.warmup, profile.time_scale) - 120.0 for it in sweep)
        request = JobRequest(
            name=f"moetui-{self._tag}-i{item.id}-a{attempt}", job_file=job_file, workdir=workdir,
            result_path=result_path, gpus=len(profile.gpus) or profile.tp_size // profile.nnodes, nodes=profile.nnodes,
            time_limit_s=profile.startup_timeout_s + bench + 120.0, nodelist=self.block_node(item))
        rows = [self.jobs.record(self.executor.name, request.name, it.id, it.attempts, str(result_path)) for it in sweep]
        try:
            job_id = self.executor.submit(request)
        except (ExecutorError, OSError) as exc:
            for row_id, it in zip(rows, sweep):
                self.jobs.settle(row_id, "failed", reason=str(exc))
                self.queue.finish(it.id, "failed", error=f"{self.executor.name}: {exc}")
                self.counts["failed"] += 1
            self.on_line(f"item(s) {', '.join(f'#{it.id}' for it in sweep)}: not submitted: {exc}")
            return False
        for row_id in rows:
            self.jobs.set_job_id(row_id, job_id)
        self.counts["submitted"] += 1
        concs = ",".join(str(it.spec.max_concurrency) for it in sweep)
        self.on_line(f"item{'s' if len(sweep) > 1 else ''} {', '.join(f'#{it.id}' for it in sweep)} "
                     f"({item.profile_name} conc={concs} rep={item.repeat_index}) -> {self.executor.name} job {job_id}"
                     + (f" on {request.nodelist}" if request.nodelist else ""))
        return True
