"""Where a data dir's runner is found, and whether it may be trusted: the rendezvous of runner and clients.

The lock (`RunnerLock`: one runner per data dir, `flock` held for the process's lifetime),
`runner_is_running` / `lock_holder_pid`, where the control socket lives (`socket_path_for`, a short
private folder when the data dir's path is too long for a socket address), `runner.json`
(`read_runner_info`), and the peer-uid check both ends make (`_peer_is_us`, `_check_runner_peer`).
The runner (`moe_tui.run.runner`), its client (`moe_tui.run.client`) and the watchdog import this;
it imports none of them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from moe_tui.records import RunnerInfoJson

LOCK_NAME = "runner.lock"
STORE_NAME = "moe-tui.sqlite3"  # the store file in a data dir (moe_tui.paths.store_path)
INFO_NAME = "runner.json"
SOCKET_NAME = "runner.sock"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), including the NUL.
MAX_SOCKET_PATH = 100
CLIENT_QUEUE_MAX = 10_000
LINE_LIMIT = 16 * 2**20  # one request or answer line; longer ones end the connection


class RunnerBusy(RuntimeError):
    """Another runner holds this data dir."""

    def __init__(self, data_dir: Path, pid: int | None, store: Path | None = None):
        self.data_dir = data_dir
        self.pid = pid
        who = f"pid {pid}" if pid else "another process"
        if store is not None:
            super().__init__(
                f"another moe-tui runner already works the store {store} that {data_dir} links to (two runners "
                f"on one queue would stop each other's servers); stop it (moe-tui run --stop in its data dir)")
            return
        super().__init__(
            f"another moe-tui runner ({who}) already owns the queue and servers of {data_dir}; "
            f"attach to it (moe-tui tui, moe-tui queue ...) or stop it (moe-tui run --stop)"
        )


class RunnerUnavailable(RuntimeError):
    """No runner answers on this data dir's control socket."""


# -- the lock -----------------------------------------------------------------------------------
class RunnerLock:
    """flock on `<data dir>/runner.lock`; the file holds the owner's pid for the error message.
    Also flock on the store file itself, resolved through links: two data dirs whose stores link to
    one file are one queue, and only one runner may work it. (SQLite locks with POSIX byte-range
    locks, which flock does not touch on a local file system.)"""

    def __init__(self, data_dir: str | Path, store: str | Path | None = None):
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_NAME
        self.store = Path(store) if store is not None else self.data_dir / STORE_NAME
        self._fd: int | None = None
        self._store_fd: int | None = None

    def acquire(self, *, role: str = "") -> RunnerLock:
        """Take the lock or raise RunnerBusy. A dead runner's watchdog (`role` "watchdog" in the
        file) holds it only while it stops what that runner left: that is waited out."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + WATCHDOG_SWEEP_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if not _held_by_watchdog(self.path) or time.monotonic() > deadline:
                    os.close(fd)
                    raise RunnerBusy(self.data_dir, lock_holder_pid(self.data_dir)) from None
                time.sleep(0.2)
        try:
            self._store_fd = _lock_store_file(self.store)
        except RunnerBusy:
            os.close(fd)
            raise RunnerBusy(self.data_dir, None, Path(os.path.realpath(self.store))) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}{' ' + role if role else ''}\n".encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._store_fd is not None:
            os.close(self._store_fd)
            self._store_fd = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunnerLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _lock_store_file(store: Path) -> int | None:
    """flock(LOCK_EX | LOCK_NB) on the file `store` resolves to: its fd, None when there is no
    regular file there yet (the store refuses anything else when it opens), RunnerBusy when held."""
    try:
        fd = os.open(os.path.realpath(store), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunnerBusy(store.parent, None, store) from None
        return None
    return fd


def lock_holder_pid(data_dir: str | Path) -> int | None:
    try:
        text = (Path(data_dir) / LOCK_NAME).read_text().split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


# A runner starting while a dead runner's watchdog stops what it left waits this long for the lock.
WATCHDOG_SWEEP_WAIT_S = 30.0


def _held_by_watchdog(path: Path) -> bool:
    """The lock's holder is a dead runner's watchdog, or has not written its pid yet (it just
    took the lock: a watchdog between flock and its write, seen by a runner started right then)."""
    try:
        words = path.read_text().split()
    except OSError:
        return False
    return not words or words[1:2] == ["watchdog"]


WATCHDOG_SAY_AFTER_S = 1.0  # a sweep usually ends well within this; only a longer wait is worth a line


def wait_out_watchdog(data_dir: str | Path, say: Callable[[str], None] | None = None) -> int | None:
    """Wait (up to WATCHDOG_SWEEP_WAIT_S) while the lock is held by a runner's watchdog sweeping what
    its runner left: a runner that just ended leaves it the lock for a moment, which is no runner.
    A wait past WATCHDOG_SAY_AFTER_S is told through `say` (once), so a command is never silent for
    long. Returns the watchdog's pid if it still holds the lock when the wait ends, else None."""
    path = Path(data_dir) / LOCK_NAME
    began = time.monotonic()
    told = False
    while (pid := runner_is_running(data_dir)) and _held_by_watchdog(path):
        waited = time.monotonic() - began
        if waited >= WATCHDOG_SWEEP_WAIT_S:
            return pid
        if say is not None and not told and waited >= WATCHDOG_SAY_AFTER_S:
            say(f"waiting for the watchdog (pid {pid}) of a runner that ended to finish stopping what that "
                f"runner left (up to {WATCHDOG_SWEEP_WAIT_S:.0f} s)...")
            told = True
        time.sleep(0.1)
    return None


def runner_is_running(data_dir: str | Path) -> int | None:
    """The pid of the runner holding the lock, or None if no runner holds it."""
    path = Path(data_dir) / LOCK_NAME
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return lock_holder_pid(data_dir) or -1
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# -- where the socket lives --------------------------------------------------------------------
def socket_path_for(data_dir: str | Path) -> Path:
    path = Path(data_dir).resolve() / SOCKET_NAME
    if len(os.fsencode(str(path))) <= MAX_SOCKET_PATH:
        return path
    import tempfile

    short = private_socket_dir(Path(tempfile.gettempdir()) / f"moe-tui-{os.getuid()}")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return short / f"{digest}.sock"


def private_socket_dir(short: Path) -> Path:
    """The short socket folder, made by us 0700, or refused: a folder someone else made first (in
    world-writable /tmp) could have its socket swapped for an impostor's."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(short, 0o700)
    st = os.lstat(short)
    if not stat.S_ISDIR(st.st_mode):
        raise RunnerUnavailable(f"socket folder {short} is not a folder (a link or file put there by someone "
                                f"else?); refusing it: remove it, or use a data dir with a shorter path")
    if st.st_uid != os.getuid():
        raise RunnerUnavailable(f"socket folder {short} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}); "
                                f"refusing it: it could serve a fake runner. Remove it, or use a shorter data dir path")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(short, 0o700)
    return short


def read_runner_info(data_dir: str | Path) -> RunnerInfoJson | None:
    """`runner.json`, if it is ours and private (`moe_tui.trust`) and a JSON object; else None
    (then the socket's default path is used, and what answers there is uid-checked anyway)."""
    from moe_tui.trust import untrusted_reason

    path = Path(data_dir) / INFO_NAME
    if untrusted_reason(path, max_bytes=1 << 16) is not None:
        return None
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return cast(RunnerInfoJson, info) if isinstance(info, dict) else None  # ours and private: run.runner wrote it


def _peer_uid(sock: socket.socket) -> int | None:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return os.getuid()  # no SO_PEERCRED here: the socket file's mode 0600 restricts who connects
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    except OSError:
        return None
    return int(uid)


def _peer_is_us(sock: socket.socket) -> bool:
    return _peer_uid(sock) == os.getuid()


def _check_runner_peer(sock: socket.socket | None, path: Path) -> None:
    """The client's side: trust what answers on `path` only if it runs as this user."""
    uid = _peer_uid(sock) if sock is not None else None
    if uid != os.getuid():
        raise RunnerUnavailable(f"what answers on {path} runs as uid {uid}, not as you (uid {os.getuid()}): "
                                f"not a runner of yours; refusing to talk to it")
