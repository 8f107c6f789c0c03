"""What a ready server is asked over HTTP: `/server_info` and `/model_info` once it is ready (the
resolved backend, version and args go to the store; a resolved backend other than the profile's is
a `backend_mismatch`), `/health` probes while it runs, `/metrics` scrapes. A mixin of
`ManagedServer` (kept apart so each file stays readable)."""


from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from moe_tui.events import ServerMetrics
from moe_tui.records import Options, SglangJson
from moe_tui.servers.base import PHASE_READY, READY, STARTING, ServerInfoError
from moe_tui.servers.parsing import metrics_event, parse_prometheus_text, parse_server_info

if TYPE_CHECKING:
    import httpx

# -- the managed server --------------------------------------------------------------------------

class ServerWatchMixin:
    """HTTP conversations of a `ManagedServer` with its running server."""

    if TYPE_CHECKING:  # what the mixin uses of ManagedServer (declared there, typed here for mypy)
        from moe_tui.events import Event, ServerStateChanged
        from moe_tui.profiles import ServerProfile

        profile: ServerProfile
        state: str
        started_at: float | None
        ready_at: float | None
        resolved_backend: str | None
        backend_mismatch: bool
        sglang_version: str | None
        server_info: SglangJson | None
        model_info: SglangJson | None
        server_info_error: str | None
        last_metrics: ServerMetrics | None
        metrics_exposed: bool | None
        health_interval_s: float
        health_timeout_s: float
        health_failures: int
        metrics_interval_s: float
        _client: httpx.AsyncClient | None
        _ready_event: asyncio.Event | None
        _tasks: list[asyncio.Task[None]]

        @property
        def name(self) -> str: ...
        def _emit(self, event: Event) -> None: ...
        def _set_state(self, state: str, reason: str, **extra: Any) -> ServerStateChanged: ...
        def _notice(self, level: str, message: str) -> None: ...
        def _record(self, **fields: Any) -> None: ...
        async def _fail(self, reason: str, *, exit_code: int | None = None, exit_signal: int | None = None) -> None: ...

    @property
    def _http(self) -> httpx.AsyncClient:
        """The server's HTTP client (`start()` opens it before any conversation here begins)."""
        assert self._client is not None, "the server was not started"
        return self._client

    async def _get_json(self, path: str) -> tuple[str, str | None]:
        """(the body's text, "" when nothing answered; the error text, None when none)."""
        import httpx

        try:
            resp = await self._http.get(path, timeout=10.0)
        except httpx.HTTPError as exc:
            return "", f"GET {path} failed: {exc!r}"
        if resp.status_code != 200:
            return resp.text, f"GET {path} answered HTTP {resp.status_code}"
        return resp.text, None

    async def _become_ready(self) -> None:
        info_text, info_err = await self._get_json("/server_info")
        model_text, model_err = await self._get_json("/model_info")
        if self.state != STARTING:
            return
        self.ready_at = time.time()
        self.phase = PHASE_READY
        fields: Options = {"ready_at": self.ready_at}
        if info_err is None:
            try:
                info = parse_server_info(info_text)
            except ServerInfoError as exc:
                info_err = str(exc)
            else:
                self.server_info = info.args
                self.resolved_backend = info.resolved_backend
                self.sglang_version = info.version
                self.backend_mismatch = (
                    self.profile.moe_runner_backend != "auto"
                    and info.resolved_backend != self.profile.moe_runner_backend
                )
                fields.update(server_info=info.args, resolved_backend=info.resolved_backend,
                              sglang_version=info.version, backend_mismatch=int(self.backend_mismatch))
        if model_err is None:
            try:
                parsed = json.loads(model_text)
                self.model_info = parsed if isinstance(parsed, dict) else {"value": parsed}
            except ValueError:
                model_err = f"/model_info is not JSON; it began {model_text[:80]!r}"
        if model_err is None:
            fields["model_info"] = self.model_info
        reason = f"/health_generate answered 200 after {self.ready_at - (self.started_at or self.ready_at):.1f} s"
        if info_err is not None:
            self.server_info_error = info_err
            reason += f"; resolved backend UNKNOWN: {info_err}"
            self._notice("error", f"server '{self.name}': cannot verify the MoE backend: {info_err}")
        elif self.backend_mismatch:
            reason += (f"; BACKEND MISMATCH: profile asks {self.profile.moe_runner_backend}, "
                       f"server resolved {self.resolved_backend}")
            self._notice("warning", f"server '{self.name}' silently fell back: profile asks "
                                    f"{self.profile.moe_runner_backend}, /server_info says {self.resolved_backend}")
        if model_err is not None:
            reason += f"; {model_err}"
        fields.update(state=READY, reason=reason)
        self._record(**fields)
        self._set_state(READY, reason)
        assert self._ready_event is not None
        self._ready_event.set()
        self._tasks.append(asyncio.create_task(self._watch_health(), name=f"{self.name}-health"))
        self._tasks.append(asyncio.create_task(self._scrape_metrics(), name=f"{self.name}-metrics"))

    async def _watch_health(self) -> None:
        import httpx

        failures = 0
        self._healthy = True
        while self.state == READY:
            await asyncio.sleep(self.health_interval_s)
            if self.state != READY:
                return
            error = None
            try:
                resp = await self._http.get("/health", timeout=self.health_timeout_s)
                if resp.status_code != 200:
                    error = f"/health answered HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                error = f"/health did not answer: {exc!r}"
            if self.state != READY:
                return
            self._healthy = error is None
            if self.metrics_exposed is False:
                self.last_metrics = ServerMetrics(profile=self.name, healthy=self._healthy)
                self._emit(self.last_metrics)
            failures = 0 if error is None else failures + 1
            if failures >= self.health_failures:
                await self._fail(f"health stopped answering ({failures} checks in a row; last: {error})")
                return

    async def _scrape_metrics(self) -> None:
        import httpx

        while self.state == READY:
            try:
                resp = await self._http.get("/metrics", timeout=max(self.metrics_interval_s * 2, 2.0))
            except httpx.HTTPError:
                resp = None
            if self.state != READY:
                return
            if resp is not None and resp.status_code == 404:
                self.metrics_exposed = False  # started without --enable-metrics
                return
            if resp is not None and resp.status_code == 200:
                self.metrics_exposed = True
                self.last_metrics = metrics_event(self.name, parse_prometheus_text(resp.text),
                                                  getattr(self, "_healthy", True))
                self._emit(self.last_metrics)
            await asyncio.sleep(self.metrics_interval_s)

