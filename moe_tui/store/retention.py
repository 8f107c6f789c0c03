"""Retention for a store kept for months (issue 26): how big it is per profile and campaign, which
runs an age/profile/campaign selects, an archive of them that `moe-tui import` reads back with
nothing lost, pruning them (their requests and GPU samples go with them, by trigger) and giving the
space back, and keeping per-request samples for the last N runs only (a setting the runner applies
after each run it stores). Also the reads that must not grow with the store: marked diagnostic
runs, the profiles with runs, and `generation` (what caches of store reads are keyed by).

`RetentionRecords` is a mixin of `moe_tui.store.db.Store` (like `store.records`; what it uses of it
is declared by `store.schema.StoreAccess`): writes go through the store's `transaction()`, reads
through `query()`. The archive is JSON lines: a header line
(`ARCHIVE_KIND`, the schema), then one line per run with every column, its requests, its GPU
samples and the server start that measured it.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from moe_tui.store.errors import StoreError
from moe_tui.store.schema import SCHEMA_VERSION, StoreAccess, _Tx
from moe_tui.store.summaries import fill_facts

ARCHIVE_KIND = "moe-tui-archive"
KEEP_SAMPLES_KEY = "keep_samples_runs"  # queue_settings: per-request samples kept for the last N runs
DEFAULT_WARN_BYTES = 20 * 1024**3  # the TUI says so past this (MOE_TUI_STORE_WARN_GB changes it)
_CHUNK = 500  # ids per statement (SQLite's variable limit is far above; keeps statements small)


class ArchiveError(ValueError):
    """An archive file that cannot be restored; the message names the file and line."""


@dataclass(frozen=True)
class Usage:
    """Bytes are the stored text's length (what pruning gives back), not pages."""

    file_bytes: int
    free_bytes: int
    runs: int
    profiles: tuple[dict[str, Any], ...]  # name, runs, requests, gpu_samples, bytes, first/last finished
    campaigns: tuple[dict[str, Any], ...]  # id, name, items, runs, bytes

    def to_dict(self) -> dict[str, Any]:
        return {"file_bytes": self.file_bytes, "free_bytes": self.free_bytes, "runs": self.runs,
                "profiles": list(self.profiles), "campaigns": list(self.campaigns)}


REQUEST_ROW_BYTES, SAMPLE_ROW_BYTES = 64, 24  # a row's columns beside its JSON, roughly
RUN_BYTES = ("(LENGTH(spec_json) + LENGTH(profile_json) + LENGTH(provenance_json) + LENGTH(summary_json)"
             " + LENGTH(telemetry_json) + LENGTH(selfcheck_json))")
_REQUEST_BYTES = (f"(SELECT COALESCE(SUM(LENGTH(q.itl_json)) + COUNT(*) * {REQUEST_ROW_BYTES}, 0) FROM requests q"
                  " WHERE q.run_id = r.id)")
_SAMPLE_BYTES = (f"(SELECT COALESCE(SUM(LENGTH(g.sample_json)) + COUNT(*) * {SAMPLE_ROW_BYTES}, 0) FROM gpu_samples g"
                 " WHERE g.run_id = r.id)")
# A run's bytes: as stored when the runner wrote it, else counted (older runs, imports: slow on a big store).
_BYTES = ("COALESCE(r.stored_bytes, LENGTH(r.spec_json) + LENGTH(r.profile_json) + LENGTH(r.provenance_json)"
          f" + LENGTH(r.summary_json) + LENGTH(r.telemetry_json) + LENGTH(r.selfcheck_json) + {_REQUEST_BYTES}"
          f" + {_SAMPLE_BYTES})")


class RetentionRecords(StoreAccess):
    """Usage, selection, archive, prune, vacuum and sample retention (mixed into Store, which
    provides what `StoreAccess` declares)."""

    # -- reads that must not grow with the store (the grid's, the caches') ----------------------
    def diagnostic_run_ids(self, profiles: Sequence[str] | None = None) -> list[int]:
        """Runs marked as evidence about something other than the backends (`runs.diagnostic`,
        e.g. an investigation's cold runs), of `profiles` when given: an indexed read."""
        sql, params = "SELECT id FROM runs WHERE diagnostic != ''", list[Any]()
        if profiles is not None:
            sql += f" AND profile_name IN ({','.join('?' * len(profiles))})"
            params = list(profiles)
        return [int(r[0]) for r in self.query(sql + " ORDER BY id", params)]

    def profile_names_with_runs(self) -> list[str]:
        # A skip-scan of the (profile_name, ...) index: one seek per profile, not one row per run.
        return [r[0] for r in self.query(
            "WITH RECURSIVE p(name) AS (SELECT MIN(profile_name) FROM runs UNION ALL"
            " SELECT (SELECT MIN(profile_name) FROM runs WHERE profile_name > p.name) FROM p"
            " WHERE p.name IS NOT NULL) SELECT name FROM p WHERE name IS NOT NULL")]

    def generation(self) -> tuple[int, int]:
        """Changes whenever anything is committed to the store, by this handle or another process
        (a cache of what was read from it is keyed by this): (this handle's commits, data_version)."""
        return self._commits, int(self.query("PRAGMA data_version")[0][0])

    # -- how big ----------------------------------------------------------------------------------
    def file_bytes(self) -> int:
        """The store file and its WAL on disk."""
        return sum(p.stat().st_size for p in (self.path, Path(str(self.path) + "-wal")) if p.exists())

    def usage(self) -> Usage:
        """Runs and bytes per profile and per campaign (a full read: a command's, not a screen's)."""
        per_run = (f"SELECT r.id, r.profile_name, r.finished_at, {_BYTES} AS bytes,"
                   " (SELECT COUNT(*) FROM requests q WHERE q.run_id = r.id) AS requests,"
                   " (SELECT COUNT(*) FROM gpu_samples g WHERE g.run_id = r.id) AS samples FROM runs r")
        profiles = [dict(r) for r in self.query(
            f"SELECT profile_name AS name, COUNT(*) AS runs, SUM(requests) AS requests, SUM(samples) AS gpu_samples,"
            f" SUM(bytes) AS bytes, MIN(finished_at) AS first_finished, MAX(finished_at) AS last_finished"
            f" FROM ({per_run}) GROUP BY profile_name ORDER BY bytes DESC, name")]
        campaigns = [dict(r) for r in self.query(
            f"SELECT c.id, c.name, (SELECT COUNT(*) FROM queue_items i WHERE i.campaign_id = c.id) AS items,"
            f" COUNT(p.id) AS runs, COALESCE(SUM(p.bytes), 0) AS bytes FROM campaigns c"
            f" LEFT JOIN queue_items i ON i.campaign_id = c.id LEFT JOIN ({per_run}) p ON p.id = i.run_id"
            f" GROUP BY c.id ORDER BY bytes DESC, c.id")]
        page = int(self.query("PRAGMA page_size")[0][0])
        free = int(self.query("PRAGMA freelist_count")[0][0]) * page
        runs = int(self.query("SELECT COUNT(*) FROM runs")[0][0])
        return Usage(self.file_bytes(), free, runs, tuple(profiles), tuple(campaigns))

    def size_notice(self) -> str | None:
        """Words for the TUI when the store has grown past MOE_TUI_STORE_WARN_GB (default 20 GB)."""
        import os

        raw = os.environ.get("MOE_TUI_STORE_WARN_GB")
        try:
            limit = float(raw) * 1024**3 if raw else DEFAULT_WARN_BYTES
        except ValueError:
            limit = DEFAULT_WARN_BYTES
        size = self.file_bytes()
        if size <= limit:
            return None
        return (f"the store is {size / 1024**3:.1f} GB (past {limit / 1024**3:g} GB): `moe-tui store usage` shows "
                "what takes the room; `moe-tui store archive --prune` or `store keep-samples N` keep it in bounds")

    # -- which runs -------------------------------------------------------------------------------
    def select_run_ids(self, *, older_than_s: float | None = None, profile: str | None = None,
                       campaign_id: int | None = None, now: float | None = None) -> list[int]:
        """Finished runs matching every given selector (a running run is never selected)."""
        where, params = ["status != 'running'"], list[Any]()
        if older_than_s is not None:
            where.append("COALESCE(finished_at, created_at) < ?")
            params.append((now if now is not None else time.time()) - older_than_s)
        if profile is not None:
            where.append("profile_name = ?")
            params.append(profile)
        if campaign_id is not None:
            where.append("(id IN (SELECT run_id FROM queue_items WHERE campaign_id = ? AND run_id IS NOT NULL)"
                         " OR queue_item_id IN (SELECT id FROM queue_items WHERE campaign_id = ?))")
            params += [campaign_id, campaign_id]
        return [int(r[0]) for r in self.query(f"SELECT id FROM runs WHERE {' AND '.join(where)} ORDER BY id", params)]

    # -- archive ----------------------------------------------------------------------------------
    def archive_runs(self, run_ids: Sequence[int], out: IO[str]) -> int:
        """Every column of the runs, their requests, GPU samples and server start, as JSON lines."""
        out.write(json.dumps({"kind": ARCHIVE_KIND, "schema": SCHEMA_VERSION, "created_at": time.time(),
                              "runs": len(run_ids)}) + "\n")
        for rid in run_ids:
            rows = self.query("SELECT * FROM runs WHERE id = ?", (rid,))
            if not rows:
                continue
            run = dict(rows[0])
            start = None
            if run.get("server_start_id") is not None:
                found = self.query("SELECT * FROM server_starts WHERE id = ?", (run["server_start_id"],))
                start = dict(found[0]) if found else None
            record = {
                "run": run, "server_start": start,
                "requests": [dict(r) for r in self.query("SELECT * FROM requests WHERE run_id = ? ORDER BY idx", (rid,))],
                "gpu_samples": [[r[0], r[1]] for r in self.query(
                    "SELECT t, sample_json FROM gpu_samples WHERE run_id = ? ORDER BY t, id", (rid,))],
            }
            out.write(json.dumps(record, allow_nan=True) + "\n")
        return len(run_ids)

    def restore_archive(self, lines: Iterable[str], where: str) -> tuple[list[int], list[int]]:
        """An archive's runs back into this store, in ONE transaction (all or nothing). A run keeps
        its id when that id is free; a run already here (same profile, fingerprint and creation
        time) is skipped. Returns (restored ids, skipped ids). Raises ArchiveError naming the file and line."""
        records = _read_archive(lines, where)
        restored: list[int] = []
        skipped: list[int] = []
        with self.transaction() as tx:
            columns = {r[1] for r in tx.execute("PRAGMA table_info(runs)")}
            for line, rec in records:
                run = dict(rec["run"])
                same = tx.execute("SELECT id FROM runs WHERE profile_name = ? AND fingerprint = ? AND created_at = ?",
                                  (run["profile_name"], run["fingerprint"], run.get("created_at"))).fetchone()
                if same is not None:  # restored before, or never pruned
                    skipped.append(int(same[0]))
                    continue
                _mark_restored(run, where, line)
                if tx.execute("SELECT 1 FROM runs WHERE id = ?", (run["id"],)).fetchone() is not None:
                    run.pop("id")  # the id is taken by another run: a new one
                run["server_start_id"] = _restore_start(tx, rec.get("server_start"))
                unknown = set(run) - columns
                if unknown:
                    raise ArchiveError(f"{where}:{line}: run columns this store does not have: {sorted(unknown)}")
                cur = tx.execute(f"INSERT INTO runs ({', '.join(run)}) VALUES ({', '.join('?' * len(run))})",
                                 tuple(run.values()))
                rid = int(cur.lastrowid or 0)
                tx.executemany(
                    "INSERT INTO requests (run_id, idx, ok, sent_at, prompt_len, output_len, ttft, latency,"
                    " itl_json, finish_reason, error) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(rid, q["idx"], q["ok"], q.get("sent_at"), q.get("prompt_len"), q.get("output_len"),
                      q.get("ttft"), q.get("latency"), q.get("itl_json", "[]"), q.get("finish_reason"),
                      q.get("error", "")) for q in rec.get("requests") or ()])
                tx.executemany("INSERT INTO gpu_samples (run_id, t, sample_json) VALUES (?,?,?)",
                               [(rid, t, s) for t, s in rec.get("gpu_samples") or ()])
                if run.get("queue_item_id") is not None:  # its item lost the run id when it was pruned
                    tx.execute("UPDATE queue_items SET run_id = ?, error = ltrim(error || '; restored as run ' || ?, '; ')"
                               " WHERE id = ? AND run_id IS NULL", (rid, rid, run["queue_item_id"]))
                restored.append(rid)
            fill_facts(tx, restored)
        return restored, skipped

    # -- prune and give the space back ------------------------------------------------------------
    def delete_runs(self, run_ids: Sequence[int]) -> int:
        """Delete runs (their requests, GPU samples and summaries go by trigger), in one transaction.
        Running runs are refused. A queue item that measured one keeps its state (a done item is never
        re-run) with the note "run N pruned DATE" and no run id (nothing points at a missing run);
        restoring the archive links it again."""
        ids = sorted({int(i) for i in run_ids})
        deleted = 0
        with self.transaction() as tx:
            for chunk in _chunks(ids):
                marks = ",".join("?" * len(chunk))
                running = [r[0] for r in tx.execute(f"SELECT id FROM runs WHERE status = 'running' AND id IN ({marks})",
                                                    chunk)]
                if running:
                    raise ValueError(f"runs {running[:5]} are still running: nothing deleted")
                deleted += tx.execute(f"DELETE FROM runs WHERE id IN ({marks})", chunk).rowcount
        return deleted

    def reclaim(self, *, full: bool = False) -> tuple[int, int]:
        """Give freed pages back to the file system: incremental vacuum where the store was made
        with it, else (or with `full`) VACUUM, which rewrites the file. Returns (bytes before, after)."""
        before = self.file_bytes()
        incremental = int(self.query("PRAGMA auto_vacuum")[0][0]) == 2
        with self._lock:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                if incremental and not full:
                    self._conn.execute("PRAGMA incremental_vacuum")
                else:
                    self._conn.execute("VACUUM")
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:  # SQLite undid it: the store is as it was
                raise StoreError(_reclaim_failed(self.path, exc, full or not incremental)) from None
        return before, self.file_bytes()

    # -- per-request samples for the last N runs --------------------------------------------------
    def keep_samples_runs(self) -> int | None:
        rows = self.query("SELECT value FROM queue_settings WHERE key = ?", (KEEP_SAMPLES_KEY,))
        return int(rows[0][0]) if rows else None

    def set_keep_samples_runs(self, n: int | None) -> None:
        """Keep per-request samples (requests, GPU samples) of the last `n` runs only; None: all."""
        if n is not None and n < 0:
            raise ValueError(f"keep samples for the last N runs: N must be >= 0, got {n}")
        with self.transaction() as tx:
            if n is None:
                tx.execute("DELETE FROM queue_settings WHERE key = ?", (KEEP_SAMPLES_KEY,))
            else:
                tx.execute("INSERT INTO queue_settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE"
                           " SET value = excluded.value", (KEEP_SAMPLES_KEY, str(int(n))))

    def apply_sample_retention(self) -> int:
        """Drop per-request samples of every run older than the last N (the setting); the runs, their
        summaries and flags stay. Returns how many runs lost samples (0 when no setting)."""
        n = self.keep_samples_runs()
        if n is None:
            return 0
        with self.transaction() as tx:
            row = tx.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (max(n - 1, 0),)).fetchone()
            if row is None:
                return 0
            bound = int(row[0]) + (1 if n == 0 else 0)  # runs below it lose their samples
            owners = {r[0] for r in tx.execute("SELECT DISTINCT run_id FROM requests WHERE run_id < ?", (bound,))}
            owners |= {r[0] for r in tx.execute("SELECT DISTINCT run_id FROM gpu_samples WHERE run_id < ?", (bound,))}
            tx.execute(f"UPDATE runs SET stored_bytes = {RUN_BYTES} WHERE stored_bytes IS NOT NULL AND id IN ("
                       "SELECT run_id FROM requests WHERE run_id < ? UNION SELECT run_id FROM gpu_samples"
                       " WHERE run_id < ?)", (bound, bound))  # what is left of them: the run row
            tx.execute("DELETE FROM requests WHERE run_id < ?", (bound,))
            tx.execute("DELETE FROM gpu_samples WHERE run_id < ?", (bound,))
        return len(owners)


def _reclaim_failed(path: Path, exc: sqlite3.Error, rewrite: bool) -> str:
    """Words for a vacuum SQLite gave up on (it rolled back: nothing changed)."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        why = "another process holds the store's lock (a runner, a TUI mid-write, a sqlite3 shell); try again later"
    elif "full" in text or "too large" in text:
        why = ("the disk is full" + (": VACUUM rewrites the whole file and needs about its size free" if rewrite else ""))
    else:
        why = text
    return f"vacuum of store file {path} failed, nothing changed: {why} ({text})"


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield list(ids[i:i + _CHUNK])


def _read_archive(lines: Iterable[str], where: str) -> list[tuple[int, dict[str, Any]]]:
    records: list[tuple[int, dict[str, Any]]] = []
    header: dict[str, Any] | None = None
    for n, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ArchiveError(f"{where}:{n}: not JSON ({exc.msg})") from None
        except RecursionError:  # a line of 100,000 brackets: no record is shaped like that
            raise ArchiveError(f"{where}:{n}: JSON nested too deeply to be a moe-tui archive record") from None
        if header is None:
            if not isinstance(value, dict) or value.get("kind") != ARCHIVE_KIND:
                raise ArchiveError(f"{where}:{n}: not a moe-tui archive (no {ARCHIVE_KIND!r} header)")
            if not isinstance(value.get("schema"), int) or value["schema"] > SCHEMA_VERSION:
                raise ArchiveError(f"{where}:{n}: archive schema {value.get('schema')!r} is newer than this "
                                   f"moe-tui's ({SCHEMA_VERSION})")
            header = value
            continue
        run = value.get("run") if isinstance(value, dict) else None
        if not isinstance(run, dict) or not isinstance(run.get("id"), int) or not all(
                isinstance(run.get(k), str) for k in ("profile_name", "fingerprint", "spec_json", "status")):
            raise ArchiveError(f"{where}:{n}: a run record needs run.id, profile_name, fingerprint, spec_json, status")
        if not all(isinstance(k, str) and k.isidentifier() for k in run):
            raise ArchiveError(f"{where}:{n}: run column names must be plain names")
        for key in ("requests", "gpu_samples"):
            if not isinstance(value.get(key) or [], list):
                raise ArchiveError(f"{where}:{n}: {key} must be a list")
        _check_json_text(run, where, n, "run")
        _check_times(run, where, n)
        for q in value.get("requests") or ():
            if not isinstance(q, dict) or not isinstance(q.get("idx"), int):
                raise ArchiveError(f"{where}:{n}: a request needs an idx")
            _check_json_text(q, where, n, f"request {q['idx']}")
        for sample in value.get("gpu_samples") or ():
            if not (isinstance(sample, list) and len(sample) == 2 and _sane_time(sample[0])):
                raise ArchiveError(f"{where}:{n}: a GPU sample is [t, sample_json], t a time in seconds "
                                   f"between 0 and {MAX_TIME_S:g}")
            _check_json_text({"sample_json": sample[1]}, where, n, "GPU sample")
        records.append((n, value))
    if header is None:
        raise ArchiveError(f"{where}: empty file, not a moe-tui archive")
    return records


def _mark_restored(run: dict[str, Any], where: str, line: int) -> None:
    """A restored run is an import wherever it appears: an archive is a file anyone can edit (10x
    the throughput, flags removed), so what comes back is never passed off as measured here. Its
    `source` becomes "import" (exports, the imported-run index) and its provenance names the file
    (`source_file`, what the grid and run details read as "imported") and what it was before."""
    try:
        provenance = json.loads(run.get("provenance_json") or "{}")
    except ValueError:
        provenance = {}
    if not isinstance(provenance, dict):
        provenance = {"archived_provenance": provenance}
    provenance["source_file"] = where
    provenance["restored_from"] = {"file": where, "line": line, "id": run.get("id"),
                                   "source": provenance.get("restored_from", {}).get("source", run.get("source"))
                                   if isinstance(provenance.get("restored_from"), dict) else run.get("source")}
    run["provenance_json"] = json.dumps(provenance, allow_nan=True)
    run["source"] = "import"


# Times are Unix seconds: anything past this (the year 2286) or not finite is not a time moe-tui
# wrote, and would break every date a reader formats (1e308 ends in OverflowError).
MAX_TIME_S = 1e10


def _sane_time(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= MAX_TIME_S)


def _check_times(run: Mapping[str, Any], where: str, line: int) -> None:
    """A run's `*_at` columns are None or sane times (created_at must be one)."""
    for key, value in run.items():
        if key.endswith("_at") and not (value is None and key != "created_at") and not _sane_time(value):
            raise ArchiveError(f"{where}:{line}: run {key} {str(value)[:40]} is not a time in seconds "
                               f"between 0 and {MAX_TIME_S:g}")


def _check_json_text(row: Mapping[str, Any], where: str, line: int, what: str) -> None:
    """Columns the store decodes on every read (`*_json`) must hold JSON text, or a restored run
    would break every later read of it."""
    for key, text in row.items():
        if not key.endswith("_json"):
            continue
        try:
            json.loads(text if isinstance(text, str) else "\u0000")
        except (TypeError, ValueError, RecursionError):
            raise ArchiveError(f"{where}:{line}: {what} {key} is not JSON text (or nested too deeply)") from None


_START_COLUMNS = ("profile_name", "profile_json", "argv_json", "env_json", "log_path", "pid", "started_at",
                  "ready_at", "stopped_at", "state", "reason", "resolved_backend", "backend_mismatch",
                  "sglang_version", "server_info_json", "model_info_json", "exit_code", "exit_signal", "log_tail")


def _restore_start(tx: _Tx, start: Mapping[str, Any] | None) -> int | None:
    """The archived server start's id here: the same row when this store still has it, else a new
    row with the archived columns (so a run's server start, the grid's unit, is never lost)."""
    if not isinstance(start, Mapping) or not isinstance(start.get("id"), int):
        return None
    here = tx.execute("SELECT id FROM server_starts WHERE id = ? AND profile_name = ? AND started_at = ?",
                      (start["id"], start.get("profile_name"), start.get("started_at"))).fetchone()
    if here is not None:
        return int(here[0])
    same = tx.execute("SELECT id FROM server_starts WHERE profile_name = ? AND started_at = ?",
                      (start.get("profile_name"), start.get("started_at"))).fetchone()
    if same is not None:  # restored earlier, under a new id
        return int(same[0])
    values = [start.get(c) for c in _START_COLUMNS]
    cur = tx.execute(f"INSERT INTO server_starts ({', '.join(_START_COLUMNS)}) VALUES ({', '.join('?' * len(values))})",
                     values)
    return int(cur.lastrowid or 0)
