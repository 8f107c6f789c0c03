"""The store: one SQLite file (WAL mode) holding everything moe-tui measured and decided.

Tables: server starts, runs (spec JSON + fingerprint, profile snapshot, provenance, summary
metrics, status, flags), per-request records, GPU samples, campaigns and queue items. The schema
carries a version (`PRAGMA user_version`) and upgrades through ordered migrations. Every write is
one transaction, so a crash or a failed disk write leaves the previous state intact; failures
surface as `StoreError` naming the file.

The runner process writes and the TUI reads at the same time: WAL lets readers proceed while a
writer commits, and `busy_timeout` waits out short write locks instead of failing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

SCHEMA_VERSION = 4

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE server_starts (
        id INTEGER PRIMARY KEY,
        profile_name TEXT NOT NULL,
        profile_json TEXT NOT NULL,
        argv_json TEXT NOT NULL,
        env_json TEXT NOT NULL,
        log_path TEXT NOT NULL,
        pid INTEGER,
        started_at REAL NOT NULL,
        ready_at REAL,
        stopped_at REAL,
        state TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        resolved_backend TEXT,
        backend_mismatch INTEGER NOT NULL DEFAULT 0,
        sglang_version TEXT,
        server_info_json TEXT,
        model_info_json TEXT,
        exit_code INTEGER,
        exit_signal INTEGER,
        log_tail TEXT
    );
    CREATE TABLE campaigns (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        name TEXT NOT NULL,
        policy TEXT NOT NULL,
        definition_json TEXT NOT NULL
    );
    CREATE TABLE queue_items (
        id INTEGER PRIMARY KEY,
        position REAL NOT NULL,
        campaign_id INTEGER REFERENCES campaigns(id),
        profile_name TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        repeat_index INTEGER NOT NULL DEFAULT 0,
        warmup INTEGER NOT NULL DEFAULT 1,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        run_id INTEGER,
        error TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX queue_items_state ON queue_items(state, position);
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        status TEXT NOT NULL,
        profile_name TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        client TEXT NOT NULL,
        profile_json TEXT NOT NULL DEFAULT '{}',
        provenance_json TEXT NOT NULL DEFAULT '{}',
        summary_json TEXT NOT NULL DEFAULT '{}',
        flags_json TEXT NOT NULL DEFAULT '[]',
        telemetry_json TEXT NOT NULL DEFAULT '{}',
        selfcheck_json TEXT NOT NULL DEFAULT '{}',
        queue_item_id INTEGER,
        server_start_id INTEGER,
        source TEXT NOT NULL DEFAULT 'moe-tui',
        error TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX runs_profile_fp ON runs(profile_name, fingerprint);
    CREATE TABLE requests (
        run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        ok INTEGER NOT NULL,
        sent_at REAL,
        prompt_len INTEGER,
        output_len INTEGER,
        ttft REAL,
        latency REAL,
        itl_json TEXT NOT NULL DEFAULT '[]',
        finish_reason TEXT,
        error TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (run_id, idx)
    );
    CREATE TABLE gpu_samples (
        id INTEGER PRIMARY KEY,
        run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
        t REAL NOT NULL,
        sample_json TEXT NOT NULL
    );
    CREATE INDEX gpu_samples_run ON gpu_samples(run_id, t);
    """,
    # Queue-wide settings (the persisted pause flag). IF NOT EXISTS: early version-1 stores made
    # this table on the fly.
    2: """
    CREATE TABLE IF NOT EXISTS queue_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # Correctness gate samples (issue 15, moe_tui/gate.py): one row per gate pass of a profile's
    # server, every prompt's greedy token ids and logprobs in samples_json. IF NOT EXISTS, so the
    # integrator may renumber this migration freely.
    3: """
    CREATE TABLE IF NOT EXISTS gate_samples (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        profile_name TEXT NOT NULL,
        campaign_id INTEGER,
        server_start_id INTEGER,
        prompt_set TEXT NOT NULL,
        resolved_backend TEXT,
        samples_json TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS gate_samples_profile ON gate_samples(profile_name, created_at);
    """,
    # Investigations (issue 17): an item may ask for a fresh server start before it runs.
    4: """
    ALTER TABLE queue_items ADD COLUMN fresh_start INTEGER NOT NULL DEFAULT 0;
    """,
}

RUN_STATUSES = ("running", "complete", "incomplete", "failed")


class StoreError(RuntimeError):
    """The store could not be opened, read or written. The message names the file."""


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

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]


class Store:
    """A handle on the SQLite store. Thread-safe: one connection guarded by a lock."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA busy_timeout = 30000")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store file {self.path} is not a usable moe-tui database: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot open store file {self.path}: {exc}") from None

    @classmethod
    def open_default(cls) -> "Store":
        from moe_tui.paths import store_path

        return cls(store_path())

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Store":
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
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction() as conn:
                conn.executescript_in_tx(_MIGRATIONS[target])
                conn.execute(f"PRAGMA user_version = {target}")

    @contextmanager
    def transaction(self) -> Iterator["_Tx"]:
        """BEGIN IMMEDIATE ... COMMIT; ROLLBACK on any error, which is re-raised as StoreError."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write store file {self.path}, nothing changed: {exc}") from None
            try:
                yield _Tx(self._conn)
                self._conn.execute("COMMIT")
            except BaseException as exc:
                try:
                    self._conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"write to store file {self.path} failed, nothing changed: {exc}") from None
                raise

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"read from store file {self.path} failed: {exc}") from None

    # -- server starts --------------------------------------------------------------------------
    def record_server_start(
        self, *, profile_name: str, profile: Mapping[str, Any], argv: list[str],
        env: Mapping[str, str], log_path: str, pid: int | None, state: str = "starting",
    ) -> int:
        with self.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO server_starts (profile_name, profile_json, argv_json, env_json, log_path,"
                " pid, started_at, state) VALUES (?,?,?,?,?,?,?,?)",
                (profile_name, _dump(profile), _dump(argv), _dump(dict(env)), log_path, pid, time.time(), state),
            )
            return int(cur.lastrowid)

    _SERVER_START_COLUMNS = {
        "pid", "ready_at", "stopped_at", "state", "reason", "resolved_backend", "backend_mismatch",
        "sglang_version", "server_info_json", "model_info_json", "exit_code", "exit_signal", "log_tail",
    }

    def update_server_start(self, start_id: int, **fields: Any) -> None:
        for key in ("server_info", "model_info"):
            if key in fields:
                fields[key + "_json"] = _dump(fields.pop(key))
        bad = set(fields) - self._SERVER_START_COLUMNS
        if bad:
            raise ValueError(f"unknown server_starts columns: {sorted(bad)}")
        if not fields:
            return
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self.transaction() as tx:
            tx.execute(f"UPDATE server_starts SET {sets} WHERE id = ?", (*fields.values(), start_id))

    def server_start(self, start_id: int) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM server_starts WHERE id = ?", (start_id,))
        return _server_start_dict(rows[0]) if rows else None

    def server_starts(self, profile_name: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if profile_name is None:
            rows = self.query("SELECT * FROM server_starts ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self.query(
                "SELECT * FROM server_starts WHERE profile_name = ? ORDER BY id DESC LIMIT ?",
                (profile_name, limit),
            )
        return [_server_start_dict(r) for r in rows]

    def server_start_ids_in_states(self, states: Iterable[str]) -> list[int]:
        """Ids of the server starts recorded in one of `states` (e.g. the live ones)."""
        states = list(states)
        rows = self.query(f"SELECT id FROM server_starts WHERE state IN ({','.join('?' * len(states))}) "
                          "ORDER BY id", states)
        return [int(r[0]) for r in rows]

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
            return int(cur.lastrowid)

    def finish_run(
        self, run_id: int, *, status: str, summary: Mapping[str, Any] | None = None,
        flags: Iterable[str] = (), telemetry: Mapping[str, Any] | None = None,
        selfcheck: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
        requests: Iterable[Mapping[str, Any]] = (), gpu_samples: Iterable[tuple[float, Mapping[str, Any]]] = (),
        error: str = "", finished_at: float | None = None,
    ) -> None:
        """Close a run with everything it produced, in one transaction (all or nothing)."""
        if status not in RUN_STATUSES or status == "running":
            raise ValueError(f"finish_run: status must be complete, incomplete or failed, got {status!r}")
        with self.transaction() as tx:
            sets = ["status = ?", "finished_at = ?", "summary_json = ?", "flags_json = ?", "error = ?"]
            params: list[Any] = [status, finished_at or time.time(), _dump(summary or {}),
                                 _dump(sorted(set(flags))), error]
            if telemetry is not None:
                sets.append("telemetry_json = ?")
                params.append(_dump(telemetry))
            if selfcheck is not None:
                sets.append("selfcheck_json = ?")
                params.append(_dump(selfcheck))
            if provenance is not None:
                sets.append("provenance_json = ?")
                params.append(_dump(provenance))
            tx.execute(f"UPDATE runs SET {', '.join(sets)} WHERE id = ?", (*params, run_id))
            tx.executemany(
                "INSERT OR REPLACE INTO requests (run_id, idx, ok, sent_at, prompt_len, output_len, ttft,"
                " latency, itl_json, finish_reason, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (run_id, i if r.get("idx") is None else r["idx"], int(bool(r.get("ok"))), r.get("sent_at"),
                     r.get("prompt_len"), r.get("output_len"), r.get("ttft"), r.get("latency"),
                     _dump(list(r.get("itl") or [])), r.get("finish_reason"), r.get("error") or "")
                    for i, r in enumerate(requests)
                ],
            )
            tx.executemany(
                "INSERT INTO gpu_samples (run_id, t, sample_json) VALUES (?,?,?)",
                [(run_id, t, _dump(s)) for t, s in gpu_samples],
            )

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
                ids.append(int(cur.lastrowid))
        return ids

    def run(self, run_id: int) -> RunRecord | None:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        return _run_record(rows[0]) if rows else None

    def runs(
        self, *, profile_name: str | None = None, fingerprint: str | None = None,
        statuses: Sequence[str] | None = None, limit: int | None = None,
    ) -> list[RunRecord]:
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
        sql = "SELECT * FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_run_record(r) for r in self.query(sql, params)]

    def profile_names_with_runs(self) -> list[str]:
        return [r[0] for r in self.query("SELECT DISTINCT profile_name FROM runs ORDER BY profile_name")]

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

    # -- correctness gate samples (issue 15; moe_tui/gate.py) -------------------------------------
    def record_gate_samples(
        self, *, profile_name: str, prompt_set: str, samples: Sequence[Mapping[str, Any]],
        campaign_id: int | None = None, server_start_id: int | None = None,
        resolved_backend: str | None = None,
    ) -> int:
        """Store one gate pass (every prompt's token ids and logprobs); returns its id."""
        with self.transaction() as tx:
            cur = tx.execute(
                "INSERT INTO gate_samples (created_at, profile_name, campaign_id, server_start_id, prompt_set,"
                " resolved_backend, samples_json) VALUES (?,?,?,?,?,?,?)",
                (time.time(), profile_name, campaign_id, server_start_id, prompt_set, resolved_backend,
                 _dump(list(samples))),
            )
            return int(cur.lastrowid)

    def gate_samples(self, profile_name: str, *, campaign_id: int | None = None) -> dict[str, Any] | None:
        """The latest gate pass of a profile (of that campaign when given), or None."""
        sql = "SELECT * FROM gate_samples WHERE profile_name = ?"
        params: list[Any] = [profile_name]
        if campaign_id is not None:
            sql += " AND campaign_id = ?"
            params.append(campaign_id)
        rows = self.query(sql + " ORDER BY created_at DESC, id DESC LIMIT 1", params)
        if not rows:
            return None
        row = dict(rows[0])
        row["samples"] = json.loads(row.pop("samples_json"))
        return row

    def mark_running_runs(self, status: str, error: str) -> int:
        """After a crash: runs left 'running' become `status` (their data is partial)."""
        with self.transaction() as tx:
            cur = tx.execute(
                "UPDATE runs SET status = ?, error = ?, finished_at = ? WHERE status = 'running'",
                (status, error, time.time()),
            )
            return cur.rowcount


class _Tx:
    """The connection inside a transaction; only statement-level calls are allowed."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, rows)

    def executescript_in_tx(self, script: str) -> None:
        # executescript() would COMMIT first; run the statements one by one inside our transaction.
        for statement in _split_sql(script):
            self._conn.execute(statement)


def _split_sql(script: str) -> list[str]:
    statements, current = [], []
    for line in script.splitlines():
        current.append(line)
        if sqlite3.complete_statement("\n".join(current)):
            statement = "\n".join(current).strip()
            if statement:
                statements.append(statement)
            current = []
    return statements


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=_json_default, allow_nan=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def _server_start_dict(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    for key in ("profile_json", "argv_json", "env_json", "server_info_json", "model_info_json"):
        raw = d.pop(key)
        d[key[: -len("_json")]] = json.loads(raw) if raw else None
    d["backend_mismatch"] = bool(d["backend_mismatch"])
    return d


def _run_record(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"], created_at=row["created_at"], started_at=row["started_at"],
        finished_at=row["finished_at"], status=row["status"], profile_name=row["profile_name"],
        spec=json.loads(row["spec_json"]), fingerprint=row["fingerprint"], client=row["client"],
        profile=json.loads(row["profile_json"]), provenance=json.loads(row["provenance_json"]),
        summary=json.loads(row["summary_json"]), flags=json.loads(row["flags_json"]),
        telemetry=json.loads(row["telemetry_json"]), selfcheck=json.loads(row["selfcheck_json"]),
        queue_item_id=row["queue_item_id"], server_start_id=row["server_start_id"],
        source=row["source"], error=row["error"],
    )
