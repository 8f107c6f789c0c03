"""The benchmark client process: `python -m moe_tui.bench.worker` runs benchmarks one after another,
each asked for by one JSON line on stdin, in one event loop (what `moe_tui.bench.process` starts).

A queue item's warmup pass and its timed run are two runs of one such process. Its imports
(aiohttp, numpy: ~0.3 s of CPU on the 2-core box, benches/client_start.py) are done before the
first request; the runner forks it from `moe_tui.bench.zygote`, which did them
once, so its clients start without them (an exec'd one, `run_benchmark_subprocess`, pays them).
This module imports only the standard library at its top: the engine is imported once it runs.

Protocol. Each stdin line is a request `{"spec": {...}, "base_url": ..., "run_id": ..., "request_timeout":
..., "stall_timeout": ..., "vocab_size": ..., "tokenizer": ..., "warmup_pause": ..., "api_key": ...}`
(None or absent: the client's default; `api_key` reaches `bench.settings.API_KEY_ENV` for that run only,
never a command line). For each, stdout carries `{"type": "BenchProgress", ...}` lines about every
250 ms and one `{"type": "BenchResult", ...}` (`BenchResult.to_dict()`), whose self-check has
`client_process_run` (1 for the first run of this process, 2 for the timed run after its warmup
pass). End of stdin ends the process. SIGTERM during a run stops that run (it ends "incomplete" with
what it measured, as `moe-tui bench` does); SIGTERM between runs ends the process.

Between runs the process collects its garbage (`gc.collect`): the timed phase freezes what is alive
at its start (`moe_tui.bench.live.QuietGc`), and the warmup pass's dead cycles should not be in it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from moe_tui.events import BenchProgress
    from moe_tui.export.records import BenchResultJson

class _Serve:
    """The process's loop: read a request, run it, answer; SIGTERM stops the run, or the process."""

    def __init__(self) -> None:
        self.stop: asyncio.Event | None = None  # the running benchmark's, None between runs
        self.quit = asyncio.Event()
        self.runs = 0

    def on_sigterm(self) -> None:
        if self.stop is not None:
            self.stop.set()
        else:
            self.quit.set()

    async def main(self) -> None:
        import moe_tui.bench.engine  # noqa: F401  (the imports, before the first request: see above)

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.on_sigterm)
        lines: asyncio.Queue[bytes] = asyncio.Queue()
        threading.Thread(target=_read_stdin, args=(loop, lines), name="requests", daemon=True).start()
        quit_wait = asyncio.create_task(self.quit.wait())
        try:
            while True:
                line_task = asyncio.create_task(lines.get())
                await asyncio.wait({line_task, quit_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not line_task.done():
                    line_task.cancel()
                    return
                line = line_task.result()
                if not line:
                    return
                if line.strip():
                    await self.one(line)
                    gc.collect()  # between runs: see the module docstring
        finally:
            quit_wait.cancel()

    async def one(self, line: bytes) -> None:
        from moe_tui.bench.engine import run_benchmark
        from moe_tui.bench.result import BenchResult
        from moe_tui.bench.settings import API_KEY_ENV
        from moe_tui.spec import BenchmarkSpec, SpecError

        self.runs += 1
        self.stop = asyncio.Event()
        if self.quit.is_set():
            # SIGTERM landed after this request was written and before its run began (taken then for
            # "between runs"): it was meant for this run, which stops at once and says what it measured.
            self.stop.set()
        try:
            request = json.loads(line)
            spec = BenchmarkSpec.from_dict(request["spec"], "request")
        except (ValueError, KeyError, TypeError, SpecError) as exc:
            self.stop = None
            _write(BenchResult(status="failed", error=f"bad request: {exc}",
                               errors_by_kind={"client_process": 1}).event_line())
            return
        key = request.get("api_key")
        if key:
            os.environ[API_KEY_ENV] = key
        else:
            os.environ.pop(API_KEY_ENV, None)
        try:
            result = await run_benchmark(
                spec, request["base_url"], on_progress=_progress, request_timeout=request.get("request_timeout"),
                stall_timeout=request.get("stall_timeout"), vocab_size=request.get("vocab_size"),
                tokenizer=request.get("tokenizer"), run_id=request.get("run_id"), stop=self.stop,
                **({} if request.get("warmup_pause") is None else {"warmup_pause_s": request["warmup_pause"]}))
        except SpecError as exc:
            result = BenchResult(status="failed", spec=spec.canonical_dict(), fingerprint=spec.fingerprint,
                                 error=str(exc), errors_by_kind={"setup": 1})
        finally:
            self.stop = None
            os.environ.pop(API_KEY_ENV, None)
        result.selfcheck["client_process_run"] = self.runs
        _write(result.event_line())


def _read_stdin(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[bytes]) -> None:
    """The request lines, then b"" at end of input. A thread of its own (blocked in read, it holds
    no lock the loop needs): stdin may be any file, which the loop's pipe transport refuses."""
    try:
        for line in sys.stdin.buffer:
            loop.call_soon_threadsafe(lines.put_nowait, line)
    except (OSError, ValueError):
        pass
    try:
        loop.call_soon_threadsafe(lines.put_nowait, b"")
    except RuntimeError:  # the loop already closed (SIGTERM between runs)
        pass


def _write(payload: BenchResultJson) -> None:
    sys.stdout.write(json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def _progress(event: BenchProgress) -> None:
    sys.stdout.write(event.to_json() + "\n")
    sys.stdout.flush()


def main() -> int:
    asyncio.run(_Serve().main())
    return 0


if __name__ == "__main__":
    sys.exit(main())
