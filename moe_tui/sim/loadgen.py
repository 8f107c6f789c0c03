"""A tiny closed-loop streaming client for calibrating and testing the emulator.

Not the product's benchmark engine (that is `moe_tui.bench`): just enough of
`sglang.bench_serving --backend sglang` to check the emulator against its performance model.
It posts `/generate` with `input_ids` (like the `random-ids` dataset), `stream: true`,
`ignore_eos`, keeps `concurrency` requests in flight until `num_prompts` are done, and uses
bench_serving's definitions: output throughput = output tokens (`meta_info.completion_tokens`
of the last chunk) / wall duration; TTFT = send to first chunk with non-empty text;
TPOT = (latency - TTFT) / (output_len - 1).

Why raw asyncio streams instead of aiohttp: at fast time scales a whole 1024-request wave lasts
a few seconds, and aiohttp's per-request client cost (~0.5 ms) would be measured as emulator
slowness. Here each worker keeps one keep-alive HTTP/1.1 connection (opened before the timed
window), request bodies are encoded before it, and only `completion_tokens` is decoded.

    python -m moe_tui.sim.loadgen --url http://127.0.0.1:30000 --concurrency 64 \
        --num-prompts 256 --input-len 1024 --output-len 1024 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from moe_tui.sim.model import mean_or_zero

_TOKENS_KEY = b'"completion_tokens":'
_EMPTY_TEXT = b'data: {"text":""'


@dataclass
class LoadResult:
    concurrency: int
    num_prompts: int
    completed: int
    failed: int
    duration_s: float
    output_tokens: int
    chunks: int
    output_throughput: float
    chunk_rate: float
    mean_ttft_ms: float
    mean_tpot_ms: float
    mean_e2e_ms: float
    errors: list[str] = field(default_factory=list)


class _Conn:
    """One keep-alive HTTP/1.1 connection that streams SSE responses of /generate."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port,
                                                                 limit=16 * 1024 * 1024)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    async def post_stream(self, path: str, body: bytes, on_event: Callable[[bytes], None]) -> int:
        """Send one request; call on_event(bytes) per SSE event; return the HTTP status."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            pending = b""
            while True:
                size_line = await self.reader.readline()
                if not size_line:
                    raise ConnectionError("stream ended without the final chunk")
                size = int(size_line.split(b";")[0], 16)
                data = await self.reader.readexactly(size + 2) if size else b""
                if size == 0:
                    await self.reader.readline()
                    break
                pending += data[:-2]
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    if event:
                        on_event(event)
        else:
            length = int(headers.get("content-length", "0"))
            data = await self.reader.readexactly(length) if length else b""
            if status == 200:
                on_event(b"data: " + data)
        if headers.get("connection", "").lower() == "close":
            self.close()
            self.writer = None
        return status


def _prompt_bodies(num_prompts: int, input_len: int, output_len: int, vocab_size: int,
                   seed: int) -> list[bytes]:
    """The /generate request bodies: random token ids from `seed`, fixed output length."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(num_prompts):
        ids = [rng.randrange(vocab_size) for _ in range(input_len)]
        bodies.append(json.dumps({
            "input_ids": ids, "stream": True,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0,
                                "ignore_eos": True}}).encode())
    return bodies


@dataclass
class _Tally:
    """What the workers measured, request by request."""

    ttfts: list[float] = field(default_factory=list)
    tpots: list[float] = field(default_factory=list)
    e2es: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tokens: int = 0
    chunks: int = 0
    done: int = 0


async def _one_request(conn: _Conn, body: bytes, tally: _Tally) -> None:
    """One streamed /generate: time to first token, tokens (the last completion_tokens), latency."""
    st = time.perf_counter()
    state = {"ttft": 0.0, "n": 0}

    def on_event(event: bytes) -> None:
        tally.chunks += 1
        if event == b"data: [DONE]":
            return
        at = event.rfind(_TOKENS_KEY)
        if at < 0:
            raise ValueError(f"chunk without completion_tokens: {event[:120]!r}")
        if not event.startswith(_EMPTY_TEXT):
            end = at + len(_TOKENS_KEY)
            stop = end
            while event[stop:stop + 1].isdigit():
                stop += 1
            state["n"] = int(event[end:stop])
            if state["ttft"] == 0.0:
                state["ttft"] = time.perf_counter() - st

    status = await conn.post_stream("/generate", body, on_event)
    if status != 200:
        tally.errors.append(f"HTTP {status}")
        return
    latency = time.perf_counter() - st
    n = int(state["n"])
    tally.tokens += n
    tally.done += 1
    tally.ttfts.append(state["ttft"])
    tally.e2es.append(latency)
    if n > 1:
        tally.tpots.append((latency - state["ttft"]) / (n - 1))


async def run_load(url: str, concurrency: int, num_prompts: int, input_len: int, output_len: int,
                   vocab_size: int = 8192, seed: int = 42, timeout_s: float = 600.0,
                   warm_connections: bool = True) -> LoadResult:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    bodies = _prompt_bodies(num_prompts, input_len, output_len, vocab_size, seed)
    tally = _Tally()
    workers = min(concurrency, num_prompts)
    conns = [_Conn(host, port) for _ in range(workers)]
    next_prompt = 0

    async def worker(conn: _Conn) -> None:
        nonlocal next_prompt
        while next_prompt < num_prompts:
            body = bodies[next_prompt]
            next_prompt += 1
            try:
                await _one_request(conn, body, tally)
            except Exception as exc:  # noqa: BLE001 - a failed request is a result
                tally.errors.append(repr(exc))
                conn.close()
                conn.writer = None

    warm = json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": 1}}).encode()
    try:
        if warm_connections:
            # Connection setup is a client cost: keep it out of the measured window.
            await asyncio.gather(*(c.post_stream("/generate", warm, lambda e: None)
                                   for c in conns))
        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(worker(c) for c in conns)), timeout_s)
        duration = time.perf_counter() - start
    finally:
        for c in conns:
            c.close()
    return LoadResult(
        concurrency=concurrency, num_prompts=num_prompts, completed=tally.done,
        failed=len(tally.errors), duration_s=duration, output_tokens=tally.tokens,
        chunks=tally.chunks, output_throughput=tally.tokens / duration,
        chunk_rate=tally.chunks / duration, mean_ttft_ms=mean_or_zero(tally.ttfts) * 1000,
        mean_tpot_ms=mean_or_zero(tally.tpots) * 1000, mean_e2e_ms=mean_or_zero(tally.e2es) * 1000,
        errors=tally.errors[:5])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m moe_tui.sim.loadgen",
                                description="closed-loop streaming load against the emulator")
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--num-prompts", type=int, default=10)
    p.add_argument("--input-len", type=int, default=1024)
    p.add_argument("--output-len", type=int, default=1024)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    res = asyncio.run(run_load(a.url, a.concurrency, a.num_prompts, a.input_len, a.output_len,
                               seed=a.seed))
    if a.json:
        print(json.dumps(asdict(res)))
    else:
        for k, v in asdict(res).items():
            print(f"{k:>20}: {v}")
    return 0 if res.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
