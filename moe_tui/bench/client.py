"""One streamed request against SGLang's /generate or /v1/completions, timed like bench_serving.

Timing (sglang 0.5.23 bench_serving semantics):
- the clock starts just before the POST is sent, *after* a concurrency slot was acquired: time
  spent waiting in the client's own queue is not latency (vLLM #54101 calls this out; we match
  bench_serving and record that wait separately as `queued_s`);
- TTFT: arrival of the first chunk carrying non-empty text;
- each later token-bearing chunk: its arrival and new-token count (/generate: the increase of
  `meta_info.completion_tokens`; /v1/completions: the increase of `usage.completion_tokens` when the
  server sends usage, else 1 per text chunk); ITL splits each chunk gap evenly over its tokens;
- latency (E2E): arrival of the last non-empty line of the stream (normally `data: [DONE]`).
One `perf_counter` reading per socket read stamps every line in that read: closer to arrival than
stamping after each parse. Payloads are serialized before the clock starts.

Stricter than bench_serving, on purpose: a stream that carries an error object, ends without
`[DONE]` or a finish reason, or finishes with reason `abort`, is a failed request (bench_serving
counts some of those as successes with the requested length).

Error kinds: connect, timeout, http_<status>, server_error, stream_cut, aborted, protocol, cancelled.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

# Bytes arrive as each socket read returns them (httpcore reads up to 64 KiB per call and is called
# again at once): no client-side buffer fills up and pauses the reader, the failure vLLM #39963 saw
# with a 64 KiB aiohttp read buffer. Never pass a chunk size to aiter_raw: httpx would then hold
# data back until that many bytes accumulated, delaying every timestamp.
ERROR_TEXT_MAX = 500


@dataclass
class RequestOutcome:
    """What one request did. Times are `perf_counter` seconds unless named otherwise."""

    idx: int
    prompt_len: int
    requested_output_len: int
    phase: str = "timed"
    scheduled_at: float | None = None  # when the arrival process released it
    dispatched_at: float | None = None  # when the dispatcher actually created it
    sent_at: float | None = None  # clock start (slot acquired, just before the POST)
    ttft: float | None = None
    latency: float | None = None
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (seconds after sent_at, new tokens)
    output_len: int = 0
    finish_reason: str | None = None
    ok: bool = False
    error: str = ""
    error_kind: str = ""
    http_status: int | None = None

    def fail(self, kind: str, message: str) -> None:
        self.ok = False
        self.error_kind = kind
        self.error = message[:ERROR_TEXT_MAX]


def _finish_reason(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return str(value.get("type") or json.dumps(value))
    return str(value)


class _StreamState:
    """Parses SSE lines of one response into the outcome; returns True when the stream is done."""

    def __init__(self, outcome: RequestOutcome, api: str, on_tokens: Callable[[float, int], None] | None):
        self.o = outcome
        self.api = api
        self.on_tokens = on_tokens
        self.done = False
        self.last_tokens = 0
        self.t0 = outcome.sent_at or 0.0

    def line(self, raw: bytes, now: float) -> None:
        raw = raw.strip()
        if not raw:
            return
        o = self.o
        o.latency = now - self.t0
        data = raw[5:].lstrip() if raw.startswith(b"data:") else raw
        if data == b"[DONE]":
            self.done = True
            return
        if raw.startswith(b":") or raw.startswith(b"event:"):
            return  # SSE comment or event name
        try:
            msg = json.loads(data)
        except ValueError:
            raise _StreamFailure("protocol", f"unparseable stream line: {raw[:200]!r}") from None
        if not isinstance(msg, dict):
            raise _StreamFailure("protocol", f"stream line is not an object: {raw[:200]!r}")
        if "error" in msg:
            raise _StreamFailure("server_error", f"server error in stream: {json.dumps(msg['error'])[:400]}")
        if self.api == "generate":
            meta = msg.get("meta_info") or {}
            tokens = meta.get("completion_tokens")
            reason = meta.get("finish_reason")
            text = msg.get("text")
        else:
            choices = msg.get("choices") or []
            choice = choices[0] if choices else {}
            text = choice.get("text")
            reason = choice.get("finish_reason")
            usage = msg.get("usage") or {}
            tokens = usage.get("completion_tokens")
            if tokens is None and text:
                tokens = self.last_tokens + 1
        if reason is not None:
            o.finish_reason = _finish_reason(reason)
        if text:
            if tokens is None:
                raise _StreamFailure("protocol", "generate chunk without meta_info.completion_tokens")
            tokens = int(tokens)
            new = tokens - self.last_tokens
            if o.ttft is None:
                o.ttft = now - self.t0
                o.chunks.append((o.ttft, tokens))
                self.last_tokens = tokens
                if self.on_tokens is not None:
                    self.on_tokens(now, tokens)
            elif new > 0:
                o.chunks.append((now - self.t0, new))
                self.last_tokens = tokens
                if self.on_tokens is not None:
                    self.on_tokens(now, new)
        elif tokens is not None and int(tokens) > self.last_tokens and o.ttft is not None:
            # usage-only chunk (completions with include_usage): corrects the count, no new arrival
            self.last_tokens = int(tokens)
        o.output_len = max(o.output_len, self.last_tokens)


class _StreamFailure(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def build_payload(api: str, input_ids: list[int], output_len: int, *, temperature: float,
                  ignore_eos: bool, model: str | None = None) -> bytes:
    if api == "generate":
        body: dict[str, Any] = {
            "input_ids": input_ids,
            "sampling_params": {"temperature": temperature, "max_new_tokens": output_len,
                                "ignore_eos": ignore_eos},
            "stream": True,
        }
    else:
        body = {"model": model or "default", "prompt": input_ids, "max_tokens": output_len,
                "temperature": temperature, "ignore_eos": ignore_eos, "best_of": 1, "stream": True}
    return json.dumps(body, separators=(",", ":")).encode()


async def stream_request(
    client: httpx.AsyncClient, url: str, api: str, payload: bytes, outcome: RequestOutcome, *,
    timeout_s: float, on_tokens: Callable[[float, int], None] | None = None,
) -> RequestOutcome:
    """Send one request and fill `outcome`; never raises except on cancellation."""
    state = _StreamState(outcome, api, on_tokens)
    outcome.sent_at = state.t0 = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            request = client.build_request("POST", url, content=payload,
                                           headers={"content-type": "application/json"})
            response = await client.send(request, stream=True)
            try:
                outcome.http_status = response.status_code
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", "replace")
                    outcome.latency = time.perf_counter() - state.t0
                    outcome.fail(f"http_{response.status_code}",
                                 f"HTTP {response.status_code} {response.reason_phrase}: {body.strip()}")
                    return outcome
                pending = b""
                async for piece in response.aiter_raw():
                    now = time.perf_counter()
                    pending += piece
                    if b"\n" not in piece:
                        continue
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        state.line(line, now)
                if pending.strip():
                    state.line(pending, time.perf_counter())
            finally:
                await response.aclose()
    except _StreamFailure as exc:
        outcome.fail(exc.kind, str(exc))
        return outcome
    except TimeoutError:
        outcome.latency = time.perf_counter() - state.t0
        outcome.fail("timeout", f"no complete answer within the request timeout of {timeout_s:g} s "
                                f"({outcome.output_len} tokens received)")
        return outcome
    except httpx.ConnectError as exc:
        outcome.fail("connect", f"cannot connect to {url}: {exc}")
        return outcome
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        outcome.latency = time.perf_counter() - state.t0
        outcome.fail("stream_cut", f"connection closed mid-stream after {outcome.output_len} tokens: "
                                   f"{exc or type(exc).__name__}")
        return outcome
    except httpx.HTTPError as exc:
        outcome.fail("connect" if outcome.http_status is None else "stream_cut",
                     f"{type(exc).__name__}: {exc}")
        return outcome
    if not state.done and outcome.finish_reason is None:
        outcome.fail("stream_cut", f"stream ended without [DONE] or a finish reason after "
                                   f"{outcome.output_len} tokens")
    elif outcome.finish_reason == "abort":
        outcome.fail("aborted", f"server aborted the request after {outcome.output_len} tokens")
    elif outcome.ttft is None:
        outcome.fail("protocol", "stream finished without any generated text")
    else:
        outcome.ok = True
    return outcome
