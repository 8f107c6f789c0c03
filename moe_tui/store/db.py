"""The store: one SQLite file (WAL mode) holding everything moe-tui measured and decided.

Tables: server starts, runs (spec JSON + fingerprint, profile snapshot, provenance, summary
metrics, status, flags), per-request records, GPU samples, campaigns and queue items. The schema
carries a version (`PRAGMA user_version`) and upgrades through ordered migrations. Every write is
one transaction, so a crash or a failed disk write leaves the previous state intact; failures
surface as `StoreError` naming the file. Server-start and gate-sample records live in the
`moe_tui.store.records` mixin; usage, archive, prune and sample retention in the
`moe_tui.store.retention` mixin; the schema and migrations in `moe_tui.store.schema`; the run
summaries a grid reads (kept in step by triggers and this write path) in `moe_tui.store.summaries`.

The runner process writes and the TUI reads at the same time: WAL lets readers proceed while a
writer commits, and `busy_timeout` waits out short write locks instead of failing. A write lock
held longer than that (a backup, a stuck sqlite3 shell) is waited out again with backoff for up to
`write_retry_s` before the write is given up (`StoreBusy`); the caller that holds a finished
measurement then spills it (`moe_tui.run.recording`) instead of dropping it. Both limits default to
`DEFAULT_BUSY_TIMEOUT_S` / `DEFAULT_WRITE_RETRY_S` and can be set per process with
MOE_TUI_STORE_BUSY_TIMEOUT_S / MOE_TUI_STORE_WRITE_RETRY_S.

Integrity: every writable open runs `PRAGMA quick_check` first and refuses a damaged file
(`StoreDamaged`, with the recovery hint); the runner keeps a rolling, checked online backup beside
it (`store_integrity.backup_store`), which `moe-tui doctor --repair` restores (`moe_tui.store.integrity`). A store owned by another
user is refused for writing.

Owner-only: the store, its WAL and SHM are 0600 (created under an 0077 umask, tightened if an
older version left them looser). A store the user cannot write (read-only file or folder, a
read-only mount) opens read-only: reads work, every write raises `StoreReadOnly` naming the file.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moe_tui.store.errors import StoreBusy, StoreError, StoreReadOnly
from moe_tui.store.records import StartAndGateRecords, _dump, _json_default, _server_start_dict  # noqa: F401  (re-exported)
from moe_tui.store.retention import REQUEST_ROW_BYTES, RUN_BYTES, SAMPLE_ROW_BYTES, RetentionRecords
from moe_tui.store.schema import _MIGRATIONS, SCHEMA_VERSION, _split_sql, _Tx  # noqa: F401  (re-exported)
from moe_tui.store.summaries import RunSummary, SummaryRecords, fill_facts  # noqa: F401  (re-exported)

RUN_STATUSES = ("running", "complete", "incomplete", "failed")
DEFAULT_BUSY_TIMEOUT_S = 30.0
DEFAULT_WRITE_RETRY_S = 120.0
BUSY_ENV = "MOE_TUI_STORE_BUSY_TIMEOUT_S"
RETRY_ENV = "MOE_TUI_STORE_WRITE_RETRY_S"


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise StoreError(f"{name}={raw!r}: a number of seconds is expected") from None
    if not value >= 0:
        raise StoreError(f"{name}={raw!r}: must be >= 0 seconds")
    return value


def _is_busy(exc: sqlite3.Error) -> bool:
    return "locked" in str(exc).lower() or "busy" in str(exc).lower()


def _tighten(path: Path) -> None:
    """0600 for a store file of ours that an older version (or another umask) left looser."""
    try:
        st = path.stat()
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o600)
    except OSError:
        pass

@dataclass(frozen=True)
class RunRecord:
    id: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    status: str
    profile_name: str
    spec: dict[str, Any]
    fingerprint: str
    client: str
    profile: dict[str, Any]
    provenance: dict[str, Any]
    summary: dict[str, Any]
    flags: list[str]
    telemetry: dict[str, Any]
    selfcheck: dict[str, Any]
    queue_item_id: int | None
    server_start_id: int | None
    source: str
    error: str
    diagnostic: str = ""  # 'cold': evidence about warmup, never in a cell's mean (schema 5)

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]


class Store(StartAndGateRecords, RetentionRecords, SummaryRecords):
    """A handle on the SQLite store. Thread-safe: one connection guarded by a lock."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float | None = None,
                 write_retry_s: float | None = None, readonly: bool | None = None):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._commits = 0
        self.busy_timeout_s = (_seconds_from_env(BUSY_ENV, DEFAULT_BUSY_TIMEOUT_S)
                               if busy_timeout_s is None else busy_timeout_s)
        self.write_retry_s = (_seconds_from_env(RETRY_ENV, DEFAULT_WRITE_RETRY_S)
                              if write_retry_s is None else write_retry_s)
        self.readonly = self._cannot_write() if readonly is None else readonly
        self.readonly_why = ""  # why a writable-looking store was opened read-only (open_default)
        if not self.readonly:  # another user's store is never written; nor a damaged one (below)
            from moe_tui.store.integrity import refuse_damaged, refuse_foreign

            refuse_foreign(self.path)
        try:
            if not self.readonly:
                os.umask(os.umask(0o077) | 0o077)  # store, WAL, SHM: owner only
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._conn = self._connect()
            if not self.readonly:
                refuse_damaged(self._conn, self.path)  # PRAGMA quick_check before any write
                self._migrate()
                for suffix in ("", "-wal", "-shm"):
                    _tighten(Path(str(self.path) + suffix))
            else:
                self._check_schema()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store file {self.path} is not a usable moe-tui database: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot open store file {self.path}: {exc}") from None

    def _cannot_write(self) -> bool:
        if self.path.exists():
            return not (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK | os.X_OK))
        parent = next((p for p in (self.path.parent, *self.path.parent.parents) if p.exists()), None)
        return parent is not None and parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK)

    def _connect(self) -> sqlite3.Connection:
        busy_ms = int(self.busy_timeout_s * 1000)
        if self.readonly:
            if not self.path.exists():
                raise StoreError(f"store file {self.path} does not exist and its folder is read-only")
            # mode=ro still needs the -shm file of a WAL database; immutable=1 reads a read-only
            # mount where it cannot be made (nothing else writes there).
            uri = f"file:{self.path}?mode=ro"
            if not os.access(self.path.parent, os.W_OK):
                uri += "&immutable=1"
            conn = sqlite3.connect(uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        else:
            conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        if not self.readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _check_schema(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise StoreError(f"store file {self.path} is read-only and has schema {version}; this moe-tui "
                             f"reads schema {SCHEMA_VERSION} (open it once writable to upgrade it)")

    @classmethod
    def open_default(cls) -> Store:
        """This user's store. A data dir that cannot be written but holds a store opens it
        read-only (reads work, writes are refused naming the file)."""
        from moe_tui.paths import DataDirError, store_path

        try:
            return cls(store_path())
        except DataDirError as exc:
            try:
                path = store_path(writable=False)
            except DataDirError:
                raise exc from None
            if not path.exists():
                raise exc from None
            store = cls(path, readonly=True)
            store.readonly_why = str(exc)
            return store

    @classmethod
    def open_for_reading(cls) -> Store:
        """This user's store for a command that only reads it: read-only at this schema (a read pays no
        integrity check, a pass over the file: ~1 s at 10k runs); else as `open_default` (made, upgraded)."""
        from moe_tui.paths import DataDirError, store_path

        try:
            path = store_path(writable=False)
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True) if path.is_file() else None
        except (DataDirError, sqlite3.Error):
            conn = None
        if conn is None:
            return cls.open_default()
        try:  # not a database: the writable open says so, naming the file
            current = conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        except sqlite3.Error:
            current = False
        conn.close()
        return cls(path, readonly=True) if current else cls.open_default()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------
    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"store file {self.path} has schema {version}, newer than this moe-tui ({SCHEMA_VERSION})"
            )
        if version == 0:
            # A new store frees deleted pages with `PRAGMA incremental_vacuum` (`moe-tui store prune`);
            # it takes effect on an empty file only through a VACUUM (instant: nothing in it yet).
            self._conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self._conn.execute("VACUUM")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as conn:
                conn.executescript_in_tx(_MIGRATIONS[target])
                conn.execute(f"PRAGMA user_version = {target}")
        if 0 < version < 9:  # the run summaries made by the upgrade: their grid facts (and simulated mark), once
            self.fill_missing_facts()

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        """BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any error, which is re-raised as StoreError.
        A write lock held by another process past the busy timeout is retried with backoff for up
        to `write_retry_s`; then `StoreBusy`. A read-only store raises `StoreReadOnly`."""
        if self.readonly:
            why = self.readonly_why or "file, folder or mount not writable"
            raise StoreReadOnly(f"store file {self.path} is read-only ({why}): "
                                f"nothing changed; reading commands still work")
        with self._lock:
            self._begin()
            try:
                yield _Tx(self._conn)
                self._conn.execute("COMMIT")
                self._commits += 1
            except BaseException as exc:
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"write to store file {self.path} failed, nothing changed: {exc}") from None
                raise

    def _begin(self) -> None:
        deadline = time.monotonic() + self.write_retry_s
        delay = 0.05
        while True:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise StoreError(f"cannot write store file {self.path}, nothing changed: {exc}") from None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreBusy(
                        f"store file {self.path} stayed locked by another process for "
                        f"{self.busy_timeout_s + self.write_retry_s:g} s; nothing changed: {exc}") from None
                # Backoff with jitter, so two waiting writers do not retry in lockstep.
                time.sleep(min(left, delay * (0.5 + random.random())))
                delay = min(delay * 2, 2.0)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                rows: list[sqlite3.Row] = self._conn.execute(sql, params).fetchall()  # row_factory is Row
                return rows
            except sqlite3.Error as exc:
                raise StoreError(f"read from store file {self.path} failed: {exc}") from None

    def data_version(self) -> int:
        """SQLite's data_version: changes when another connection commits (cheap change polling)."""
        return int(self.query("PRAGMA data_version")[0][0])

    # -- runs -----------------------------------------------------------------------------------
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
             _dump(list(r.get("itl") or [])), r.get("finish_reason"), r.get("error") or "")
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
            self.apply_sample_retention()  # per-request samples for the last N runs only, when set
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
        decoded: dict[str, Any] = {}  # repeats of one spec share their spec and profile JSON
        return [_run_record(r, decoded) for r in self.query(sql, params)]

    def requests(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.query("SELECT * FROM requests WHERE run_id = ? ORDER BY idx", (run_id,))
        out = []
        for r in rows:
            d = dict(r)
            d["ok"] = bool(d["ok"])
            d["itl"] = json.loads(d.pop("itl_json"))
            out.append(d)
        return out

    def gpu_samples(self, run_id: int) -> list[tuple[float, dict[str, Any]]]:
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


def _shared_json(text: str, decoded: dict[str, Any] | None) -> Any:
    """json.loads, once per distinct text within one read (the grid copies what it keeps)."""
    if decoded is None:
        return json.loads(text)
    if text not in decoded:
        decoded[text] = json.loads(text)
    return decoded[text]


def _run_record(row: sqlite3.Row, decoded: dict[str, Any] | None = None) -> RunRecord:
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
