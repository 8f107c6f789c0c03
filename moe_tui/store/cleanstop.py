"""When a writable open must check the store's integrity: after an unclean stop, not every time.

`PRAGMA quick_check` reads the whole file: 4.7 s warm and 46.6 s cold at 5 GB. It ran on every
writable open, so the TUI and then its runner each paid it on every start and every re-attach.

A killed process leaves SQLite's files whole (WAL: the next connection rolls the log back or
forward); what can damage them is the machine stopping (a write cache that lied), a disk or file
system fault, or another program writing the file. So:

- every process that opens the store for writing leaves a marker `<store>.open/<pid>` (its start
  time, so a reused pid is not taken for it; the boot it ran in; whether it is the writer, the
  runner) and removes it when its last handle closes;
- the process that closes last, finding no other marker, writes `<store>.clean`: the file's
  identity, size and mtime as it left them;
- an open checks when a marker is from an earlier boot (the machine stopped with the store open),
  when the writer's marker is from a process that is gone and this open is the writer's (the next
  runner after a runner was killed: once, where it matters), or when no marker is left and the file
  is not as the last clean close left it (no stamp yet, restored, edited by another tool). A
  TUI that died with an SSH drop is no reason for its re-attach to check; a live process holding
  the store was checked at its own open; a process that has it open already does not check again.

Missing or unwritable markers only ever cause a check, never skip one. Owner-only like the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
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


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        import psutil

        return str(int(psutil.boot_time()))


@dataclass(frozen=True)
class _Marker:
    path: Path
    live: bool
    this_boot: bool
    writer: bool


def _markers(path: Path) -> list[_Marker] | None:
    """Other processes' markers; None when the folder is not this user's own."""
    folder = Path(str(path) + OPEN_SUFFIX)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    if not os.path.isdir(folder) or os.path.islink(folder) or st.st_uid != os.getuid():
        return None
    boot = _boot_id()
    found = []
    for marker in folder.iterdir():
        try:
            pid = int(marker.name)
            info = json.loads(marker.read_text(encoding="ascii"))
            started, its_boot, writer = float(info["started"]), str(info["boot"]), bool(info["writer"])
        except (ValueError, OSError, KeyError, TypeError):
            continue  # not one of ours (or half-written): it proves nothing either way
        if pid == os.getpid():
            continue
        now = _start_time(pid) if its_boot == boot else None
        found.append(_Marker(marker, now is not None and abs(now - started) < 1.0, its_boot == boot, writer))
    return found


def check_reason(path: Path, *, writer: bool = False) -> str:
    """Why this writable open (the runner's when `writer`) must run `quick_check` first; "" when not."""
    if not path.exists():
        return ""  # a new store
    with _lock:
        if _held.get(_key(path), 0) > 0:
            return ""  # this process has it open (and checked it, or found no need) already
    found = _markers(path)
    if found is None:
        return f"its open markers ({path}{OPEN_SUFFIX}) are not this user's own folder"
    if any(not m.this_boot for m in found):
        return "the machine stopped while a process had it open"
    if writer and any(m.writer and not m.live for m in found):
        return "the runner that had it open stopped without closing it"
    if found:
        return ""  # in moe-tui's hands since the last check (a process's death leaves the file whole)
    try:
        stamp = json.loads(Path(str(path) + CLEAN_SUFFIX).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return "no record of a clean close"
    if stamp != _identity(path):
        return "the file is not as the last clean close left it"
    return ""


def opened(path: Path, *, writer: bool = False) -> None:
    """This process has the store open for writing (one more handle); markers of processes gone are
    dropped (call only after a passing check or when none was needed): a dead runner's only by the
    writer, whose open is the one that checks after it."""
    key = _key(path)
    with _lock:
        _held[key] = _held.get(key, 0) + 1
        first = _held[key] == 1
    if not first and not writer:
        return
    folder = Path(str(path) + OPEN_SUFFIX)
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, exist_ok=True)
        for marker in _markers(path) or ():
            if not marker.live and (writer or not marker.writer or not marker.this_boot):
                marker.path.unlink(missing_ok=True)
        info = {"started": _start_time(os.getpid()), "boot": _boot_id(), "writer": writer}
        _write(folder / str(os.getpid()), json.dumps(info))


def closed(path: Path) -> None:
    """One handle of this process closed; the last one removes its marker and, when no other
    process has the store open (nor left a marker), stamps the file as cleanly closed."""
    key = _key(path)
    with _lock:
        left = _held.get(key, 0) - 1
        if left > 0:
            _held[key] = left
            return
        _held.pop(key, None)
    with contextlib.suppress(OSError):
        (Path(str(path) + OPEN_SUFFIX) / str(os.getpid())).unlink(missing_ok=True)
        if _markers(path) != []:
            return  # another process has it open, or left a marker: no stamp
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
