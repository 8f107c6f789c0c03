"""Run the load generator in its own process and read its event stream (what a UI should call).

`ClientProcess` is one benchmark client process (`python -m moe_tui.bench.worker`, in a new
session, so a busy UI event loop can never delay a request or a timestamp) that runs benchmarks
one after another: the runner gives each queue item one, for its warmup pass and its timed run,
forked by the runner's `moe_tui.bench.zygote.Zygote` (no imports to redo; exec'd when the zygote
cannot start). `run_benchmark_subprocess(spec, base_url, on_progress)` is one run in a process of
its own. Per run the child writes one JSON object per line on stdout:
`{"type": "BenchProgress", ...}` about every 250 ms (the fields of `moe_tui.events.BenchProgress`)
and finally `{"type": "BenchResult", ...}` (`BenchResult.to_dict()`). Other lines are ignored;
stderr is kept (tail) for error messages.

To end a run early and keep what it measured, set the `stop` event: the child gets SIGTERM, stops
sending, and reports status "incomplete" with its partial records (and stays for the next run).
Cancelling the awaiting task instead kills the child (SIGTERM, then SIGKILL of its group after a
grace period) and re-raises. During a run the stdout pipe is drained continuously and progress is
handed on latest-wins by a separate task, so a slow `on_progress` can never block the child's
writes (and with them its event loop).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator

from moe_tui.bench.progress import ProgressCallback, emit
from moe_tui.bench.result import BenchResult, JsonObject, native_spec
from moe_tui.bench.settings import API_KEY_ENV
from moe_tui.bench.zygote import ForkedClient, Zygote
from moe_tui.events import BenchProgress, event_from_dict
from moe_tui.spec import BenchmarkSpec

# A client process: exec'd (asyncio's Process) or forked by the zygote; both have pid, stdin,
# stdout, stderr, returncode and wait().
_Child = asyncio.subprocess.Process | ForkedClient
STOP_GRACE_S = 10.0
STDERR_TAIL_LINES = 30


async def _read_lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Lines of any length (the final result line can be many megabytes)."""
    buffer = b""
    while True:
        piece = await stream.read(1 << 20)
        if not piece:
            if buffer.strip():
                yield buffer
            return
        buffer += piece
        if b"\n" in piece:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line


async def run_benchmark_subprocess(
    spec: BenchmarkSpec,
    base_url: str,
    on_progress: ProgressCallback | None = None,
    *,
    run_id: int | None = None,
    request_timeout: float | None = None,
    stall_timeout: float | None = None,
    vocab_size: int | None = None,
    tokenizer: str | None = None,
    warmup_pause: float | None = None,
    python: str | None = None,
    env: dict[str, str] | None = None,
    stop: asyncio.Event | None = None,
) -> BenchResult:
    """Run `spec` against `base_url` in a child process of its own (a `ClientProcess` for one run);
    progress events go to `on_progress` (sync or async callable taking a BenchProgress). Returns the
    child's BenchResult, or a "failed" BenchResult naming the exit code and stderr tail if the child
    produced none. `request_timeout` / `stall_timeout` (seconds, None: the client's defaults);
    `warmup_pause` (seconds, None: 1 s). The spec runs as `native_spec(spec)` (client version filled
    in): store the run under that fingerprint. Raises SpecError (before starting anything) for a
    spec of another client."""
    spec = native_spec(spec)
    async with ClientProcess(python=python, env=env) as client:
        return await client.run(spec, base_url, on_progress, run_id=run_id, request_timeout=request_timeout,
                                stall_timeout=stall_timeout, vocab_size=vocab_size, tokenizer=tokenizer,
                                warmup_pause=warmup_pause, stop=stop)


class ClientProcess:
    """One benchmark client process (`moe_tui.bench.worker`) that runs benchmarks one after another:
    a queue item's warmup pass and its timed run share one. `start()` may come well before the first
    `run()` (the imports then overlap whatever the caller waits for); `close()` ends it (end of
    stdin, then SIGTERM/SIGKILL of its group). A child that died between runs is started again by
    the next `run()`."""

    def __init__(self, *, python: str | None = None, env: dict[str, str] | None = None,
                 zygote: Zygote | None = None) -> None:
        self.python = python or sys.executable
        self.env = env
        self.zygote = zygote  # forks the process without its imports (moe_tui.bench.zygote); else exec
        self.proc: _Child | None = None
        self.starts = 0
        self._lines: AsyncIterator[bytes] | None = None
        self._stderr_lines: list[str] = []
        self._stderr_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ClientProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, first: bytes = b"") -> bool:
        """Start the process unless it runs; whether `first` (a request line) was handed to it."""
        if self.alive:
            return False
        if self.zygote is not None:
            try:
                self._started(await self.zygote.spawn(first=first))
                return bool(first)
            except (OSError, TimeoutError):
                self.zygote = None  # it failed once: this client execs from now on
        child_env = dict(os.environ if self.env is None else self.env)
        child_env["PYTHONUNBUFFERED"] = "1"
        child_env.pop(API_KEY_ENV, None)  # a run's key comes with its request, never from here
        self._started(await asyncio.create_subprocess_exec(
            self.python, "-m", "moe_tui.bench.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True, env=child_env))
        return False

    def _started(self, proc: _Child) -> None:
        self.proc = proc
        self.starts += 1
        assert proc.stdout is not None
        self._lines = _read_lines(proc.stdout).__aiter__()
        self._stderr_lines = []
        self._stderr_task = asyncio.create_task(self._drain_stderr(proc))

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.close()  # end of requests: the child exits by itself
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except TimeoutError:
                await _stop(proc)
        if self._stderr_task is not None:
            self._stderr_task.cancel()

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr_lines[-STDERR_TAIL_LINES:])

    async def _drain_stderr(self, proc: _Child) -> None:
        assert proc.stderr is not None
        async for raw in _read_lines(proc.stderr):
            self._stderr_lines.append(raw.decode("utf-8", "replace"))
            del self._stderr_lines[:-STDERR_TAIL_LINES]

    async def run(self, spec: BenchmarkSpec, base_url: str, on_progress: ProgressCallback | None = None, *,
                  run_id: int | None = None, request_timeout: float | None = None,
                  stall_timeout: float | None = None, vocab_size: int | None = None, tokenizer: str | None = None,
                  warmup_pause: float | None = None, api_key: str | None = None,
                  stop: asyncio.Event | None = None) -> BenchResult:
        """One benchmark in this process, as `run_benchmark_subprocess` describes; `api_key` is the
        server's key (None: the one in this process's environment, if any)."""
        spec = native_spec(spec)
        request = {"spec": spec.canonical_dict(), "base_url": base_url, "run_id": run_id,
                   "request_timeout": request_timeout, "stall_timeout": stall_timeout, "vocab_size": vocab_size,
                   "tokenizer": tokenizer, "warmup_pause": warmup_pause,
                   "api_key": api_key or (self.env if self.env is not None else os.environ).get(API_KEY_ENV)}
        line = (json.dumps(request) + "\n").encode()
        handed = await self.start(first=line)
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        child = _ChildRun(proc, on_progress)
        try:
            if not handed:
                proc.stdin.write(line)
                await proc.stdin.drain()
            assert self._lines is not None
            result = await child.run(self._lines, stop)
        except (BrokenPipeError, ConnectionResetError):
            result = None
        except asyncio.CancelledError:
            self.proc = None
            await _stop(proc)
            raise
        if result is None:
            code = await proc.wait()
            if self._stderr_task is not None:
                await asyncio.wait({self._stderr_task}, timeout=5.0)
            self.proc = None
            result = BenchResult(status="failed", spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                                 error=f"benchmark process {_ended(proc, code)} without a result:\n"
                                       f"{self.stderr_tail()}",
                                 errors_by_kind={"client_process": 1})
        return result


class _ChildRun:
    """One run in a benchmark child: its events read until the result, progress handed on
    latest-wins by its own task, and SIGTERM to the child's group when `stop` is set."""

    def __init__(self, proc: _Child, on_progress: ProgressCallback | None):
        self.proc = proc
        self.on_progress = on_progress
        self.latest: list[BenchProgress] = []
        self.wake = asyncio.Event()
        self.finished = False

    async def run(self, lines: AsyncIterator[bytes], stop: asyncio.Event | None) -> BenchResult | None:
        """Read the child's events to this run's result (None: the child ended without one)."""
        deliver_task = asyncio.create_task(self._deliver())
        stop_task = asyncio.create_task(self._stop_on_request(stop)) if stop is not None else None
        try:
            result = await self._read_events(lines)
            self.finished = True
            self.wake.set()
            await deliver_task
        except BaseException:
            deliver_task.cancel()
            raise
        finally:
            if stop_task is not None:
                stop_task.cancel()
        return result

    async def _read_events(self, lines: AsyncIterator[bytes]) -> BenchResult | None:
        # Not closed when this run's result is read: the same lines carry the process's next run.
        async for raw in lines:
            obj = _parse(raw)
            if obj is None:
                continue
            kind = obj.get("type")
            if kind == "BenchProgress":
                try:
                    event = event_from_dict(obj)
                except (TypeError, KeyError):
                    continue
                if isinstance(event, BenchProgress):
                    self.latest.append(event)
                self.wake.set()
            elif kind == "BenchResult":
                obj.pop("type", None)
                return BenchResult.from_dict(obj)
        return None

    async def _deliver(self) -> None:
        while not self.finished or self.latest:
            await self.wake.wait()
            self.wake.clear()
            while self.latest:
                await emit(self.on_progress, self.latest.pop())
                self.latest.clear()

    async def _stop_on_request(self, stop: asyncio.Event) -> None:
        await stop.wait()
        _signal(self.proc, signal.SIGTERM)


def _parse(raw: bytes) -> JsonObject | None:
    raw = raw.strip()
    if not raw.startswith(b"{"):
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _ended(proc: _Child, code: int) -> str:
    return "ended" if isinstance(proc, ForkedClient) else f"exited with code {code}"  # the zygote reaps forked ones


def _signal(proc: _Child, sig: int) -> bool:
    """`sig` to the child's process group, or to the child alone while it has none yet (a forked
    client between its fork and its setsid); False when it is gone."""
    try:
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        pass
    try:
        os.kill(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


async def _stop(proc: _Child) -> None:
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        if not _signal(proc, sig):
            return
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue
