"""httpx for tests that talk to a server on loopback: the calls of httpx's own API (`get`, `post`,
`stream`, `Client`, `AsyncClient`) with one TLS context for the whole worker.

httpx builds a TLS context for every client, and `httpx.get` is one client per call: each read the
CA bundle again (~25 ms of CPU), hundreds of times a worker for plain-HTTP requests on 127.0.0.1.
Passing `verify=` explicitly still wins, as with httpx.
"""

from __future__ import annotations

from typing import Any

import httpx

# The product's one context a process (certifi's bundle: the test session's SSL_CERT_FILE is empty).
from moe_tui.servers.keys import tls_context


def _kw(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"verify": tls_context(), **kwargs}


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, **_kw(kwargs))


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, **_kw(kwargs))


def stream(method: str, url: str, **kwargs: Any):  # noqa: ANN201 (httpx's own context manager)
    return httpx.stream(method, url, **_kw(kwargs))


def Client(**kwargs: Any) -> httpx.Client:  # noqa: N802 (httpx's name)
    return httpx.Client(**_kw(kwargs))


def AsyncClient(**kwargs: Any) -> httpx.AsyncClient:  # noqa: N802 (httpx's name)
    return httpx.AsyncClient(**_kw(kwargs))
