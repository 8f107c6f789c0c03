"""Archives: runs written out as JSON lines that `moe-tui import` restores with nothing lost.

The file is a header line (`ARCHIVE_KIND`, the schema, the count), then one line per run with every
column, its requests, its GPU samples and the server start that measured it. Writing streams one run
at a time; so does restoring (`restore_archive`): every line is checked as it is read (JSON depth,
JSON-text columns, sane times, plain column names) and inserted in ONE transaction, so a bad line
anywhere leaves the store as it was, and memory holds one record, not the archive (a 2 GB archive
took 2.65 GB when it was read whole first). A run already in the store (same profile, fingerprint
and creation time) is skipped: importing an archive twice stores nothing twice. What is restored
is marked an import wherever it appears (an archive is a file anyone can edit).

`ArchiveRecords` is a mixin of `moe_tui.store.db.Store` (what it uses is `store.schema.StoreAccess`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from moe_tui.records import ArchiveLine
from moe_tui.store.schema import SCHEMA_VERSION, StoreAccess, _Tx
from moe_tui.store.summaries import fill_facts

ARCHIVE_KIND = "moe-tui-archive"
_FACTS_BATCH = 500  # restored runs whose grid facts are computed together
# The longest archive line read (one run with its per-request samples: 3.9 MB at the default spec,
# 15 MB for the largest real runs): a longer one (a file with no newlines) is refused, not read whole.
MAX_LINE_CHARS = 64 * 1024**2


class ArchiveError(ValueError):
    """An archive file that cannot be restored; the message names the file and line."""


class _RunsHere:
    """Which runs the store already has, by (profile, fingerprint, creation time): read once per
    (profile, fingerprint) pair the archive names, not once per line (a baseline of 50,000 runs
    shares a handful of fingerprints, so a per-line look-up would walk them all each time)."""

    def __init__(self, tx: _Tx):
        self._tx = tx
        self._pairs: dict[tuple[str, str], dict[Any, int]] = {}

    def _pair(self, profile: str, fingerprint: str) -> dict[Any, int]:
        key = (profile, fingerprint)
        if key not in self._pairs:
            self._pairs[key] = {r[1]: int(r[0]) for r in self._tx.execute(
                "SELECT id, created_at FROM runs WHERE profile_name = ? AND fingerprint = ?", key)}
        return self._pairs[key]

    def find(self, profile: str, fingerprint: str, created_at: Any) -> int | None:
        return self._pair(profile, fingerprint).get(created_at)

    def add(self, profile: str, fingerprint: str, created_at: Any, run_id: int) -> None:
        self._pair(profile, fingerprint)[created_at] = run_id


class ArchiveRecords(StoreAccess):
    """Archive writing and streaming restore (mixed into Store)."""

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
        time) is skipped. The lines are read one at a time (an archive of 50,000 runs is never held
        whole): each is checked and inserted, and a bad one anywhere rolls back every one before it.
        Returns (restored ids, skipped ids). Raises ArchiveError naming the file and line."""
        restored: list[int] = []
        skipped: list[int] = []
        unfilled: list[int] = []
        with self.transaction() as tx:
            columns = {r[1] for r in tx.execute("PRAGMA table_info(runs)")}
            here = _RunsHere(tx)
            for line, rec in _records(lines, where):
                run = dict(rec["run"])
                same = here.find(run["profile_name"], run["fingerprint"], run.get("created_at"))
                if same is not None:  # restored before, or never pruned
                    skipped.append(same)
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
                here.add(run["profile_name"], run["fingerprint"], run.get("created_at"), rid)
                restored.append(rid)
                unfilled.append(rid)
                if len(unfilled) >= _FACTS_BATCH:  # facts as we go: no list of every record's rows
                    fill_facts(tx, unfilled)
                    unfilled.clear()
            fill_facts(tx, unfilled)
        return restored, skipped


def archive_lines(fh: IO[str], where: str, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines of an open archive, each at most `limit` characters (ArchiveError past it)."""
    n = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        n += 1
        if len(line) > limit and not line.endswith("\n"):
            raise ArchiveError(f"{where}:{n}: a line longer than {limit / 1024**2:g} MB: not a moe-tui archive record")
        yield line


def _records(lines: Iterable[str], where: str) -> Iterator[tuple[int, ArchiveLine]]:
    """The archive's run records, one line at a time, each checked before it is yielded (the
    header first: nothing is yielded from a file that is not an archive)."""
    header: ArchiveLine | None = None
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
        yield n, value
    if header is None:
        raise ArchiveError(f"{where}: empty file, not a moe-tui archive")


def _mark_restored(run: ArchiveLine, where: str, line: int) -> None:
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
