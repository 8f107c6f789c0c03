"""API keys of the servers this process started, by base URL: who talks to a server sends its key.

A profile's optional `api_key` is passed to SGLang as `--api-key` (the server then answers only
requests bearing it). The server manager registers it here when it launches the server; the
benchmark child gets it in its environment (`bench.client.API_KEY_ENV`, never on a command line)
and the correctness gate sends it. In-process only: nothing here is written anywhere.
"""

from __future__ import annotations

_KEYS: dict[str, str] = {}


def register(base_url: str, key: str) -> None:
    if key:
        _KEYS[base_url.rstrip("/")] = key


def key_for(base_url: str) -> str | None:
    return _KEYS.get(base_url.rstrip("/"))


def auth_headers(base_url: str) -> dict[str, str] | None:
    key = key_for(base_url)
    return {"Authorization": f"Bearer {key}"} if key else None
