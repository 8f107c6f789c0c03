"""One streamed request against SGLang's /generate or /v1/completions, timed like bench_serving.

Timing (sglang 0.5.23 bench_serving semantics):
- the clock starts just before the POST is sent, *after* a concurrency slot was acquired: time
  spent waiting in the client's own queue is not latency (vLLM #54101 calls this out; we match
  bench_serving and record that wait separately as `queued_s`);
- TTFT: arrival of the first chunk carrying non-empty text;
- each later token-bearing chunk: its arrival and new-token count (/generate: the increase of
  `meta_info.completion_tokens`; /v1/completions: the increase of `usage.completion_tokens`, which
  the request asks SGLang to put on every chunk with `stream_options.continuous_usage_stats`);
  ITL splits each chunk gap evenly over its tokens. Counting chunks would undercount: under load
  SGLang's tokenizer manager sends a stream's queued outputs as one chunk of many tokens
  (tokenizer_manager.py `_coalesce_streaming_chunks`). A server that sends no usage at all gets
  bench_serving's rule: a stream finished by length produced the requested tokens
  (`async_request_openai_completions`, benchmark/serving.py);
- latency (E2E): arrival of the last non-empty line of the stream (normally `data: [DONE]`).
One `perf_counter` reading per socket read stamps every line in that read: closer to arrival than
stamping after each parse. Payloads are serialized before the clock starts.

Transport (the session, its pool and its pre-opening): `moe_tui.bench.transport`.

/generate sends cumulative `text` and `output_ids` by default, so a stream's lines grow with its
output (kilobytes each at 1,000 tokens) and decoding every line whole is quadratic in the output
length. A line shaped as SGLang writes it (`{"text": "...", ..., "meta_info": {...}}`) is read
by looking at the start of `text` (empty or not) and decoding only the trailing `meta_info` object;
any other line (errors, another key order, a parse failure) is decoded whole with the exact rules.

Stricter than bench_serving, on purpose: a stream that carries an error object, ends without
`[DONE]` or a finish reason, or finishes with reason `abort`, is a failed request (bench_serving
counts some of those as successes with the requested length).

Two time limits per request: `timeout_s`, the whole request (default in the engine: 600 s or
more), and `stall_timeout_s`, the longest the response may stay silent (no byte at all, headers
included: aiohttp's `sock_read`, re-armed on every read). Both fail the request with kind "timeout",
the message saying which limit fired. The stall limit is what frees a hung server quickly; it must
stay above the longest legitimate silence (see `DEFAULT_STALL_TIMEOUT_S`).

Error kinds: connect, timeout, http_<status>, server_error, stream_cut, aborted, protocol, cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from moe_tui.bench.settings import API_KEY_ENV as API_KEY_ENV  # re-exported: callers knew it here
from moe_tui.bench.settings import DEFAULT_STALL_TIMEOUT_S as DEFAULT_STALL_TIMEOUT_S
from moe_tui.bench.transport import stall_limits

ERROR_TEXT_MAX = 500
# Bounds on what a server may make the client hold: one SSE line (a /generate line at 32k output
# tokens is well under 1 MiB) and the body of an error answer.
MAX_LINE_BYTES = 16 * 2**20
ERROR_BODY_MAX = 64 * 2**10
JSON_HEADERS = {"Content-Type": "application/json"}

_DATA = b"data:"
_DONE = b"[DONE]"
_META_KEY = b'"meta_info"'
_GENERATE_LINE = b'data: {"text":'
# Where the value of the leading "text" key starts, for both separators json.dumps may write.
_TEXT_OPENINGS = ((b'data: {"text":"', 15), (b'data: {"text": "', 16))


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


def _finish_reason(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return str(value.get("type") or orjson.dumps(value).decode())
    return str(value)


def _generate_fields_fast(buf: bytes, start: int = 0, end: int | None = None) -> tuple[bool, Any, Any] | None:
    """(text is non-empty, completion_tokens, finish_reason) of the raw /generate SSE line
    `buf[start:end]` in SGLang's shape (`data: {"text": ..., "meta_info": {...}}`), decoding only
    its trailing meta_info and copying nothing else; None when the line is not in that shape.

    A `"meta_info"` found by rfind is a key, not text: inside a JSON string every quote is escaped,
    so the byte pattern cannot occur there."""
    if end is None:
        end = len(buf)
    for opening, offset in _TEXT_OPENINGS:  # noqa: B007 (offset is read after the break)
        if buf.startswith(opening, start, end):
            break
    else:
        return None
    key = buf.rfind(_META_KEY, start, end)
    if key < 0 or not buf.endswith(b"}", start, end):
        return None
    try:
        meta = orjson.loads(buf[buf.index(b":", key + len(_META_KEY), end) + 1:end - 1])
    except (orjson.JSONDecodeError, ValueError):
        return None  # meta_info is not the last key: decode the whole line instead
    if not isinstance(meta, dict):
        return None
    return buf[start + offset] != 0x22, meta.get("completion_tokens"), meta.get("finish_reason")  # 0x22: '"'


class _StreamState:
    """Parses SSE lines of one response into the outcome; `done` once `[DONE]` arrived."""

    __slots__ = ("o", "generate", "on_tokens", "done", "last_tokens", "t0", "usage_seen")

    def __init__(self, outcome: RequestOutcome, api: str, on_tokens: Callable[[float, int], None] | None):
        self.o = outcome
        self.generate = api == "generate"
        self.on_tokens = on_tokens
        self.done = False
        self.last_tokens = 0
        self.t0 = outcome.sent_at or 0.0
        self.usage_seen = False  # /v1/completions: did any chunk carry usage.completion_tokens?

    def line(self, buf: bytes, start: int, end: int, now: float) -> None:
        """One line of the stream, `buf[start:end]` (without its newline), read at `now`."""
        o = self.o
        fast = (_generate_fields_fast(buf, start, end)
                if self.generate and buf.startswith(_GENERATE_LINE, start, end) else None)
        if fast is not None:
            o.latency = now - self.t0
            has_text, tokens, reason = fast
        else:
            raw = buf[start:end].strip()
            if not raw:
                return
            o.latency = now - self.t0
            data = raw[5:].lstrip() if raw.startswith(_DATA) else raw
            if data == _DONE:
                self.done = True
                return
            if raw[:1] == b":" or raw.startswith(b"event:"):
                return  # SSE comment or event name
            has_text, tokens, reason = self._decode(raw, data)
        if reason is not None:
            o.finish_reason = _finish_reason(reason)
        if tokens is not None:
            tokens = self._checked_count(tokens)
        if has_text:
            if tokens is None:
                raise _StreamFailure("protocol", "generate chunk without meta_info.completion_tokens")
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
        elif tokens is not None and tokens > self.last_tokens and o.ttft is not None:
            # usage-only chunk (completions with include_usage): corrects the count, no new arrival
            self.last_tokens = tokens
        if self.last_tokens > o.output_len:
            o.output_len = self.last_tokens

    def _checked_count(self, value: object) -> int:
        """The server's cumulative token count, refused (the request fails) when impossible: not a
        whole number, negative, or over the max_new_tokens this request asked for. Evidence is
        checked, not taken: a 2x over-count would otherwise be stored as 2x the throughput, and a
        count of 3e7 would be spread into 3e7 inter-token gaps in the client's memory."""
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value \
                or value in (float("inf"), float("-inf")) or int(value) != value:
            raise _StreamFailure("protocol", f"server reported completion_tokens {str(value)[:40]!r}: not a whole number")
        count = int(value)
        if count < 0:
            raise _StreamFailure("protocol", f"server reported {count} completion tokens: a count cannot be negative")
        if count > self.o.requested_output_len:
            raise _StreamFailure("protocol", f"server reported {count} completion tokens, over the "
                                             f"max_new_tokens of {self.o.requested_output_len} this request asked for")
        return count

    def _decode(self, raw: bytes, data: bytes) -> tuple[bool, Any, Any]:
        """The whole line decoded: (text is non-empty, token count or None, finish reason)."""
        try:
            msg = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _StreamFailure("protocol", f"unparseable stream line: {raw[:200]!r}") from None
        if not isinstance(msg, dict):
            raise _StreamFailure("protocol", f"stream line is not an object: {raw[:200]!r}")
        if "error" in msg:
            raise _StreamFailure("server_error",
                                 f"server error in stream: {orjson.dumps(msg['error']).decode()[:400]}")
        if self.generate:
            meta = msg.get("meta_info") or {}
            return bool(msg.get("text")), meta.get("completion_tokens"), meta.get("finish_reason")
        choices = msg.get("choices") or []
        choice = choices[0] if choices else {}
        text = choice.get("text")
        usage = msg.get("usage") or {}
        tokens = usage.get("completion_tokens")
        if tokens is not None:
            self.usage_seen = True
        elif text:
            tokens = self.last_tokens + 1  # no usage: a lower bound, settled at the end
        return bool(text), tokens, choice.get("finish_reason")


class _StreamFailure(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def build_payload(api: str, input_ids: list[int], output_len: int, *, temperature: float,
                  ignore_eos: bool, model: str | None = None) -> bytes:
    if api == "generate":
        body: dict[str, object] = {
            "input_ids": input_ids,
            "sampling_params": {"temperature": temperature, "max_new_tokens": output_len,
                                "ignore_eos": ignore_eos},
            "stream": True,
        }
    else:
        body = {"model": model or "default", "prompt": input_ids, "max_tokens": output_len,
                "temperature": temperature, "ignore_eos": ignore_eos, "best_of": 1, "stream": True,
                # cumulative usage on every chunk (serving_completions.py), no usage-only tail chunk
                "stream_options": {"continuous_usage_stats": True}}
    return orjson.dumps(body)


async def stream_request(
    session: aiohttp.ClientSession, url: str, api: str, payload: bytes, outcome: RequestOutcome, *,
    timeout_s: float, stall_timeout_s: float | None = None,
    on_tokens: Callable[[float, int], None] | None = None,
) -> RequestOutcome:
    """Send one request and fill `outcome`; never raises except on cancellation.
    `stall_timeout_s`: fail as "timeout" once the response stays silent that long (None: no limit
    beyond `timeout_s`)."""
    state = _StreamState(outcome, api, on_tokens)
    perf_counter = time.perf_counter
    limits = stall_limits(stall_timeout_s)
    outcome.sent_at = state.t0 = perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(url, data=payload, headers=JSON_HEADERS, timeout=limits) as response:
                outcome.http_status = response.status
                if response.status != 200:
                    body = (await response.content.read(ERROR_BODY_MAX)).decode("utf-8", "replace")
                    outcome.latency = perf_counter() - state.t0
                    outcome.fail(f"http_{response.status}",
                                 f"HTTP {response.status} {response.reason or ''}: {body.strip()}")
                    return outcome
                await _feed_lines(response, state)
    except _StreamFailure as exc:
        outcome.fail(exc.kind, str(exc))
        return outcome
    except aiohttp.SocketTimeoutError:  # sock_read: nothing arrived for stall_timeout_s
        outcome.latency = perf_counter() - state.t0
        where = (f"mid-stream after {outcome.output_len} tokens" if outcome.http_status is not None
                 else "before any response")
        outcome.fail("timeout", f"server silent for {stall_timeout_s:g} s (stall timeout) {where}")
        return outcome
    except aiohttp.ServerTimeoutError as exc:  # a TimeoutError too: the socket connect timed out
        outcome.fail("connect", f"cannot connect to {url}: {exc or type(exc).__name__}")
        return outcome
    except TimeoutError:
        outcome.latency = perf_counter() - state.t0
        outcome.fail("timeout", f"no complete answer within the request timeout of {timeout_s:g} s "
                                f"({outcome.output_len} tokens received)")
        return outcome
    except aiohttp.ClientConnectorError as exc:
        outcome.fail("connect", f"cannot connect to {url}: {exc}")
        return outcome
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
            ConnectionError) as exc:
        outcome.latency = perf_counter() - state.t0
        outcome.fail("stream_cut", f"connection closed mid-stream after {outcome.output_len} tokens: "
                                   f"{exc or type(exc).__name__}")
        return outcome
    except (aiohttp.ClientError, OSError) as exc:
        outcome.fail("connect" if outcome.http_status is None else "stream_cut",
                     f"{type(exc).__name__}: {exc}")
        return outcome
    _judge_stream_end(outcome, state.done)
    if outcome.ok and not state.generate and not state.usage_seen and outcome.finish_reason == "length":
        # bench_serving's rule for a server that reports no usage: a length finish means every
        # requested token was produced; the uncounted ones join the last chunk.
        missing = outcome.requested_output_len - outcome.output_len
        if missing > 0 and outcome.chunks:
            at, n = outcome.chunks[-1]
            outcome.chunks[-1] = (at, n + missing)
            outcome.output_len = outcome.requested_output_len
    return outcome


async def _feed_lines(response: aiohttp.ClientResponse, state: _StreamState) -> None:
    """Hand every line of the streamed body to `state.line`, stamped with its arrival time.
    Lines are handed on as (buffer, start, end): splitting would copy every byte of the (long,
    cumulative) lines once more."""
    perf_counter = time.perf_counter
    pending = b""
    line = state.line
    async for piece in response.content.iter_any():
        now = perf_counter()
        if pending:
            piece = pending + piece
        find = piece.find
        start = 0
        newline = find(b"\n")
        while newline >= 0:
            if newline > start:  # SSE events end with a blank line: skip those
                line(piece, start, newline, now)
            start = newline + 1
            newline = find(b"\n", start)
        pending = piece[start:] if start < len(piece) else b""
        if len(pending) > MAX_LINE_BYTES:  # a never-ending line must not eat the client's memory
            raise _StreamFailure("protocol", f"a stream line over {MAX_LINE_BYTES} bytes without an end of line")
    if pending.strip():
        line(pending, 0, len(pending), perf_counter())


def _judge_stream_end(outcome: RequestOutcome, done: bool) -> None:
    """A stream that ended cleanly: ok only with [DONE] or a finish reason, no abort, and text."""
    if not done and outcome.finish_reason is None:
        outcome.fail("stream_cut", f"stream ended without [DONE] or a finish reason after "
                                   f"{outcome.output_len} tokens")
    elif outcome.finish_reason == "abort":
        outcome.fail("aborted", f"server aborted the request after {outcome.output_len} tokens")
    elif outcome.ttft is None:
        outcome.fail("protocol", "stream finished without any generated text")
    else:
        outcome.ok = True
