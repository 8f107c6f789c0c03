"""The store's health: a quick integrity check at open, and restoring from the backup.

- `quick_check(conn)`: SQLite's `PRAGMA quick_check` (every page and b-tree, not the indices'
  contents: linear in the file, about a second per few hundred MB). `Store` runs it on a writable
  open after an unclean stop (`store.cleanstop` says when) and refuses to write into a damaged
  file (`StoreDamaged`, with the recovery hint), so a corrupted page is never built on.
- The one backup kept beside the store is taken by `store.backup` (re-exported here).
- `restore(store_path)` (`moe-tui doctor --repair`): moves the damaged file (and its WAL/SHM)
  aside under a name no earlier repair took, puts the backup's copy in its place, and says what
  was lost: the runs, queue items and campaigns the damaged file still lets us read beyond the
  backup's, or that it could not tell.
- `full_check(path)` (`moe-tui doctor`): `integrity_check`, telling a store another process holds
  locked (`StoreLocked`, naming who has it open: `holders`) from a damaged one.

Files are owner-only (0600) like the store. No Textual, no controller: the core.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui.store.backup import BACKUP_EVERY_S as BACKUP_EVERY_S  # re-exported
from moe_tui.store.backup import BACKUP_SUFFIX as BACKUP_SUFFIX  # re-exported
from moe_tui.store.backup import backup_path as backup_path  # re-exported
from moe_tui.store.backup import backup_store as backup_store  # re-exported

# quick_check lists at most this many problems (the first ones say enough).
CHECK_MAX_PROBLEMS = 20


def quick_check(conn: sqlite3.Connection, *, full: bool = False) -> list[str]:
    """Problems found by `PRAGMA quick_check` (or the slower `integrity_check` with `full`); empty
    when the file is sound. A file SQLite cannot even read gives its error as the one problem."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = conn.execute(f"PRAGMA {pragma}({CHECK_MAX_PROBLEMS})").fetchall()
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    problems = [str(r[0]) for r in rows]
    return [] if problems == ["ok"] else problems


def is_lock_error(exc: BaseException) -> bool:
    """SQLite said busy or locked: another connection holds the file, which says nothing about
    its health (a store held in exclusive mode must never be called damaged, let alone replaced)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return True
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


class StoreLocked(Exception):
    """Another process holds the store file's lock: its health cannot be checked now."""


def full_check(path: Path, *, busy_timeout_s: float = 5.0) -> list[str]:
    """`integrity_check` of the store file at `path`, read-only: its problems, empty when sound.
    Raises StoreLocked (naming who has the file open, where that can be seen) when another
    process holds its lock past `busy_timeout_s`: locked is not damaged."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=busy_timeout_s)
    try:
        rows = conn.execute(f"PRAGMA integrity_check({CHECK_MAX_PROBLEMS})").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_lock_error(exc):
            raise StoreLocked(f"{exc}{holders_words(path)}") from None
        return [str(exc)]
    finally:
        conn.close()
    problems = [str(r[0]) for r in rows]
    return [] if problems == ["ok"] else problems


def holders(path: Path) -> list[str]:
    """Other processes (of those this user may inspect) that have the store file, its WAL or SHM
    open, as "pid N (name)". A store one of them holds is never replaced under it."""
    import psutil

    try:
        wanted = {(st.st_dev, st.st_ino) for suffix in ("", "-wal", "-shm")
                  if (st := _stat_or_none(Path(str(path) + suffix))) is not None}
    except OSError:
        return []
    found: list[str] = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.info["pid"] == os.getpid():
            continue
        try:
            files = proc.open_files()
        except (psutil.Error, OSError):
            continue
        for f in files:
            st = _stat_or_none(Path(f.path))
            if st is not None and (st.st_dev, st.st_ino) in wanted:
                found.append(f"pid {proc.info['pid']} ({proc.info['name']})")
                break
    return found


def holders_words(path: Path) -> str:
    who = holders(path)
    return f"; held open by {', '.join(who[:5])}" if who else ""


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def refuse_damaged(conn: sqlite3.Connection, path: Path) -> None:
    """Raise StoreDamaged (closing `conn`) when the file fails `quick_check`: never written into."""
    from moe_tui.store.errors import StoreDamaged

    problems = quick_check(conn)
    if problems:
        conn.close()
        raise StoreDamaged(damaged_message(path, problems))


def refuse_foreign(path: Path) -> None:
    """Raise StoreError when another user owns the store file (they could rewrite any result in it)."""
    from moe_tui.store.errors import StoreError

    uid = path.stat().st_uid if path.exists() else os.getuid()
    if uid != os.getuid():
        raise StoreError(f"store file {path} belongs to uid {uid}, not to you (uid {os.getuid()}); "
                         f"refusing to write into it: copy it to a data dir of your own")


def damaged_message(path: Path, problems: list[str]) -> str:
    """What is wrong and what to do, for the error that refuses a write."""
    backup = backup_path(path)
    when = _age_words(backup)
    hint = (f"`moe-tui doctor --repair` restores the backup {backup} ({when}) and lists what is lost"
            if when else f"there is no backup ({backup} missing); copy the file aside and start a new store, "
                         f"or try `sqlite3 {path} .recover`")
    return (f"store file {path} is damaged ({'; '.join(problems[:3])}): refusing to write into it, nothing "
            f"changed; {hint}")


def _age_words(path: Path) -> str:
    try:
        taken = path.stat().st_mtime
    except OSError:
        return ""
    return f"taken {time.strftime('%Y-%m-%d %H:%M', time.localtime(taken))}, {(time.time() - taken) / 3600:.1f} h ago"


@dataclass
class Restored:
    """What `restore` did: where the damaged file went, and what it held that the backup lacks."""

    damaged_to: Path
    backup: Path
    backup_runs: int
    lost_lines: list[str] = field(default_factory=list)


def _counts(conn: sqlite3.Connection) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in ("runs", "queue_items", "campaigns", "server_starts"):
        try:
            out[table] = conn.execute(f"SELECT COUNT(*), MAX(id) FROM {table}").fetchone()
        except sqlite3.Error as exc:
            out[table] = exc
    return out


def lost_since_backup(damaged: Path, backup: Path) -> list[str]:
    """Lines naming what the damaged file holds beyond the backup, as far as it can still be read."""
    lines: list[str] = []
    b = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    d = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
    try:
        have, had = _counts(b), _counts(d)
        for table in ("runs", "queue_items", "campaigns", "server_starts"):
            kept, old = have[table], had[table]
            if isinstance(old, Exception):
                lines.append(f"{table}: the damaged file cannot be read ({old}); what it held after the backup "
                             f"is unknown")
                continue
            kept_max = (kept[1] or 0) if not isinstance(kept, Exception) else 0
            if (old[1] or 0) > kept_max:
                lines.append(f"{table}: ids {kept_max + 1}..{old[1]} are not in the backup")
        if not isinstance(had["runs"], Exception):
            kept_max = (have["runs"][1] or 0) if not isinstance(have["runs"], Exception) else 0
            try:
                for rid, name, status, finished in d.execute(
                        "SELECT id, profile_name, status, finished_at FROM runs WHERE id > ? ORDER BY id LIMIT 50",
                        (kept_max,)):
                    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(finished)) if finished else "unfinished"
                    lines.append(f"  lost run {rid}: {name} ({status}, {when})")
            except sqlite3.Error as exc:
                lines.append(f"  the lost runs cannot be listed: {exc}")
            try:
                changed = d.execute("SELECT COUNT(*) FROM queue_items").fetchone()[0]
                lines.append(f"queue items: {changed} in the damaged file; the backup's states are restored")
            except sqlite3.Error:
                pass
    finally:
        b.close()
        d.close()
    return lines or ["nothing readable in the damaged file is missing from the backup"]


def _free_aside_name(store_path: Path) -> Path:
    """`<store>.damaged-<time>`, with a counter when a repair in the same second took that name:
    the file a repair replaces is always kept, never overwritten by the next repair's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        aside = Path(f"{store_path}.damaged-{stamp}" + (f"-{n}" if n else ""))
        if not any(os.path.lexists(f"{aside}{suffix}") for suffix in ("", "-wal", "-shm")):
            return aside
    raise RuntimeError(f"no free name for keeping {store_path} aside (1000 repairs this second?)")


def restore(store_path: Path, backup: Path | None = None) -> Restored:
    """Replace a damaged store by its backup (checked first; default `<store>.backup`). The damaged
    file and its WAL/SHM are kept beside it as `<store>.damaged-<time>`. Raises RuntimeError saying why not."""
    backup = backup or backup_path(store_path)
    if not backup.exists():
        raise RuntimeError(f"no backup at {backup}: nothing to restore from")
    b = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    try:
        problems = quick_check(b)
        runs = b.execute("SELECT COUNT(*) FROM runs").fetchone()[0] if not problems else 0
    finally:
        b.close()
    if problems:
        raise RuntimeError(f"the backup {backup} is damaged too ({'; '.join(problems[:3])}); nothing changed: try "
                           f"`sqlite3 {store_path} .recover`")
    aside = _free_aside_name(store_path)
    if store_path.exists():
        lost = lost_since_backup(store_path, backup)
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(store_path) + suffix)
            if src.exists():
                os.replace(src, Path(str(aside) + suffix))
    else:
        lost = ["the store file was missing: everything after the backup is lost"]
    src_conn = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
    fd = os.open(store_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    dst = sqlite3.connect(str(store_path))
    try:
        src_conn.backup(dst)
    finally:
        dst.close()
        src_conn.close()
    return Restored(damaged_to=aside, backup=backup, backup_runs=runs, lost_lines=lost)
