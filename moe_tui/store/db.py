"""The store: one SQLite file (WAL mode) holding everything moe-tui measured and decided.

Tables: server starts, runs (spec JSON + fingerprint, profile snapshot, provenance, summary
metrics, status, flags), per-request records, GPU samples, campaigns and queue items. The schema
carries a version (`PRAGMA user_version`) and upgrades through ordered migrations. Every write is
one transaction, so a crash or a failed disk write leaves the previous state intact; failures
surface as `StoreError` naming the file. Run writes and reads live in the `moe_tui.store.runs`
mixin; archives in `moe_tui.store.archive`; server-start and gate-sample records in the
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

Integrity: a writable open after an unclean stop (or of a file changed since moe-tui last closed
it: `moe_tui.store.cleanstop`) runs `PRAGMA quick_check` first and refuses a damaged file
(`StoreDamaged`, with the recovery hint); other opens pay no pass over the file. One checked
backup is kept beside it (`moe_tui.store.backup`), which `moe-tui doctor --repair` restores
(`moe_tui.store.integrity`). A store owned by another user is refused for writing.

Owner-only: the store, its WAL and SHM are 0600 (created under an 0077 umask, tightened if an
older version left them looser). A store the user cannot write (read-only file or folder, a
read-only mount) opens read-only: reads work, every write raises `StoreReadOnly` naming the file.
"""

from __future__ import annotations

import atexit
import os
import random
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from moe_tui.store import cleanstop
from moe_tui.store.archive import ArchiveRecords
from moe_tui.store.errors import StoreBusy, StoreError, StoreReadOnly
from moe_tui.store.records import StartAndGateRecords, _dump, _json_default, _server_start_dict  # noqa: F401  (re-exported)
from moe_tui.store.retention import RetentionRecords
from moe_tui.store.runs import RUN_STATUSES as RUN_STATUSES  # re-exported
from moe_tui.store.runs import RunRecord as RunRecord  # re-exported
from moe_tui.store.runs import RunRecords
from moe_tui.store.schema import _MIGRATIONS, SCHEMA_VERSION, _split_sql, _Tx  # noqa: F401  (re-exported)
from moe_tui.store.summaries import RunSummary, SummaryRecords, fill_facts  # noqa: F401  (re-exported)

DEFAULT_BUSY_TIMEOUT_S = 30.0
DEFAULT_WRITE_RETRY_S = 120.0
BUSY_ENV = "MOE_TUI_STORE_BUSY_TIMEOUT_S"
RETRY_ENV = "MOE_TUI_STORE_WRITE_RETRY_S"


# Writable handles still open: closed at interpreter exit (a TUI that quits without closing its
# store would otherwise look like an unclean stop, and the next start would check the whole file).
_OPEN: weakref.WeakSet[Store] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for store in list(_OPEN):
        store.close(wait_s=1.0)  # a thread stuck holding the lock: left open, checked next time


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

class Store(RunRecords, StartAndGateRecords, RetentionRecords, ArchiveRecords, SummaryRecords):
    """A handle on the SQLite store. Thread-safe: one connection guarded by a lock."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float | None = None,
                 write_retry_s: float | None = None, readonly: bool | None = None, writer: bool = False):
        """`writer`: this is the runner's handle, the one whose open checks the file after the runner
        before it stopped uncleanly (`store.cleanstop`)."""
        self.path = Path(path)
        self._lock = threading.RLock()
        self._commits = 0
        self.busy_timeout_s = (_seconds_from_env(BUSY_ENV, DEFAULT_BUSY_TIMEOUT_S)
                               if busy_timeout_s is None else busy_timeout_s)
        self.write_retry_s = (_seconds_from_env(RETRY_ENV, DEFAULT_WRITE_RETRY_S)
                              if write_retry_s is None else write_retry_s)
        self.readonly = self._cannot_write() if readonly is None else readonly
        self.readonly_why = ""  # why a writable-looking store was opened read-only (open_default)
        self._closed = False
        # Why this open ran quick_check ("" when it did not: no unclean stop since the last check).
        self.integrity_checked = ""
        if not self.readonly:  # another user's store is never written; nor a damaged one (below)
            from moe_tui.store.integrity import refuse_damaged, refuse_foreign

            refuse_foreign(self.path)
            self.integrity_checked = cleanstop.check_reason(self.path, writer=writer)
        try:
            if not self.readonly:
                os.umask(os.umask(0o077) | 0o077)  # store, WAL, SHM: owner only
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._conn = self._connect()
            if not self.readonly:
                if self.integrity_checked:  # PRAGMA quick_check before any write, after an unclean stop
                    refuse_damaged(self._conn, self.path)
                self._migrate()
                for suffix in ("", "-wal", "-shm"):
                    _tighten(Path(str(self.path) + suffix))
                cleanstop.opened(self.path, writer=writer)
                _OPEN.add(self)
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
            # This SQLite zeroes every freed page (built with SECURE_DELETE): pruning half a 10k store
            # wrote 409 MB of WAL for it; FAST zeroes only what costs no extra write (277 MB, 30% faster).
            conn.execute("PRAGMA secure_delete = FAST")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _check_schema(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise StoreError(f"store file {self.path} is read-only and has schema {version}; this moe-tui "
                             f"reads schema {SCHEMA_VERSION} (open it once writable to upgrade it)")

    @classmethod
    def open_default(cls, *, writer: bool = False) -> Store:
        """This user's store (`writer`: the runner's, see `__init__`). A data dir that cannot be
        written but holds a store opens it read-only (reads work, writes are refused naming the file)."""
        from moe_tui.paths import DataDirError, store_path

        try:
            return cls(store_path(), writer=writer)
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

    def close(self, *, wait_s: float = -1) -> None:
        """Close the connection (its checkpoint folds the WAL into the file), then, for a writable
        handle, say so to `cleanstop`. `wait_s`: how long to wait for the lock (-1: as long as it takes)."""
        if not self._lock.acquire(timeout=wait_s):
            return  # left open: the next open checks the file, as after any unclean stop
        try:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
        finally:
            self._lock.release()
        _OPEN.discard(self)
        if not self.readonly:  # after the close: its checkpoint is what the clean stamp records
            cleanstop.closed(self.path)

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
