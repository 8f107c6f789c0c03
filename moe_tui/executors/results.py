"""The per-job result file: written once and atomically inside the job, imported once by the controller.

A job works its item in a private store on the node's own disk and, at its end, writes everything
the controller needs as ONE JSON file beside its job file (storage both sides see): the item's
verdict, the run (spec, provenance, summary, flags, telemetry, requests, GPU samples) and its server
start. It is written to a temporary name, flushed and renamed (`write_result`): a reader sees the
whole file or none. No SQLite file ever lives on shared storage.

`import_result` is idempotent by job and item: the run stored carries the job in its provenance
(`executor.job_id`) and the item is closed with that run in the same transaction
(`Store.finish_run(close_item=...)`), so an import interrupted anywhere and done again stores the run
once; a result for an item no longer running under that attempt (retried meanwhile, edited by
hand) is `stale` and stores nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

from moe_tui.records import JobResultJson
from moe_tui.store.db import Store
from moe_tui.store.jobs import ExecutorJobs, JobRow
from moe_tui.store.queue import FINISHED_STATES, QueueError, RunQueue

RESULT_FORMAT = "moe-tui-job-result"
RESULT_VERSION = 1
RESULT_MAX_BYTES = 256 << 20


class ResultError(ValueError):
    """A result file that cannot be imported; the message names the file and what is wrong."""


def write_result(path: Path, result: JobResultJson) -> None:
    """`result` as `path`, all at once: temporary name in the same folder, fsync, rename, fsync the folder."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"format": RESULT_FORMAT, "version": RESULT_VERSION, **result}, fh, allow_nan=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_result(path: Path) -> JobResultJson | None:
    """The result at `path`, checked; None when there is none (yet). Raises ResultError."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size > RESULT_MAX_BYTES:
        raise ResultError(f"{path}: {size} bytes, more than a job result may hold ({RESULT_MAX_BYTES})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultError(f"{path}: not a readable result: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT or data.get("version") != RESULT_VERSION:
        raise ResultError(f"{path}: not a {RESULT_FORMAT} version {RESULT_VERSION} file")
    for key, kind in (("job_id", str), ("item_id", int), ("attempt", int), ("item_state", str), ("item_error", str),
                      ("node", str)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ResultError(f"{path}: '{key}' must be {kind.__name__}, got {data.get(key)!r}")
    if data["item_state"] not in FINISHED_STATES:
        raise ResultError(f"{path}: item_state {data['item_state']!r} is not a finished item state")
    run = data.get("run")
    if run is not None:
        if not isinstance(run, dict):
            raise ResultError(f"{path}: 'run' must be an object")
        for key in ("profile_name", "spec_json", "fingerprint", "client", "status"):
            if not isinstance(run.get(key), str):
                raise ResultError(f"{path}: run.{key} must be a string")
        for key in ("provenance", "summary", "telemetry", "selfcheck", "profile"):
            if not isinstance(run.get(key, {}), dict):
                raise ResultError(f"{path}: run.{key} must be an object")
        for key in ("flags", "requests", "gpu_samples"):
            if not isinstance(run.get(key, []), list):
                raise ResultError(f"{path}: run.{key} must be a list")
    return cast(JobResultJson, data)  # each field checked above


def import_result(store: Store, row: JobRow, result: JobResultJson) -> tuple[str, int | None]:
    """Store `result` of the job `row` once: ("imported", run id or None) or ("stale", None)."""
    jobs, queue = ExecutorJobs(store), RunQueue(store)
    if row.job_id is None or result["job_id"] != row.job_id or result["item_id"] != row.item_id:
        return "stale", None
    done = jobs.imported_run(row.item_id, row.job_id)
    if done is not None:
        return "imported", done
    try:
        item = queue.item(row.item_id)
    except QueueError:
        return "stale", None
    if item.state != "running" or item.attempts != row.attempt or result["attempt"] != row.attempt:
        return "stale", None
    run = result.get("run")
    state, error = result["item_state"], result["item_error"]
    if run is None:  # the job ended its item without a run (its server did not start)
        queue.finish(row.item_id, state, error=error)
        return "imported", None
    start_id = _server_start(store, run["profile_name"], result.get("server_start"))
    provenance = dict(run.get("provenance") or {})
    provenance["executor"] = {"kind": row.executor, "job_id": row.job_id, "node": result["node"],
                              "attempt": row.attempt}
    run_id = store.create_run(profile_name=run["profile_name"], spec_json=run["spec_json"],
                              fingerprint=run["fingerprint"], client=run["client"], profile=run.get("profile") or {},
                              provenance=provenance, queue_item_id=row.item_id, server_start_id=start_id)
    store.finish_run(run_id, status=run["status"], summary=run.get("summary") or {}, flags=run.get("flags") or [],
                     telemetry=run.get("telemetry") or {}, selfcheck=run.get("selfcheck") or {},
                     requests=run.get("requests") or [], error=str(run.get("error") or ""),
                     gpu_samples=[(float(t), s) for t, s in run.get("gpu_samples") or []],
                     finished_at=run.get("finished_at"), close_item=(row.item_id, state, error))
    return "imported", run_id


_START_FIELDS = ("ready_at", "stopped_at", "state", "reason", "resolved_backend", "backend_mismatch", "sglang_version",
                 "server_info", "model_info", "exit_code", "exit_signal", "log_tail")


def _server_start(store: Store, profile_name: str, start: Any) -> int | None:
    """The job's server start as a row of this store (runs of one start share it in the grid)."""
    if not isinstance(start, dict):
        return None
    start_id = store.record_server_start(
        profile_name=profile_name, profile=start.get("profile") or {}, argv=list(start.get("argv") or []),
        env=dict(start.get("env") or {}), log_path=str(start.get("log_path") or ""), pid=None, state="stopped")
    fields = {k: start[k] for k in _START_FIELDS if start.get(k) is not None}
    store.update_server_start(start_id, **fields)
    return start_id
