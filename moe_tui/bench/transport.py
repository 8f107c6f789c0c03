"""The benchmark's HTTP transport: one aiohttp `ClientSession` per run and its connection pool.

Transport: aiohttp, one `ClientSession` per run (`open_session`) whose keep-alive pool holds one
connection per concurrency slot. `open_connections` fills that pool before the timed phase (the
engine calls it after warmup): a burst of 1024 requests would otherwise open 1024 TCP connections
inside its own TTFTs (client-added TTFT 282 ms at concurrency 1024 on the emulator, see
benches/results/client_headroom-2026-12-01.txt), which measures connection setup, not the server.
sglang.bench_serving differs: it opens a new aiohttp session, hence a new connection, per
request, so each of its TTFTs includes a TCP handshake on a cold connection (at low concurrency a
fraction of a millisecond on loopback; in a burst of 1024 on the emulator, client-added TTFT
was 455 ms for bench_serving, 289 ms here before the pool was pre-opened, 157 ms after). The
pool's connections are counted (`ConnectionCountingConnector.opened`), so a run can state how many
connections its timed phase still had to open. Bytes are taken as each socket read delivers them
(`StreamReader.iter_any`), never line by line: one wake-up per read instead of one per line, and no
line-length limit. The session's read buffer is 1 MiB (`READ_BUFSIZE`): aiohttp pauses the socket
when a response's unread bytes pass twice that, and a 64 KiB buffer throttled long outputs in
vLLM's client (#39963: 44 vs 486 tok/s). Work per chunk is a timestamp and a token count; ITL
lists and statistics are built after the run.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, TypedDict

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

READ_BUFSIZE = 1 << 20
CONNECT_TIMEOUT_S = 30.0
# Below the server's own idle limit (SGLang runs uvicorn with timeout_keep_alive=5): a connection
# the server may already have closed is never reused, so a request is never sent into a closing
# socket and miscounted as a cut stream.
KEEPALIVE_S = 4.0
# Connections beyond the concurrency cap, for control calls (/model_info, /flush_cache, ...).
SPARE_CONNECTIONS = 4
# Opening the pool before the timed phase: each GET's limit, and the whole step's.
PREOPEN_LIMITS = aiohttp.ClientTimeout(total=30.0, sock_connect=CONNECT_TIMEOUT_S)
PREOPEN_TIMEOUT_S = 60.0

def stall_limits(stall_timeout_s: float | None) -> aiohttp.ClientTimeout:
    """The per-request aiohttp timeout: the session's (no total: `asyncio.timeout` holds that)
    plus the stall limit as `sock_read`. Built once per distinct value: every request shares it."""
    limits = _STALL_LIMITS.get(stall_timeout_s)
    if limits is None:
        limits = _STALL_LIMITS[stall_timeout_s] = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=stall_timeout_s)
    return limits


_STALL_LIMITS: dict[float | None, aiohttp.ClientTimeout] = {}


class ConnectionCountingConnector(aiohttp.TCPConnector):
    """TCPConnector that counts the distinct connections it has handed out (`opened`): the
    difference over a phase is how many TCP connections that phase had to open itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened = 0
        self._seen: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    async def connect(self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout) -> Connection:
        conn = await super().connect(req, traces, timeout)
        protocol = conn.protocol
        if protocol is not None and protocol not in self._seen:
            self._seen.add(protocol)
            self.opened += 1
        return conn


def connections_opened(session: aiohttp.ClientSession) -> int | None:
    """How many connections the session's connector has opened so far (None: not a counting one)."""
    connector = session.connector
    return connector.opened if isinstance(connector, ConnectionCountingConnector) else None


def open_session(connections: int, api_key: str | None = None) -> aiohttp.ClientSession:
    """The run's HTTP/1.1 keep-alive session: `connections` streams at once plus a few spares.

    aiohttp's default pool limit (100) would queue requests inside the client above concurrency
    100 and count that wait as TTFT; here the pool is sized to the concurrency cap instead."""
    connector = ConnectionCountingConnector(limit=connections + SPARE_CONNECTIONS, limit_per_host=0,
                                            keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(
        connector=connector, read_bufsize=READ_BUFSIZE, trust_env=False,
        timeout=stall_limits(None), cookie_jar=aiohttp.DummyCookieJar(),
        headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
    )


class PreopenReport(TypedDict):
    """What `open_connections` did (self-check fields of the run)."""

    connections_preopen_target: int
    connections_preopened: int | None  # new connections; None: the connector does not count
    connections_preopen_s: float
    connections_preopen_errors: int
    connections_preopen_error: str  # the first message, or ""


async def open_connections(session: aiohttp.ClientSession, base_url: str, count: int, *,
                           timeout_s: float = PREOPEN_TIMEOUT_S) -> PreopenReport:
    """Fill the session's pool with `count` open keep-alive connections: `count` concurrent
    `GET /v1/models`. That endpoint is answered by SGLang's HTTP front alone (the model list),
    unlike /health or /health_generate, which push a generation through the scheduler.

    All requests are started in one loop turn, so each finds no idle connection and opens its own
    (idle ones already in the pool are reused first; together they make `count`). Any HTTP
    status counts: the connection is what is wanted. Failures are reported, never raised: the
    timed phase then opens what is missing itself, and `connections_opened_timed` says so.
    Returns what it did (`PreopenReport`)."""
    before = connections_opened(session)
    url = f"{base_url}/v1/models"
    errors: list[str] = []

    async def one() -> None:
        try:
            async with session.get(url, timeout=PREOPEN_LIMITS) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(one() for _ in range(count)))
    except TimeoutError:
        errors.append(f"not all answered within {timeout_s:g} s")
    after = connections_opened(session)
    opened = None if before is None or after is None else after - before
    return {"connections_preopen_target": count, "connections_preopened": opened,
            "connections_preopen_s": time.perf_counter() - started,
            "connections_preopen_errors": len(errors), "connections_preopen_error": errors[0][:200] if errors else ""}
