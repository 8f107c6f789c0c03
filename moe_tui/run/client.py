"""The runner's client side: `RunnerClient` (asyncio, for the TUI), `call_runner_sync` (one
blocking op, for the CLI) and `spawn_detached` (start a runner in its own session). Both clients
check, with SO_PEERCRED, that what answers on the socket runs as this user before trusting it.
The protocol and the server side are in `moe_tui.run.runner`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from moe_tui.events import Event, event_from_dict
from moe_tui.records import FreeForm
from moe_tui.run.rendezvous import LINE_LIMIT, RunnerUnavailable, _check_runner_peer, read_runner_info, socket_path_for

# A control op's keyword arguments, per op (the controller's op table names them; its methods check them).
OpArgs = FreeForm


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
        self._pending: dict[int, asyncio.Future[FreeForm]] = {}  # the runner's reply per request id, as sent
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
        try:
            _check_runner_peer(writer.get_extra_info("socket"), path)
        except RunnerUnavailable:
            writer.close()
            raise
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
        _check_runner_peer(sock, path)
        try:
            return _exchange(sock, op, args)
        except TimeoutError:
            raise RunnerNotAnswering(
                f"the runner on {path} accepted the connection but did not answer {op!r} within {timeout:g} s "
                f"(busy or hung); `moe-tui run --stop` stops it by signal") from None
        except OSError as exc:
            raise RunnerUnavailable(f"the runner on {path} broke the connection: {exc.strerror or exc}") from None
    finally:
        sock.close()


class RunnerNotAnswering(RunnerUnavailable):
    """Something holds the runner's socket but does not answer in time."""


def _exchange(sock: socket.socket, op: str, args: OpArgs) -> Any:
    sock.sendall(json.dumps({"id": 1, "op": op, "args": args}).encode() + b"\n")
    buf = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            raise RunnerUnavailable("the runner closed the connection without answering")
        buf += chunk
        if len(buf) > LINE_LIMIT:
            raise RunnerUnavailable(f"the runner's answer is over {LINE_LIMIT} bytes without an end of line")
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                raise RunnerUnavailable(f"the runner answered something that is not JSON: {line[:80]!r}") from None
            if isinstance(msg, dict) and msg.get("id") == 1 and "ok" in msg:
                if not msg["ok"]:
                    raise RunnerOpError(msg.get("error") or "error", msg.get("error_type"))
                return msg.get("result")


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
