"""Runs in the store: creating one when a benchmark starts, closing it with everything it produced
(requests, GPU samples, the queue item it measured) in one transaction, importing finished runs,
and reading them back as `RunRecord`s. A stored result is never overwritten.

`RunRecords` is a mixin of `moe_tui.store.db.Store` (what it uses is `store.schema.StoreAccess`).
Per-request inter-token latencies are stored to the microsecond (`compact_itl`): the grid reads
run summaries, never these, and a float's full repr took twice the bytes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from moe_tui.records import (
    BenchSummary,
    DecodedTexts,
    GpuReadings,
    ProfileSnapshot,
    RequestRowJson,
    SelfChecks,
    StoredProvenance,
    StoredSpec,
    StoredTelemetry,
)
from moe_tui.store.errors import StoreError
from moe_tui.store.records import _dump
from moe_tui.store.retention import REQUEST_ROW_BYTES, RETENTION_BATCH, RUN_BYTES, SAMPLE_ROW_BYTES
from moe_tui.store.schema import StoreAccess
from moe_tui.store.summaries import fill_facts

RUN_STATUSES = ("running", "complete", "incomplete", "failed")


@dataclass(frozen=True)
class RunRecord:
    id: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    status: str
    profile_name: str
    spec: StoredSpec
    fingerprint: str
    client: str
    profile: ProfileSnapshot
    provenance: StoredProvenance
    summary: BenchSummary
    flags: list[str]
    telemetry: StoredTelemetry
    selfcheck: SelfChecks
    queue_item_id: int | None
    server_start_id: int | None
    source: str
    error: str
    diagnostic: str = ""  # 'cold': evidence about warmup, never in a cell's mean (schema 5)

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]


class RunRecords(StoreAccess):
    """Run writes and reads (mixed into Store)."""

    if TYPE_CHECKING:  # provided by Store (store.retention)
        def apply_sample_retention(self, *, batch: int | None = None) -> int: ...

    def create_run(
        self, *, profile_name: str, spec_json: str, fingerprint: str, client: str,
        profile: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
        queue_item_id: int | None = None, server_start_id: int | None = None,
        source: str = "moe-tui", status: str = "running",
    ) -> int:
        now = time.time()
        with self.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO runs (created_at, started_at, status, profile_name, spec_json, fingerprint,"
                " client, profile_json, provenance_json, queue_item_id, server_start_id, source)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (now, now, status, profile_name, spec_json, fingerprint, client, _dump(profile or {}),
                 _dump(provenance or {}), queue_item_id, server_start_id, source),
            )
            run_id = int(cur.lastrowid or 0)
            fill_facts(tx, [run_id])
            return run_id

    def finish_run(
        self, run_id: int, *, status: str, summary: Mapping[str, Any] | None = None,
        flags: Iterable[str] = (), telemetry: Mapping[str, Any] | None = None,
        selfcheck: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
        requests: Iterable[Mapping[str, Any]] = (), gpu_samples: Iterable[tuple[float, Mapping[str, Any]]] = (),
        error: str = "", finished_at: float | None = None, close_item: tuple[int, str, str] | None = None,
    ) -> bool:
        """Close a run with everything it produced, in one transaction (all or nothing).
        `close_item` = (queue item id, state, error): the item the run measured is closed in the
        SAME transaction, so a crash can never leave a stored run with its item still to do (which
        would run it twice). Returns whether that item was closed (False: it was no longer running,
        edited behind the runner's back; the run is stored regardless). Only a run still `running` is
        closed: any other raises StoreError and changes nothing (a stored run is never overwritten)."""
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"finish_run: status must be complete, incomplete or failed, got {status!r}")
        columns = {"status": status, "finished_at": finished_at or time.time(), "summary_json": _dump(summary or {}),
                   "flags_json": _dump(sorted(set(flags))), "error": error}
        for key, value in (("telemetry_json", telemetry), ("selfcheck_json", selfcheck),
                           ("provenance_json", provenance)):
            if value is not None:
                columns[key] = _dump(value)
        request_rows = [
            (run_id, i if r.get("idx") is None else r["idx"], int(bool(r.get("ok"))), r.get("sent_at"),
             r.get("prompt_len"), r.get("output_len"), r.get("ttft"), r.get("latency"),
             compact_itl(r.get("itl")), r.get("finish_reason"), r.get("error") or "")
            for i, r in enumerate(requests)]
        sample_rows = [(run_id, t, _dump(s)) for t, s in gpu_samples]
        samples_bytes = (sum(len(r[8]) + REQUEST_ROW_BYTES for r in request_rows)
                         + sum(len(r[2]) + SAMPLE_ROW_BYTES for r in sample_rows))
        with self.transaction() as tx:
            cur = tx.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in columns)}"
                             " WHERE id = ? AND status = 'running'", (*columns.values(), run_id))
            if cur.rowcount != 1:  # a stored result is never overwritten, by any later write
                raise StoreError(f"run {run_id} in store file {self.path} is not running (missing or already "
                                 f"stored): a stored run is never overwritten; nothing changed")
            tx.execute(f"UPDATE runs SET stored_bytes = {RUN_BYTES} + ? WHERE id = ?", (samples_bytes, run_id))
            fill_facts(tx, [run_id])
            tx.executemany("INSERT OR REPLACE INTO requests (run_id, idx, ok, sent_at, prompt_len, output_len,"
                           " ttft, latency, itl_json, finish_reason, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           request_rows)
            tx.executemany("INSERT INTO gpu_samples (run_id, t, sample_json) VALUES (?,?,?)", sample_rows)
            closed = False
            if close_item is not None:
                item_id, state, item_error = close_item
                cur = tx.execute("UPDATE queue_items SET state = ?, error = ?, run_id = ?, updated_at = ?"
                                 " WHERE id = ? AND state = 'running'", (state, item_error, run_id, time.time(), item_id))
                closed = cur.rowcount == 1
        try:
            self.apply_sample_retention(batch=RETENTION_BATCH)  # per-request samples of the last N runs only
        except StoreError:
            pass  # the run is stored; older samples go at the next run's end
        return closed

    def import_run(
        self, *, profile_name: str, spec_json: str, fingerprint: str, client: str,
        summary: Mapping[str, Any], provenance: Mapping[str, Any], status: str = "complete",
        flags: Iterable[str] = (), source: str = "import", started_at: float | None = None,
        finished_at: float | None = None, profile: Mapping[str, Any] | None = None,
    ) -> int:
        """A finished run from elsewhere (a bench_serving JSONL line), in one transaction."""
        return self.import_runs([dict(
            profile_name=profile_name, spec_json=spec_json, fingerprint=fingerprint, client=client,
            summary=summary, provenance=provenance, status=status, flags=flags, source=source,
            started_at=started_at, finished_at=finished_at, profile=profile)])[0]

    def import_runs(self, runs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Several `import_run` argument sets in ONE transaction: all stored or none (a file import)."""
        now = time.time()
        ids = []
        with self.transaction() as tx:
            for r in runs:
                cur = tx.execute(
                    "INSERT INTO runs (created_at, started_at, finished_at, status, profile_name, spec_json,"
                    " fingerprint, client, profile_json, provenance_json, summary_json, flags_json, source)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (now, r.get("started_at"), r.get("finished_at") or now, r.get("status", "complete"),
                     r["profile_name"], r["spec_json"], r["fingerprint"], r["client"],
                     _dump(r.get("profile") or {}), _dump(r["provenance"]), _dump(r["summary"]),
                     _dump(sorted(set(r.get("flags") or ()))), r.get("source", "import")),
                )
                ids.append(int(cur.lastrowid or 0))
            fill_facts(tx, ids)
        return ids

    def run(self, run_id: int) -> RunRecord | None:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        return _run_record(rows[0]) if rows else None

    def runs(
        self, *, profile_name: str | None = None, fingerprint: str | None = None,
        statuses: Sequence[str] | None = None, limit: int | None = None,
        exclude_diagnostic: bool = False,
    ) -> list[RunRecord]:
        """Runs in id order; `exclude_diagnostic` leaves out runs marked as evidence about something
        other than the backends (an investigation's cold runs). Indexed by profile and status."""
        where, params = [], []
        if profile_name is not None:
            where.append("profile_name = ?")
            params.append(profile_name)
        if fingerprint is not None:
            where.append("fingerprint = ?")
            params.append(fingerprint)
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            params.extend(statuses)
        if exclude_diagnostic:
            where.append("diagnostic = ''")
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        decoded: DecodedTexts = {}  # repeats of one spec share their spec and profile JSON
        return [_run_record(r, decoded) for r in self.query(sql, params)]

    def requests(self, run_id: int) -> list[RequestRowJson]:
        rows = self.query("SELECT * FROM requests WHERE run_id = ? ORDER BY idx", (run_id,))
        return [RequestRowJson(run_id=r["run_id"], idx=r["idx"], ok=bool(r["ok"]), sent_at=r["sent_at"],
                               prompt_len=r["prompt_len"], output_len=r["output_len"], ttft=r["ttft"],
                               latency=r["latency"], itl=json.loads(r["itl_json"]),
                               finish_reason=r["finish_reason"], error=r["error"]) for r in rows]

    def gpu_samples(self, run_id: int) -> list[tuple[float, GpuReadings]]:
        rows = self.query("SELECT t, sample_json FROM gpu_samples WHERE run_id = ? ORDER BY t", (run_id,))
        return [(r[0], json.loads(r[1])) for r in rows]

    def mark_running_runs(self, status: str, error: str) -> int:
        """After a crash: runs left 'running' become `status` (their data is partial)."""
        with self.transaction() as tx:
            cur = tx.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ? WHERE status = 'running'",
                (status, error, time.time()),
            )
            return cur.rowcount


def compact_itl(itl: Iterable[float] | None) -> str:
    """Inter-token latencies as JSON to the microsecond: `0.0123456789012345` became 18 bytes of
    text where 9 say all a latency histogram can show (a clock's jitter is larger)."""
    return json.dumps([round(x, 6) if isinstance(x, float) else x for x in itl or ()], separators=(",", ":"))


def _shared_json(text: str, decoded: DecodedTexts | None) -> Any:
    """json.loads, once per distinct text within one read (the grid copies what it keeps)."""
    if decoded is None:
        return json.loads(text)
    if text not in decoded:
        decoded[text] = json.loads(text)
    return decoded[text]


def _run_record(row: sqlite3.Row, decoded: DecodedTexts | None = None) -> RunRecord:
    return RunRecord(
        id=row["id"], created_at=row["created_at"], started_at=row["started_at"],
        finished_at=row["finished_at"], status=row["status"], profile_name=row["profile_name"],
        spec=_shared_json(row["spec_json"], decoded), fingerprint=row["fingerprint"], client=row["client"],
        profile=_shared_json(row["profile_json"], decoded), provenance=json.loads(row["provenance_json"]),
        summary=json.loads(row["summary_json"]), flags=json.loads(row["flags_json"]),
        telemetry=json.loads(row["telemetry_json"]), selfcheck=json.loads(row["selfcheck_json"]),
        queue_item_id=row["queue_item_id"], server_start_id=row["server_start_id"],
        source=row["source"], error=row["error"],
        diagnostic=row["diagnostic"] if "diagnostic" in row.keys() else "",
    )
