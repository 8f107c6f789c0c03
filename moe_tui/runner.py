"""The runner: the process that owns the controller (servers + queue), and its control channel.

`moe-tui run` runs one in the foreground; `moe-tui run --detach` starts one in a new session
(`start_new_session`, stdin from /dev/null, stdout+stderr to `<data dir>/logs/runner-*.log`) that
outlives the terminal and SSH session. Either way:

- **One runner per data dir.** `RunnerLock` holds `flock(LOCK_EX | LOCK_NB)` on
  `<data dir>/runner.lock` for the process's lifetime; the kernel drops it when the process dies,
  even by SIGKILL, so a crash never leaves a stale lock. A second runner gets `RunnerBusy`,
  whose message names the pid holding the lock.
- **Control channel: a Unix socket** (`<data dir>/runner.sock`, or a short path under
  /tmp/moe-tui-<uid>/ if the data dir path is too long for a socket address; `runner.json` says
  which), mode 0600 and peer-uid checked, so only the owner can drive the GPUs. Line-delimited
  JSON: a request `{"id": 1, "op": "pause", "args": {}}` gets `{"id": 1, "ok": true, "result":
  ...}` or `{"id": 1, "ok": false, "error": "..."}`; `{"id": 2, "op": "subscribe"}` is answered
  and then every event follows as one `events.to_json()` line (objects with a "type" key).
  Ops are exactly `controller.OPS` plus `ping`, `subscribe` and `shutdown`.
- **Signals.** SIGHUP is ignored (a dropped SSH session must not stop a campaign). SIGTERM and
  SIGINT stop the running benchmark, mark its item `interrupted`, stop the servers and exit 0.

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
import itertools
import json
import os
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from moe_tui.events import Event, event_from_dict

LOCK_NAME = "runner.lock"
INFO_NAME = "runner.json"
SOCKET_NAME = "runner.sock"
# sockaddr_un.sun_path is 108 bytes on Linux (104 on macOS), including the NUL.
MAX_SOCKET_PATH = 100
CLIENT_QUEUE_MAX = 10_000
LINE_LIMIT = 16 * 2**20


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

    def acquire(self) -> RunnerLock:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunnerBusy(self.data_dir, lock_holder_pid(self.data_dir)) from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
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
        text = (Path(data_dir) / LOCK_NAME).read_text().strip()
        return int(text) if text else None
    except (OSError, ValueError):
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
    short = Path("/tmp") / f"moe-tui-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    os.chmod(short, 0o700)
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return short / f"{digest}.sock"


def read_runner_info(data_dir: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(data_dir) / INFO_NAME).read_text())
    except (OSError, ValueError):
        return None


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
                    result = await self.controller.call(str(op), **args)
                    put(json.dumps({"id": rid, "ok": True, "result": result}, default=str))
                except Exception as exc:
                    put(json.dumps({"id": rid, "ok": False, "error": str(exc),
                                    "error_type": type(exc).__name__}))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
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


def _peer_is_us(sock: socket.socket) -> bool:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return True  # the socket file's mode 0600 still restricts who can connect
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    except OSError:
        return False
    return uid == os.getuid()


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
    await controller.start(work=True, until_empty=until_empty, retry_interrupted=retry_interrupted)
    control = ControlServer(controller, data_dir, on_shutdown=request_stop)
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
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, request_stop, f"got {signal.Signals(sig).name}")
    waiter = asyncio.create_task(stop_requested.wait())
    worker = asyncio.create_task(controller.wait_idle())
    try:
        await asyncio.wait({waiter, worker}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reason = reason_box[0] if reason_box else "queue drained"
        with contextlib.suppress(Exception):
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        await controller.shutdown(reason)
        waiter.cancel()
        worker.cancel()
        await asyncio.gather(waiter, worker, return_exceptions=True)
        await control.close()
        with contextlib.suppress(FileNotFoundError):
            if (read_runner_info(data_dir) or {}).get("pid") == os.getpid():
                info_path.unlink()
    return 0


# -- the client side ---------------------------------------------------------------------------
class RunnerClient:
    """An attached client: `call` ops, iterate events. One connection, asyncio.

        client = await RunnerClient.connect()            # this data dir's runner
        snap = await client.call("snapshot")
        await client.call("pause")
        async for event in client.events():              # subscribes on first use
            ...
        await client.close()
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: Path):
        self.path = path
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._subscribed = False
        self._reader_task = asyncio.create_task(self._read_loop())
        self.closed = False

    @classmethod
    async def connect(cls, data_dir: str | Path | None = None, *, timeout: float = 5.0) -> RunnerClient:
        path = _client_socket_path(data_dir)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path), limit=LINE_LIMIT), timeout)
        except (TimeoutError, OSError) as exc:
            raise RunnerUnavailable(f"no moe-tui runner answers on {path}: {exc}") from None
        return cls(reader, writer, path)

    async def _read_loop(self) -> None:
        try:
            while True:
                raw = await self._reader.readline()
                if not raw:
                    break
                try:
                    msg = json.loads(raw)
                except ValueError:
                    continue
                if "ok" in msg and "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                elif "type" in msg:
                    try:
                        self._events.put_nowait(event_from_dict(msg))
                    except (KeyError, TypeError):
                        continue  # an event type this client does not know (newer runner)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed = True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RunnerUnavailable("the runner closed the connection"))
            self._pending.clear()
            self._events.put_nowait(None)

    async def call(self, op: str, timeout: float | None = 60.0, **args: Any) -> Any:
        """Send one op and wait for its answer. Raises `RunnerOpError` with the runner's message."""
        if self.closed:
            raise RunnerUnavailable("the runner connection is closed")
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._writer.write(json.dumps({"id": rid, "op": op, "args": args}).encode() + b"\n")
        await self._writer.drain()
        msg = await asyncio.wait_for(fut, timeout)
        if not msg.get("ok"):
            raise RunnerOpError(msg.get("error") or "error", msg.get("error_type"))
        return msg.get("result")

    async def subscribe(self) -> None:
        if not self._subscribed:
            await self.call("subscribe")
            self._subscribed = True

    async def events(self) -> AsyncIterator[Event]:
        """Every event the runner emits from now on, until the connection closes."""
        await self.subscribe()
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        self._reader_task.cancel()
        await asyncio.gather(self._reader_task, return_exceptions=True)


class RunnerOpError(RuntimeError):
    """The runner refused or failed an op; `error_type` is the runner-side exception name."""

    def __init__(self, message: str, error_type: str | None = None):
        super().__init__(message)
        self.error_type = error_type


def _client_socket_path(data_dir: str | Path | None) -> Path:
    if data_dir is None:
        from moe_tui import paths

        data_dir = paths.data_dir()
    info = read_runner_info(data_dir)
    if info and info.get("socket"):
        return Path(info["socket"])
    return socket_path_for(data_dir)


def call_runner_sync(op: str, data_dir: str | Path | None = None, timeout: float = 30.0, **args: Any) -> Any:
    """One blocking op for the CLI. Raises RunnerUnavailable when no runner answers."""
    path = _client_socket_path(data_dir)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise RunnerUnavailable(f"no moe-tui runner answers on {path}: {exc}") from None
        sock.sendall(json.dumps({"id": 1, "op": op, "args": args}).encode() + b"\n")
        buf = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise RunnerUnavailable("the runner closed the connection without answering")
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("id") == 1 and "ok" in msg:
                    if not msg["ok"]:
                        raise RunnerOpError(msg.get("error") or "error", msg.get("error_type"))
                    return msg.get("result")
    finally:
        sock.close()


def spawn_detached(argv: list[str], data_dir: Path, log_path: Path, *, wait_s: float = 20.0) -> int:
    """Start `argv` (a foreground `moe-tui run`) in a new session with stdout to `log_path`, and
    wait until it answers on the control socket. Returns its pid; raises RuntimeError with the
    log tail if it exited or did not answer in time."""
    import subprocess

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, cwd="/")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        rc = proc.poll()
        if rc is not None:
            raise RuntimeError(f"the runner exited with status {rc}:\n{_tail(log_path)}")
        info = read_runner_info(data_dir)
        if info and info.get("pid") == proc.pid:
            try:
                call_runner_sync("ping", data_dir, timeout=2.0)
                return proc.pid
            except (RunnerUnavailable, OSError):
                pass
        time.sleep(0.1)
    raise RuntimeError(f"the runner (pid {proc.pid}) did not answer within {wait_s:g} s; log "
                       f"{log_path}:\n{_tail(log_path)}")


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"
