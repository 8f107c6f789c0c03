"""One checked backup of the store beside it, `<store>.backup`, which `moe-tui doctor --repair` restores.

A backup copies the whole file (SQLite's online backup API, in one step from a connection of its
own: a consistent snapshot while the runner keeps writing, since in WAL mode a reader never blocks
a writer, and no lock of the `Store` handle is held, so the runner's own reads and writes go on).
The copy is written to a new file (`mkstemp`: O_EXCL, owner-only), passes `quick_check`, and only
then replaces the one backup kept: the disk holds the store and one backup, plus the copy while it
is being taken (the free space for it is checked first). A `.backup.prev` an older moe-tui kept is
removed once a new backup is in place.

When: on demand (`moe-tui store backup`, `moe-tui doctor --backup`), and by the runner at safe
points once the last backup is older than `backup_every_s()` (a day by default,
MOE_TUI_BACKUP_EVERY_H hours; 0 turns the runner's backups off). Each says its size and how long it took.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from moe_tui.store.errors import StoreError
from moe_tui.store.schema import StoreAccess

BACKUP_SUFFIX = ".backup"
BACKUP_EVERY_S = 24 * 3600.0
EVERY_ENV = "MOE_TUI_BACKUP_EVERY_H"
SPACE_MARGIN = 64 * 1024**2


def backup_path(store_path: Path) -> Path:
    return Path(str(store_path) + BACKUP_SUFFIX)


def backup_every_s() -> float | None:
    """How old the backup may grow before the runner takes a new one; None: the runner takes none."""
    raw = os.environ.get(EVERY_ENV)
    if not raw:
        return BACKUP_EVERY_S
    try:
        hours = float(raw)
    except ValueError:
        raise StoreError(f"{EVERY_ENV}={raw!r}: a number of hours is expected (0: no automatic backup)") from None
    if not hours >= 0:
        raise StoreError(f"{EVERY_ENV}={raw!r}: must be >= 0 hours (0: no automatic backup)")
    return hours * 3600.0 if hours > 0 else None


@dataclass(frozen=True)
class Backup:
    """A backup taken: where, its size, and how long it took."""

    path: Path
    bytes: int
    seconds: float

    def words(self) -> str:
        return f"backup {self.path}: {self.bytes / 1e6:,.1f} MB in {self.seconds:.1f} s (one copy kept)"


def take_backup(store_path: Path, *, busy_timeout_s: float = 30.0) -> Backup:
    """A checked backup of the store file at `store_path`, replacing the one kept. Raises OSError
    or sqlite3.Error saying why; the backup kept before stays then, and no partial copy is left."""
    t0 = time.monotonic()
    target = backup_path(store_path)
    need = os.stat(store_path).st_size + SPACE_MARGIN
    free = shutil.disk_usage(store_path.parent).free
    if free < need:
        raise OSError(f"a backup needs about {need / 1e9:,.2f} GB free in {store_path.parent}, "
                      f"which has {free / 1e9:,.2f} GB")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=store_path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        src = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True, timeout=busy_timeout_s)
        dst = sqlite3.connect(str(tmp))
        try:
            src.backup(dst)  # one step: one read snapshot, restarted by no commit of another connection
            rows = dst.execute("PRAGMA quick_check(20)").fetchall()
        finally:
            dst.close()
            src.close()
        problems = [str(r[0]) for r in rows]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"the backup copy failed its check: {'; '.join(problems[:3])}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        Path(str(target) + ".prev").unlink(missing_ok=True)  # one copy kept (older versions kept two)
    return Backup(target, target.stat().st_size, time.monotonic() - t0)


def backup_store(store: StoreAccess, *, if_older_than_s: float | None = None) -> Backup | None:
    """A checked backup of the open `Store`'s file; with `if_older_than_s`, only when the last is
    older. Returns what was taken, or None when none was due. Raises StoreError."""
    if if_older_than_s is not None and not backup_due(store.path, if_older_than_s):
        return None
    try:
        return take_backup(store.path)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"backup of store file {store.path} failed, the one kept before stays: {exc}") from None


def backup_due(store_path: Path, every_s: float = BACKUP_EVERY_S) -> bool:
    try:
        return time.time() - backup_path(store_path).stat().st_mtime >= every_s
    except OSError:
        return True


def backup_words(store_path: Path) -> str:
    """The backup kept: its size and age, or that there is none."""
    target = backup_path(store_path)
    try:
        st = target.stat()
    except OSError:
        return f"backup {target}: none yet (`moe-tui store backup` takes one)"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(st.st_mtime))
    return f"backup {target}: {st.st_size / 1e6:,.1f} MB, taken {when} ({(time.time() - st.st_mtime) / 3600:.1f} h ago)"
