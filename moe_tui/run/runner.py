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
  SIGINT stop the running benchmark, mark its item `interrupted`, stop the servers and exit (0 after
  SIGTERM, the way `run --stop` ends a runner; 130 after SIGINT, Ctrl-C, as shells expect);
  they are always obeyed: a watchdog exits hard `STOP_DEADLINE_S` after the signal if the clean
  stop hangs, and a second signal exits at once (the next runner stops what was left).
- **Watchdog.** Once it holds the lock, the runner starts `moe_tui.run.watchdog`, which stops
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
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from moe_tui.events import Event
from moe_tui.records import RunnerInfoJson
from moe_tui.run.bounds import check_request_args
from moe_tui.run.rendezvous import (
    CLIENT_QUEUE_MAX,
    INFO_NAME,
    LINE_LIMIT,
    _peer_is_us,
    read_runner_info,
    socket_path_for,
)

if TYPE_CHECKING:
    from moe_tui.run.controller import Controller


# -- the server side ---------------------------------------------------------------------------
class ControlServer:
    """Serves the control channel for one controller on its event loop."""

    def __init__(self, controller: Controller, data_dir: str | Path, *, on_shutdown: Callable[[str], None]):
        self.controller = controller
        self.data_dir = Path(data_dir)
        self.path = socket_path_for(self.data_dir)
        self._on_shutdown = on_shutdown
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task[None]] = set()

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
                    check_request_args(args)  # bounded before any work (moe_tui.run.bounds)
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


# -- running one ------------------------------------------------------------------------------
async def serve(controller: Controller, data_dir: str | Path, *, until_empty: bool, retry_interrupted: bool = True,
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
    if controller.holds_lock and not controller.batch_mode:  # batch jobs outlive their runner (run.batch)
        from moe_tui.run.watchdog import spawn

        spawn(data_dir)  # stops our servers and load generator at once if we are killed
    # runner.json first, then the socket: whoever sees the socket can already read who serves it.
    info: RunnerInfoJson = {"pid": os.getpid(), "socket": str(control.path), "started_at": time.time(),
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
            f"stopped: {controller.fatal}" if controller.fatal else "queue drained")
        await controller.shutdown(reason)
        waiter.cancel()
        worker.cancel()
        await asyncio.gather(waiter, worker, return_exceptions=True)
        await control.close()
        with contextlib.suppress(FileNotFoundError):
            if (read_runner_info(data_dir) or {}).get("pid") == os.getpid():
                info_path.unlink()
    fatal = controller.fatal
    if fatal:
        with contextlib.suppress(Exception):
            print(f"moe-tui run: stopped with an error: {fatal}", file=sys.stderr, flush=True)
        return 1
    return 130 if reason_box and reason_box[0] == "got SIGINT" else 0


# A stop asked by signal must end the process even if the loop is stuck (a hung store write, a
# blocking call): after this long, a watchdog thread exits hard. A second signal exits at once.
STOP_DEADLINE_S = 90.0


def _stop_handler(loop: asyncio.AbstractEventLoop, request_stop: Callable[[str], None]) -> Callable[[int, FrameType | None], None]:
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

    def handler(signum: int, _frame: FrameType | None) -> None:
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
