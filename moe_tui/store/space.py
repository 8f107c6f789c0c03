"""Giving a store's freed pages back to the file system, and saying how much came back.

A store made by moe-tui has `auto_vacuum = INCREMENTAL`: deleted rows leave free pages that
`PRAGMA incremental_vacuum` moves to the end of the file and truncates away, one page per step
of the statement. Python's `execute` steps a statement whose result has no columns once (even
`fetchall` sees no rows): it frees one 4 KB page. `executescript` steps every statement to its
end, so the pragma runs through it here. In WAL mode the truncation reaches the file at the next checkpoint, which is run
(TRUNCATE) before and after.

A store made before auto_vacuum (or `full`) needs `VACUUM`, which rewrites the whole file through
a temporary copy and a WAL as large as it: the free space is checked first and a shortfall is
named, never found out halfway (SQLite would undo it, but after minutes of writing).
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from moe_tui.store.errors import StoreError
from moe_tui.store.schema import StoreAccess

# VACUUM writes a copy of the live data and then a WAL of the same size: ask for twice the file's
# data pages plus a margin, where the temporary copy and the WAL live (the store's folder).
VACUUM_SPACE_FACTOR = 2.0
VACUUM_SPACE_MARGIN = 64 * 1024**2


@dataclass(frozen=True)
class Reclaimed:
    """What a reclaim did: the file (with its WAL) before and after, in bytes, and how."""

    before: int
    after: int
    how: str  # "incremental" or "vacuum"

    @property
    def freed(self) -> int:
        return max(0, self.before - self.after)

    def words(self) -> str:
        return (f"{self.before / 1e6:,.1f} MB -> {self.after / 1e6:,.1f} MB on disk, "
                f"{self.freed / 1e6:,.1f} MB freed ({self.how})")


def file_bytes(path: Path) -> int:
    """The store file and its WAL on disk."""
    return sum(p.stat().st_size for p in (path, Path(str(path) + "-wal")) if p.exists())


def reclaim(store: StoreAccess, *, full: bool = False, before: int | None = None) -> Reclaimed:
    """Give the store's free pages back: incremental vacuum stepped to its end where the store was
    made with it, else (or with `full`) VACUUM after a free-space check. `before`: the size to
    report against (taken before a delete, whose WAL would otherwise count as freed). Raises
    StoreError naming the file and why (locked, disk full); SQLite undoes a failed vacuum."""
    before = file_bytes(store.path) if before is None else before
    with store._lock:
        conn = store._conn
        incremental = int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == 2
        rewrite = full or not incremental
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            if rewrite:
                _check_room(store.path, conn)
                conn.execute("VACUUM")
            else:
                # One step frees one page: executescript steps to the end (execute would stop at one).
                conn.executescript("PRAGMA incremental_vacuum;")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:  # SQLite undid it: the store is as it was
            raise StoreError(_failed(store.path, exc, rewrite)) from None
    return Reclaimed(before, file_bytes(store.path), "vacuum" if rewrite else "incremental")


SAMPLE_TABLES = ("requests", "gpu_samples")
QUEUE_TABLES = ("queue_items", "campaigns", "campaign_profiles", "queue_settings")


def bytes_by_kind(store: StoreAccess) -> dict[str, int]:
    """Bytes on disk (pages, indexes included) of what grows: "runs" (run rows, summaries, server
    starts: every run adds to them), "samples" (per-request data: bounded by keep-samples), "queue"
    and "free" (pages `store vacuum` gives back). A walk over every page (SQLite's dbstat): a
    command's read, not a screen's."""
    owner = {r[0]: r[1] for r in store.query("SELECT name, tbl_name FROM sqlite_master")}
    out = {"runs": 0, "samples": 0, "queue": 0, "free": 0}
    for name, size in store.query("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
        table = owner.get(name, name)
        kind = "samples" if table in SAMPLE_TABLES else "queue" if table in QUEUE_TABLES else "runs"
        out[kind] += int(size or 0)
    page = int(store.query("PRAGMA page_size")[0][0])
    out["free"] = int(store.query("PRAGMA freelist_count")[0][0]) * page
    return out


def _check_room(path: Path, conn: sqlite3.Connection) -> None:
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    used = (int(conn.execute("PRAGMA page_count").fetchone()[0])
            - int(conn.execute("PRAGMA freelist_count").fetchone()[0])) * page
    need = int(used * VACUUM_SPACE_FACTOR) + VACUUM_SPACE_MARGIN
    free = shutil.disk_usage(path.parent).free
    if free < need:
        raise StoreError(f"vacuum of store file {path} not started, nothing changed: it rewrites the file and needs "
                         f"about {need / 1e9:,.2f} GB free in {path.parent}, which has {free / 1e9:,.2f} GB")


def _failed(path: Path, exc: sqlite3.Error, rewrite: bool) -> str:
    """Words for a vacuum SQLite gave up on (it rolled back: nothing changed)."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        why = "another process holds the store's lock (a runner, a TUI mid-write, a sqlite3 shell); try again later"
    elif "full" in text or "too large" in text:
        why = "the disk is full" + (": VACUUM rewrites the whole file and needs about its size free" if rewrite else "")
    else:
        why = text
    return f"vacuum of store file {path} failed, nothing changed: {why} ({text})"
