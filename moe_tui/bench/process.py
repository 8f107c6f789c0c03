"""Run the load generator in its own process and read its event stream (what a UI should call).

`run_benchmark_subprocess(spec, base_url, on_progress)` starts
`python -m moe_tui bench --events jsonl --spec-file F --base-url U ...` in a new session, so a busy
UI event loop can never delay a request or a timestamp. The child writes one JSON object per line
on stdout: `{"type": "BenchProgress", ...}` about every 250 ms (the fields of
`moe_tui.events.BenchProgress`) and finally `{"type": "BenchResult", ...}` (`BenchResult.to_dict()`).
Other lines are ignored; stderr is kept (tail) for error messages.

To end a run early and keep what it measured, set the `stop` event: the child gets SIGTERM, stops
sending, and reports status "incomplete" with its partial records. Cancelling the awaiting task
instead kills the child (SIGTERM, then SIGKILL of its group after a grace period) and re-raises.
The stdout pipe is drained continuously and progress is handed on latest-wins by a separate task,
so a slow `on_progress` can never block the child's writes (and with them its event loop).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from moe_tui.bench.engine import BenchResult, ProgressCallback, _emit, native_spec
from moe_tui.events import BenchProgress, event_from_dict
from moe_tui.spec import BenchmarkSpec

STOP_GRACE_S = 10.0
STDERR_TAIL_LINES = 30


def bench_argv(spec_file: str, base_url: str, *, python: str | None = None, run_id: int | None = None,
               request_timeout: float | None = None, stall_timeout: float | None = None,
               vocab_size: int | None = None, tokenizer: str | None = None,
               warmup_pause: float | None = None) -> list[str]:
    argv = [python or sys.executable, "-m", "moe_tui", "bench", "--events", "jsonl",
            "--spec-file", spec_file, "--base-url", base_url]
    if run_id is not None:
        argv += ["--run-id", str(run_id)]
    if request_timeout is not None:
        argv += ["--request-timeout", repr(float(request_timeout))]
    if stall_timeout is not None:
        argv += ["--stall-timeout", repr(float(stall_timeout))]
    if vocab_size is not None:
        argv += ["--vocab-size", str(vocab_size)]
    if tokenizer is not None:
        argv += ["--tokenizer", str(tokenizer)]
    if warmup_pause is not None:
        argv += ["--warmup-pause", repr(float(warmup_pause))]
    return argv


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
    """Run `spec` against `base_url` in a child process; progress events go to `on_progress`
    (sync or async callable taking a BenchProgress). Returns the child's BenchResult, or a
    "failed" BenchResult naming the exit code and stderr tail if the child produced none.
    `request_timeout` / `stall_timeout` (seconds, None: the client's defaults) are the child's
    `--request-timeout` / `--stall-timeout`; `warmup_pause` (seconds, None: 1 s) its `--warmup-pause`.
    The spec runs as `native_spec(spec)` (client version filled in): store the run under that
    fingerprint. Raises SpecError (before starting anything) for a spec of another client."""
    spec = native_spec(spec)
    with tempfile.TemporaryDirectory(prefix="moe-tui-bench-") as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(spec.to_json())
        argv = bench_argv(str(spec_file), base_url, python=python, run_id=run_id,
                          request_timeout=request_timeout, stall_timeout=stall_timeout, vocab_size=vocab_size,
                          tokenizer=tokenizer, warmup_pause=warmup_pause)
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONUNBUFFERED"] = "1"
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, start_new_session=True, env=child_env)
        child = _ChildRun(proc, on_progress)
        code, result = await child.run(stop)
        if result is None:
            result = BenchResult(status="failed", spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                                 error=f"benchmark process exited with code {code} without a result:\n"
                                       f"{child.stderr_tail()}",
                                 errors_by_kind={"client_process": 1})
        return result


class _ChildRun:
    """One benchmark child: its stdout read as events, its stderr tail kept, progress handed on
    latest-wins by its own task, and SIGTERM to its group when `stop` is set."""

    def __init__(self, proc: asyncio.subprocess.Process, on_progress: ProgressCallback | None):
        self.proc = proc
        self.on_progress = on_progress
        self.stderr_lines: list[str] = []
        self.latest: list[BenchProgress] = []
        self.wake = asyncio.Event()
        self.finished = False

    def stderr_tail(self) -> str:
        return "\n".join(self.stderr_lines[-STDERR_TAIL_LINES:])

    async def run(self, stop: asyncio.Event | None) -> tuple[int, BenchResult | None]:
        """Read the child to its end: (exit code, its BenchResult or None). Cancelling kills it."""
        stderr_task = asyncio.create_task(self._drain_stderr())
        deliver_task = asyncio.create_task(self._deliver())
        stop_task = asyncio.create_task(self._stop_on_request(stop)) if stop is not None else None
        try:
            result = await self._read_events()
            code = await self.proc.wait()
            await stderr_task
            self.finished = True
            self.wake.set()
            await deliver_task
        except asyncio.CancelledError:
            await _stop(self.proc)
            for task in (stderr_task, deliver_task):
                task.cancel()
            raise
        finally:
            if stop_task is not None:
                stop_task.cancel()
        return code, result

    async def _read_events(self) -> BenchResult | None:
        result: BenchResult | None = None
        assert self.proc.stdout is not None
        async for raw in _read_lines(self.proc.stdout):
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
                result = BenchResult.from_dict(obj)
        return result

    async def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in _read_lines(self.proc.stderr):
            self.stderr_lines.append(raw.decode("utf-8", "replace"))
            del self.stderr_lines[:-STDERR_TAIL_LINES]

    async def _deliver(self) -> None:
        while not self.finished or self.latest:
            await self.wake.wait()
            self.wake.clear()
            while self.latest:
                await _emit(self.on_progress, self.latest.pop())
                self.latest.clear()

    async def _stop_on_request(self, stop: asyncio.Event) -> None:
        await stop.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _parse(raw: bytes) -> dict[str, Any] | None:
    raw = raw.strip()
    if not raw.startswith(b"{"):
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


async def _stop(proc: asyncio.subprocess.Process) -> None:
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue
