"""Reusable helpers for tests that need a running SGLang emulator.

`sim_server(args)` is a context manager: it starts `python -m moe_tui.sim` on a free loopback
port in its own process group, waits for `/health_generate` 200, and kills the group on exit
(also when the test fails). `stream_generate` is a tiny streaming /generate client on httpx.
The heavy lifting lives in `moe_tui.sim.launch` (process) and `moe_tui.sim.loadgen` (load).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator

from moe_tui.sim.launch import SimProcess, SimStartError, free_port, http_status, start_sim
from moe_tui.sim.loadgen import run_load
from tests.support import loopback

__all__ = ["SimProcess", "SimStartError", "free_port", "http_status", "sim_server",
           "stream_generate", "sse_events"]


@contextlib.contextmanager
def sim_server(args: list[str] | None = None, *, ready: bool = True,
               timeout: float = 30.0) -> Iterator[SimProcess]:
    sim = start_sim(args, ready=ready, timeout=timeout)
    try:
        yield sim
    finally:
        sim.stop()


def sse_events(raw: str) -> list[str]:
    """The `data:` payloads of an SSE body, in order."""
    return [block[len("data: "):] for block in raw.split("\n\n") if block.startswith("data: ")]


def stream_generate(base_url: str, payload: dict, timeout: float = 30.0) -> list[dict | str]:
    """POST /generate with stream=true; parsed chunks, with the final "[DONE]" kept as a str."""
    out: list[dict | str] = []
    with loopback.stream("POST", base_url + "/generate", json=payload | {"stream": True},
                      timeout=timeout) as resp:
        resp.raise_for_status()
        buf = ""
        for text in resp.iter_text():
            buf += text
            *events, buf = buf.split("\n\n")
            for event in events:
                if event.startswith("data: "):
                    body = event[len("data: "):]
                    out.append(body if body == "[DONE]" else json.loads(body))
    return out


class Loaded:
    """Closed-loop load on `base_url` from entering until leaving (`with Loaded(url) as load:`), in
    waves of 4 requests a connection from the emulator's own asyncio client: the load ends on an
    event, never on a fixed clock (on a busy box a sample can take seconds, and a load that ended
    first left it idle), and one thread keeps the engine busy where 64 client threads, starved by a
    busy box, left it idle part of each second. `rate`: completed tokens per second, once left."""

    def __init__(self, base_url: str, concurrency: int = 64, input_len: int = 64, output_len: int = 16):
        self.stop = threading.Event()
        self.rate: float | None = None
        self.error: BaseException | None = None  # raised on leaving: a load that broke is no load
        self._args = (base_url, concurrency, 4 * concurrency, input_len, output_len)
        self._runner = threading.Thread(target=self._run)

    def _run(self) -> None:
        tokens, start = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                result = asyncio.run(run_load(*self._args))
                assert result.failed == 0, result.errors
                tokens += result.output_tokens
        except BaseException as exc:  # the test's thread raises it on leaving
            self.error = exc
            return
        self.rate = tokens / (time.monotonic() - start)

    def __enter__(self) -> Loaded:
        self._runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._runner.join()
        if self.error is not None and exc[0] is None:
            raise AssertionError(f"the load on the emulator failed: {self.error!r}") from self.error
