"""The emulator's `--api-key` and `--admin-api-key`, as SGLang 0.5.23 applies them
(sglang/srt/utils/auth.py `decide_request_auth`, the levels from entrypoints/http_server.py):

- OPTIONS, and paths starting /health, /ready or /metrics: always open (probes, scrapers); also the
  emulator's own /sim/gpus (it stands for NVML, open to every local user).
- Admin routes (`@auth_level(ADMIN_OPTIONAL)`: the profiler, the expert recorder, /flush_cache, ...):
  with an admin key, only `Bearer <admin key>` (the api key is NOT accepted); else with an api key,
  that key; else open.
- Every other route: `Bearer <api key>` when one is set (even with an admin key too); else open.
A refused request is 401 `{"error": "Unauthorized"}`.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

OPEN_PREFIXES = ("/health", "/ready", "/metrics")
# Not SGLang's: the emulator's stand-in for NVML, which every local user may read (nvidia-smi), so it
# stays open whatever the keys, as the GPUs it stands for do.
EMULATOR_OPEN = ("/sim/gpus",)
# The ADMIN_OPTIONAL routes of http_server.py that the emulator serves.
ADMIN_ROUTES = frozenset({
    "/flush_cache", "/start_profile", "/stop_profile", "/start_expert_distribution_record",
    "/stop_expert_distribution_record", "/dump_expert_distribution_record",
})


def _bearer_is(given: str, expected: str) -> bool:
    scheme, _, token = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), expected.encode())


def allowed(path: str, method: str, authorization: str, api_key: str | None, admin_api_key: str | None) -> bool:
    if method == "OPTIONS" or path.startswith(OPEN_PREFIXES) or path in EMULATOR_OPEN:
        return True
    if path in ADMIN_ROUTES:
        key = admin_api_key or api_key
    else:
        key = api_key
    return not key or _bearer_is(authorization, key)


def api_key_middleware(api_key: str | None, admin_api_key: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if not allowed(request.path, request.method, request.headers.get("Authorization", ""), api_key, admin_api_key):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return middleware


def install_api_key(app: web.Application, key: str | None, admin_key: str | None = None) -> None:
    """With either key, every request is checked first (before any other middleware)."""
    if key or admin_key:
        app.middlewares.insert(0, api_key_middleware(key, admin_key))
