"""When a writable open must check the store's integrity: after an unclean stop, not every time.

`PRAGMA quick_check` reads the whole file: 4.7 s warm and 46.6 s cold at 5 GB. It ran on every
writable open, so the TUI and then its runner each paid it on every start and every re-attach.
SQLite in WAL mode survives a killed process by itself; a check is worth its cost only when the
file may have been left or changed by something other than a clean close. So:

- every process that opens the store for writing leaves a marker `<store>.open/<pid>` (holding
  the process's start time, so a reused pid is not taken for it) and removes it when its last
  handle closes;
- the process that closes last, finding no other marker, writes `<store>.clean`: the file's
  identity, size and mtime as it left them;
- an open checks when a marker's process is gone (it stopped without closing: killed, crashed,
  power lost), or when no other process has the store open and the file is not as the last clean
  close left it (no stamp yet, restored, edited by another tool, bytes changed on disk). A store
  another live process has open was checked by that process's open, and a process that has it
  open already does not check again (the TUI and an in-process controller share one check).

Missing or unwritable markers only ever cause a check, never skip one. Owner-only like the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

OPEN_SUFFIX = ".open"
CLEAN_SUFFIX = ".clean"

_lock = threading.Lock()
_held: dict[str, int] = {}  # store path -> handles this process has open for writing


def _key(path: Path) -> str:
    return str(path.resolve())


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def _identity(path: Path) -> dict[str, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    wal = Path(str(path) + "-wal")
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "wal": wal.stat().st_size if wal.exists() else 0}


def _markers(path: Path) -> tuple[list[Path], list[Path]] | None:
    """(live markers of other processes, stale markers); None when the folder is not ours."""
    folder = Path(str(path) + OPEN_SUFFIX)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return [], []
    except OSError:
        return None
    if not os.path.isdir(folder) or os.path.islink(folder) or st.st_uid != os.getuid():
        return None
    live: list[Path] = []
    stale: list[Path] = []
    for marker in folder.iterdir():
        try:
            pid = int(marker.name)
            started = float(marker.read_text(encoding="ascii").strip() or "nan")
        except (ValueError, OSError):
            stale.append(marker)
            continue
        if pid == os.getpid():
            continue
        now = _start_time(pid)
        (live if now is not None and abs(now - started) < 1.0 else stale).append(marker)
    return live, stale


def check_reason(path: Path) -> str:
    """Why this writable open must run `quick_check` first; "" when it need not."""
    if not path.exists():
        return ""  # a new store
    with _lock:
        if _held.get(_key(path), 0) > 0:
            return ""  # this process has it open (and checked it, or found no need) already
    found = _markers(path)
    if found is None:
        return f"its open markers ({path}{OPEN_SUFFIX}) are not this user's folder"
    live, stale = found
    if stale:
        return f"a process that had it open stopped without closing it (pid {stale[0].name})"
    if live:
        return ""  # a running process opened it after the last check
    try:
        stamp = json.loads(Path(str(path) + CLEAN_SUFFIX).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return "no record of a clean close"
    if stamp != _identity(path):
        return "the file is not as the last clean close left it"
    return ""


def opened(path: Path) -> None:
    """This process has the store open for writing (one more handle); stale markers are dropped
    (call only after a passing check or when none was needed)."""
    key = _key(path)
    with _lock:
        _held[key] = _held.get(key, 0) + 1
        if _held[key] > 1:
            return
    folder = Path(str(path) + OPEN_SUFFIX)
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        found = _markers(path)
        for marker in found[1] if found else ():
            marker.unlink(missing_ok=True)
        started = _start_time(os.getpid())
        _write(folder / str(os.getpid()), f"{started}\n")


def closed(path: Path) -> None:
    """One handle of this process closed; the last one removes its marker and, when no other
    process has the store open, stamps the file as cleanly closed."""
    key = _key(path)
    with _lock:
        left = _held.get(key, 0) - 1
        if left > 0:
            _held[key] = left
            return
        _held.pop(key, None)
    with contextlib.suppress(OSError):
        (Path(str(path) + OPEN_SUFFIX) / str(os.getpid())).unlink(missing_ok=True)
        found = _markers(path)
        if found is None or found[0] or found[1]:
            return  # another process has it open, or one stopped uncleanly: no stamp
        identity = _identity(path)
        if identity is not None:
            _write(Path(str(path) + CLEAN_SUFFIX), json.dumps(identity, sort_keys=True))


def forget(path: Path) -> None:
    """The clean stamp no longer holds (the file is about to be replaced): the next open checks."""
    with contextlib.suppress(OSError):
        Path(str(path) + CLEAN_SUFFIX).unlink(missing_ok=True)


def _write(target: Path, text: str) -> None:
    """`text` into `target`, whole or not at all, never through a link planted at its name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
