"""The runner: the process that owns the controller (servers + queue), and its control channel.

`moe-tui run` runs one in the foreground; `moe-tui run --detach` starts one in a new session
(`start_new_session`, stdin from /dev/null, stdout+stderr to `<data dir>/logs/runner-*.log`) that
outlives the terminal and SSH session. Either way:

- **One runner per data dir.** `RunnerLock` holds `flock(LOCK_EX | LOCK_NB)` on
  `<data dir>/runner.lock` for the process's lifetime; the kernel drops it when the process dies,
  even by SIGKILL, so a crash never leaves a stale lock. A second runner gets `RunnerBusy`,
  whose message names the pid holding the lock.
- **Control channel: a Unix socket** (`<data dir>/runner.sock`, or a short path under
  $TMPDIR/moe-tui-<uid>/ (made 0700 by us; refused if another user owns it) if the data dir path
  is too long for a socket address; `runner.json` says which), mode 0600 and peer-uid checked, so
  only the owner can drive the GPUs. Line-delimited
  JSON: a request `{"id": 1, "op": "pause", "args": {}}` gets `{"id": 1, "ok": true, "result":
  ...}` or `{"id": 1, "ok": false, "error": "..."}`; `{"id": 2, "op": "subscribe"}` is answered
  and then every event follows as one `events.to_json()` line (objects with a "type" key).
  Ops are exactly `controller.OPS` plus `ping`, `subscribe` and `shutdown`.
- **Signals.** SIGHUP is ignored (a dropped SSH session must not stop a campaign). SIGTERM and
  SIGINT stop the running benchmark, mark its item `interrupted`, stop the servers and exit 0;
  they are always obeyed: a watchdog exits hard `STOP_DEADLINE_S` after the signal if the clean
  stop hangs, and a second signal exits at once (the next runner stops what was left).
- **Watchdog.** Once it holds the lock, the runner starts `moe_tui.runner_watchdog`, which stops
  the servers and load generator of a runner killed by SIGKILL as soon as it dies, not at the
  next start.
- **Exit status** 1 when the worker stopped on an error (`controller.fatal`: the store refused a
  finished run, which was spilled; the worker crashed); the reason is printed.

Why a Unix socket *and* SQLite: SQLite (WAL) is the source of truth: the queue, runs and
server starts are there, durable and readable by any process at any time, including after the
runner died. But a database cannot push: live figures (benchmark progress 4x a second, server
log lines, state changes) would need polling, and commands such as "skip the running benchmark"
must reach the process that holds the benchmark. A Unix socket gives both with filesystem
permissions for access control and no port to collide with or expose; an attached TUI reads
state from SQLite and listens to the socket for what changes.

`RunnerClient` is the TUI's (and the CLI's) side: `await RunnerClient.connect()`, `await
client.call(op, **args)`, `async for event in client.events()`; `call_runner_sync` is a one-shot
blocking call for the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moe_tui.bounds import check_request_args
from moe_tui.events import Event

LOCK_NAME = "runner.lock"
INFO_NAME = "runner.json"
SOCKET_NAME = "runner.sock"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), including the NUL.
MAX_SOCKET_PATH = 100
CLIENT_QUEUE_MAX = 10_000
LINE_LIMIT = 16 * 2**20  # one request or answer line; longer ones end the connection


class RunnerBusy(RuntimeError):
    """Another runner holds this data dir."""

    def __init__(self, data_dir: Path, pid: int | None):
        self.data_dir = data_dir
        self.pid = pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"another moe-tui runner ({who}) already owns the queue and servers of {data_dir}; "
            f"attach to it (moe-tui tui, moe-tui queue ...) or stop it (moe-tui run --stop)"
        )


class RunnerUnavailable(RuntimeError):
    """No runner answers on this data dir's control socket."""


# -- the lock -----------------------------------------------------------------------------------
class RunnerLock:
    """flock on `<data dir>/runner.lock`; the file holds the owner's pid for the error message."""

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_NAME
        self._fd: int | None = None

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
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}{' ' + role if role else ''}\n".encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def release(self) -> None:
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


def read_runner_info(data_dir: str | Path) -> dict[str, Any] | None:
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
    return info if isinstance(info, dict) else None


# -- the server side ---------------------------------------------------------------------------
class ControlServer:
    """Serves the control channel for one controller on its event loop."""

    def __init__(self, controller: Any, data_dir: str | Path, *, on_shutdown: Callable[[str], None]):
        self.controller = controller
        self.data_dir = Path(data_dir)
        self.path = socket_path_for(self.data_dir)
        self._on_shutdown = on_shutdown
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a runner that died; we hold the lock, so it is not live
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._handle, path=str(self.path), limit=LINE_LIMIT)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        for task in list(self._clients):
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None and not _peer_is_us(sock):
            writer.close()
            return
        outbox: asyncio.Queue[str | None] = asyncio.Queue(maxsize=CLIENT_QUEUE_MAX)
        dropped = 0

        def put(line: str) -> None:
            nonlocal dropped
            try:
                outbox.put_nowait(line)
            except asyncio.QueueFull:
                dropped += 1  # a stalled client loses events, never the runner's memory

        async def pump() -> None:
            while True:
                line = await outbox.get()
                if line is None:
                    return
                writer.write(line.encode() + b"\n")
                await writer.drain()

        pumper = asyncio.create_task(pump())
        unsubscribe: Callable[[], None] | None = None
        try:
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                try:
                    request = json.loads(raw)
                    if not isinstance(request, dict):
                        raise ValueError("a request is a JSON object")
                except ValueError as exc:
                    put(json.dumps({"id": None, "ok": False, "error": f"bad request: {exc}"}))
                    continue
                rid, op, args = request.get("id"), request.get("op"), request.get("args") or {}
                if op == "subscribe":
                    if unsubscribe is None:
                        unsubscribe = self.controller.subscribe(lambda ev: put(ev.to_json()))
                    put(json.dumps({"id": rid, "ok": True, "result": {"subscribed": True}}))
                    continue
                if op == "ping":
                    put(json.dumps({"id": rid, "ok": True, "result": {"pid": os.getpid()}}))
                    continue
                if op == "shutdown":
                    put(json.dumps({"id": rid, "ok": True, "result": {"stopping": True}}))
                    self._on_shutdown(str(args.get("reason") or "shutdown requested over the control socket"))
                    continue
                try:
                    if not isinstance(args, dict):
                        raise ValueError("args must be a JSON object")
                    check_request_args(args)  # bounded before any work (moe_tui.bounds)
                    result = await self.controller.call(str(op), **args)
                    put(json.dumps({"id": rid, "ok": True, "result": result}, default=str))
                except Exception as exc:
                    put(json.dumps({"id": rid, "ok": False, "error": str(exc),
                                    "error_type": type(exc).__name__}))
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass  # ValueError: a line over LINE_LIMIT; the connection ends, the runner goes on
        finally:
            if unsubscribe is not None:
                unsubscribe()
            with contextlib.suppress(asyncio.QueueFull):
                outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pumper, 2.0)
            pumper.cancel()
            writer.close()
            if task is not None:
                self._clients.discard(task)


def _peer_uid(sock: socket.socket) -> int | None:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return os.getuid()  # no SO_PEERCRED here: the socket file's mode 0600 restricts who connects
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    except OSError:
        return None
    return uid


def _peer_is_us(sock: socket.socket) -> bool:
    return _peer_uid(sock) == os.getuid()


def _check_runner_peer(sock: Any, path: Path) -> None:
    """The client's side: trust what answers on `path` only if it runs as this user."""
    uid = _peer_uid(sock) if sock is not None else None
    if uid != os.getuid():
        raise RunnerUnavailable(f"what answers on {path} runs as uid {uid}, not as you (uid {os.getuid()}): "
                                f"not a runner of yours; refusing to talk to it")


# -- running one ------------------------------------------------------------------------------
async def serve(controller: Any, data_dir: str | Path, *, until_empty: bool, retry_interrupted: bool = True,
                on_event: Callable[[Event], None] | None = None, log_path: str | None = None) -> int:
    """Run `controller` with a control socket until the queue drains (`until_empty`) or a
    shutdown (SIGTERM / SIGINT / the `shutdown` op). Returns the exit status."""
    loop = asyncio.get_running_loop()
    data_dir = Path(data_dir)
    stop_requested = asyncio.Event()
    reason_box: list[str] = []

    def request_stop(reason: str) -> None:
        if not reason_box:
            reason_box.append(reason)
        stop_requested.set()

    if on_event is not None:
        controller.subscribe(on_event)
    # The socket's folder is checked (ours, 0700) before anything starts: RunnerUnavailable if not.
    control = ControlServer(controller, data_dir, on_shutdown=request_stop)
    await controller.start(work=True, until_empty=until_empty, retry_interrupted=retry_interrupted)
    if getattr(controller, "_lock", None) is not None:
        from moe_tui.runner_watchdog import spawn

        spawn(data_dir)  # stops our servers and load generator at once if we are killed
    # runner.json first, then the socket: whoever sees the socket can already read who serves it.
    info = {"pid": os.getpid(), "socket": str(control.path), "started_at": time.time(),
            "data_dir": str(data_dir), "until_empty": until_empty, "log": log_path}
    info_path = data_dir / INFO_NAME
    tmp = info_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, info_path)
    await control.start()

    with contextlib.suppress(ValueError, RuntimeError):  # not the main thread: the caller handles signals
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        handler = _stop_handler(loop, request_stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)
    waiter = asyncio.create_task(stop_requested.wait())
    worker = asyncio.create_task(controller.wait_idle())
    try:
        await asyncio.wait({waiter, worker}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reason = reason_box[0] if reason_box else (
            f"stopped: {controller.fatal}" if getattr(controller, "fatal", None) else "queue drained")
        await controller.shutdown(reason)
        waiter.cancel()
        worker.cancel()
        await asyncio.gather(waiter, worker, return_exceptions=True)
        await control.close()
        with contextlib.suppress(FileNotFoundError):
            if (read_runner_info(data_dir) or {}).get("pid") == os.getpid():
                info_path.unlink()
    fatal = getattr(controller, "fatal", None)
    if fatal:
        with contextlib.suppress(Exception):
            print(f"moe-tui run: stopped with an error: {fatal}", file=sys.stderr, flush=True)
        return 1
    return 0


# A stop asked by signal must end the process even if the loop is stuck (a hung store write, a
# blocking call): after this long, a watchdog thread exits hard. A second signal exits at once.
STOP_DEADLINE_S = 90.0


def _stop_handler(loop: asyncio.AbstractEventLoop, request_stop: Callable[[str], None]) -> Callable:
    """A plain `signal.signal` handler (it runs between bytecodes even when a loop callback is
    busy, unlike `loop.add_signal_handler`): ask for a clean stop on the loop, and arm the watchdog."""
    import threading

    asked: list[int] = []

    def watchdog() -> None:
        time.sleep(STOP_DEADLINE_S)
        with contextlib.suppress(Exception):
            print(f"moe-tui run: did not stop within {STOP_DEADLINE_S:g} s of the signal; exiting now",
                  file=sys.stderr, flush=True)
        os._exit(1)

    def handler(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if asked:
            with contextlib.suppress(Exception):
                print(f"moe-tui run: second {name}: exiting now", file=sys.stderr, flush=True)
            os._exit(1)
        asked.append(signum)
        threading.Thread(target=watchdog, name="stop-watchdog", daemon=True).start()
        with contextlib.suppress(RuntimeError):  # the loop already closed: we are exiting anyway
            loop.call_soon_threadsafe(request_stop, f"got {name}")

    return handler


# -- the client side lives in moe_tui.runner_client; these names stay importable from here.
from moe_tui.runner_client import (  # noqa: E402,F401
    RunnerClient,
    RunnerOpError,
    _client_socket_path,
    _tail,
    call_runner_sync,
    spawn_detached,
)
