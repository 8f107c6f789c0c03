"""API keys of the servers this process started, by base URL: who talks to a server sends its key.

A profile's optional `api_key` is passed to SGLang as `--api-key` (the server then answers only
requests bearing it). The server manager registers it here when it launches the server; the
benchmark child gets it in its environment (`bench.settings.API_KEY_ENV`, never on a command line)
and the correctness gate sends it. In-process only: nothing here is written anywhere.

`server_client` opens the HTTP client every part of moe-tui uses to talk to a server: no proxy or
certificate settings from the environment, the server's key, and one TLS context for the whole
process (httpx builds a fresh one for each client otherwise, reading the CA bundle again: ~25 ms of
CPU per server start, per gate, per profiled run).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

    import httpx

_KEYS: dict[str, str] = {}


def register(base_url: str, key: str) -> None:
    if key:
        _KEYS[base_url.rstrip("/")] = key


def key_for(base_url: str) -> str | None:
    return _KEYS.get(base_url.rstrip("/"))


def auth_headers(base_url: str) -> dict[str, str] | None:
    key = key_for(base_url)
    return {"Authorization": f"Bearer {key}"} if key else None


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's one TLS context for HTTP clients (certifi's bundle, nothing from the environment)."""
    import httpx

    return httpx.create_ssl_context(trust_env=False)


def server_client(base_url: str, timeout: float, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` on `base_url` sending its key (`headers`: others instead, e.g. admin ones)."""
    import httpx

    return httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=timeout, verify=tls_context(),
                             headers=auth_headers(base_url) if headers is None else headers)
