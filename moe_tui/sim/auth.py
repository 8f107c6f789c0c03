"""The emulator's `--api-key`, as SGLang applies it: every request must carry
`Authorization: Bearer <key>` (else 401 `{"error": "Unauthorized"}`), except OPTIONS and the
`/health*` and `/metrics` endpoints, which stay open for probes and scrapers."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

OPEN_PREFIXES = ("/health", "/metrics")


def api_key_middleware(key: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    expected = f"Bearer {key}".encode()

    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.method == "OPTIONS" or request.path.startswith(OPEN_PREFIXES):
            return await handler(request)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return middleware


def install_api_key(app: web.Application, key: str | None) -> None:
    """With a key, every request is checked first (before any other middleware)."""
    if key:
        app.middlewares.insert(0, api_key_middleware(key))
