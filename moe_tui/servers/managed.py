"""`ManagedServer`: one profile's server as a child process in its own session, watched from
launch to stop (log tail, startup phases, readiness, /server_info, health probes, /metrics)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import io
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moe_tui.events import Event, Notice, ServerMetrics, ServerStateChanged
from moe_tui.profiles import ServerProfile, redact_argv, redact_env
from moe_tui.records import ManagedServerJson, SglangJson
from moe_tui.servers.base import (
    DEFAULT_GRACE_S,
    DEFAULT_RING_LINES,
    FAILED,
    LIVE_STATES,
    LOG_TAIL_LINES,
    PHASE_LAUNCHING,
    READY,
    SERVER_ID_ENV,
    STARTING,
    STOPPED,
    STOPPING,
    EventCallback,
    GpuProbe,
    ServerFailed,
    ServerStartError,
    nvml_gpu_view,
)
from moe_tui.servers.dumps import RECORDER_DIR_ENV, expert_dump_dir
from moe_tui.servers.follow import ServerFollowMixin
from moe_tui.servers.logtail import LineSplitter
from moe_tui.servers.multinode import Placement, lost_note, server_argv, swept
from moe_tui.servers.preflight import preflight
from moe_tui.servers.registry import _REGISTRY, _REGISTRY_LOCK, managed_servers
from moe_tui.servers.server_key import scrub, start_key, write_key_config
from moe_tui.servers.sessions import forget_session, record_session
from moe_tui.servers.teardown import StopReport, terminate_server
from moe_tui.servers.watch import ServerWatchMixin

if TYPE_CHECKING:
    import httpx

    from moe_tui.store.db import Store


# The runner's mark on everything it starts (`moe_tui.run.orphans.RUNNER_DIR_ENV`), passed on after
# the profile's env so that no profile can move or erase it.
INHERITED_MARKERS = ("MOE_TUI_RUNNER_DIR",)
# Where SGLang's expert-distribution recorder writes its dumps (eplb/expert_distribution.py; /tmp
# when unset). Set per start, after the profile's env: a profile cannot point it at a shared folder.


# -- the managed server --------------------------------------------------------------------------
class ManagedServer(ServerFollowMixin, ServerWatchMixin):
    """One profile's server process. Create, `subscribe`, then `await start()` / `wait_ready()` /
    `stop()`. Every method runs on the asyncio loop that called `start()`, except `stop_sync()`,
    which is for exit handlers and may run with no loop."""

    def __init__(
        self,
        profile: ServerProfile,
        *,
        store: Store | None = None,
        keep_running: bool = False,
        grace_s: float | None = None,
        ready_poll_s: float = 0.5,
        health_interval_s: float = 5.0,
        health_timeout_s: float = 20.0,
        health_failures: int = 3,
        metrics_interval_s: float = 1.0,
        ring_lines: int = DEFAULT_RING_LINES,
        gpu_probe: GpuProbe | None = nvml_gpu_view,
        stop_on_failure: bool = True,
        python: str | None = None,
    ):
        self.profile = profile
        self.store = store
        self.keep_running = keep_running
        self.grace_s = DEFAULT_GRACE_S.get(profile.engine, 20.0) if grace_s is None else grace_s
        self.ready_poll_s = ready_poll_s
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.health_failures = health_failures
        self.metrics_interval_s = metrics_interval_s
        self.gpu_probe = gpu_probe
        self.stop_on_failure = stop_on_failure
        self.python = python
        self.log_lines: collections.deque[str] = collections.deque(maxlen=ring_lines)
        self.warnings: list[str] = []
        self._subscribers: list[EventCallback] = []
        self._reset()

    def _reset(self) -> None:
        self.state = STOPPED
        self.phase = ""
        self.reason = ""
        self.pid: int | None = None
        self.start_id: int | None = None
        self.server_id: str | None = None
        self._session: Path | None = None
        self.log_path: Path | None = None
        self.expert_dump_dir: Path | None = None  # this start's SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR
        self.server_key = ""  # this start's api key, in its --config file (servers.server_key); "" when the profile decides
        self.started_at: float | None = None
        self.ready_at: float | None = None
        self.resolved_backend: str | None = None
        self.sim_clock: tuple[int | None, float] | None = None  # (pid, scale) an emulator's clock was set to (run.sim_clock)
        self.backend_mismatch = False
        self.sglang_version: str | None = None
        self.server_info: SglangJson | None = None
        self.model_info: SglangJson | None = None
        self.server_info_error: str | None = None
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.failure: ServerStateChanged | None = None
        self.last_metrics: ServerMetrics | None = None
        self.metrics_exposed: bool | None = None
        self.last_stop: StopReport | None = None
        self.placement: Placement | None = None  # a multi-node start's nodes and rendezvous (servers/multinode.py)
        self._popen: subprocess.Popen[bytes] | None = None
        self._log_file: io.FileIO | None = None  # the server's stdout and stderr
        self._log_reader: io.BufferedReader | None = None  # the same file, followed
        self._splitter = LineSplitter()
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None
        self._stop_task: asyncio.Task[StopReport] | None = None
        self._stopping = False
        self._ready_event: asyncio.Event | None = None
        self._done_event: asyncio.Event | None = None
        self._deadline = 0.0
        self._last_progress = 0.0

    # -- events -------------------------------------------------------------------------------
    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        """Call `callback(event)` for every event of this server (on the loop's thread, or the
        exiting thread for stop_sync). A TUI posts a message from it; a runner prints or queues."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _emit(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:  # a broken consumer must not take the lifecycle down
                print(f"moe-tui: server event subscriber failed: {exc!r}", file=sys.stderr)

    def _set_state(self, state: str, reason: str, **extra: Any) -> ServerStateChanged:
        self.state = state
        self.reason = reason
        event = ServerStateChanged(
            profile=self.profile.name, state=state, reason=reason, phase=self.phase, pid=self.pid,
            port=self.profile.port, resolved_backend=self.resolved_backend,
            backend_mismatch=self.backend_mismatch, **extra,
        )
        self._emit(event)
        return event

    def _notice(self, level: str, message: str) -> None:
        if level == "warning":
            self.warnings.append(message)
        self._emit(Notice(level=level, message=message))

    @property
    def secrets(self) -> tuple[str, ...]:
        """The keys this start's server holds (the profile's api key, this start's key)."""
        return tuple(k for k in (self.profile.api_key, self.server_key) if k)

    def _record(self, **fields: Any) -> None:
        if self.secrets:  # the server echoes its keys (resolved args, log tail): never stored
            import json

            fields = json.loads(scrub(json.dumps(fields, default=str), self.secrets))
        if self.store is not None and self.start_id is not None:
            try:
                self.store.update_server_start(self.start_id, **fields)
            except Exception as exc:  # the server lifecycle goes on; the person is told
                self._emit(Notice(level="error", message=f"store update for {self.profile.name} failed: {exc}"))

    # -- properties for the UI ------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.profile.base_url

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    def log_tail(self, n: int = LOG_TAIL_LINES) -> list[str]:
        lines = list(self.log_lines)
        return lines[-n:] if n else lines

    def _key_config(self, folder: Path) -> list[str]:
        """The server answers only moe-tui: a key of this start (or the profile's), kept off argv in a
        file of the start's private folder (servers.server_key). The args that name the file."""
        self.server_key = start_key(self.profile)
        return ["--config", str(write_key_config(folder, self.server_key))] if self.server_key else []

    # -- start ----------------------------------------------------------------------------------
    async def start(self, *, force: bool = False) -> None:
        """Run the pre-start checks, launch the child and return while it starts (state starting).
        Idempotent while starting or ready. Raises ServerStartError when a check refuses."""
        if self.state in (STARTING, READY):
            return
        if self.state == STOPPING and self._stop_task is not None:
            await asyncio.shield(self._stop_task)
        if self.state == FAILED and self._done_event is not None:
            await self._done_event.wait()  # the failure's cleanup must not close the new start's files
        live = [s for s in managed_servers() if s is not self and s.is_live]
        probe = self.gpu_probe if self.profile.engine != "sim" else None
        warnings = await asyncio.to_thread(preflight, self.profile, live, probe, force=force)

        self._reset()
        self.log_lines.clear()
        self.warnings = []
        for message in warnings:
            self._notice("warning", message)

        from moe_tui import paths

        self.server_id = f"{self.profile.name}-{uuid.uuid4().hex[:12]}"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = paths.logs_dir() / f"{self.profile.name}-{stamp}-{self.server_id[-12:]}.log"
        argv, self.placement = server_argv(self.profile, self.python)  # over several nodes: one srun step
        # Expert dumps go to a folder of this start only (0700): never a shared /tmp where another
        # user's planted pickle would be read as this server's expert load.
        self.expert_dump_dir = expert_dump_dir(self.server_id, create=True)
        argv += self._key_config(self.expert_dump_dir)
        # moe-tui's markers last: neither a profile's env nor anything else may override them
        ours = {**{k: os.environ[k] for k in INHERITED_MARKERS if k in os.environ},
                SERVER_ID_ENV: self.server_id, "PYTHONUNBUFFERED": "1",
                RECORDER_DIR_ENV: str(self.expert_dump_dir)}
        env = {**os.environ, **self.profile.launch_env(), **ours}
        recorded_env = redact_env({**self.profile.launch_env(), **ours})
        if self.store is not None:
            self.start_id = self.store.record_server_start(
                profile_name=self.profile.name, profile=self.profile.snapshot(), argv=redact_argv(argv),
                env=recorded_env, log_path=str(self.log_path), pid=None, state=STARTING,
            )
        self._log_file = log_file = open(self.log_path, "ab", buffering=0)
        log_file.write(f"# moe-tui: {' '.join(redact_argv(argv))}\n".encode())
        try:
            self._popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            log_file.close()
            reason = f"cannot launch {argv[0]}: {exc.strerror or exc}"
            self._record(state=FAILED, reason=reason, stopped_at=time.time())
            self.failure = self._set_state(FAILED, reason)
            raise ServerStartError(reason) from None
        self.pid = self._popen.pid
        self.started_at = time.time()
        self._deadline = time.monotonic() + self.profile.startup_timeout_s
        self._last_progress = time.monotonic()
        self._record(pid=self.pid)
        self._session = record_session(self.server_id, self.pid)  # found by session, not env (sessions.py)
        with _REGISTRY_LOCK:
            _REGISTRY.add(self)
        self._log_reader = open(self.log_path, "rb")
        self._ready_event = asyncio.Event()
        self._done_event = asyncio.Event()
        from moe_tui.servers.keys import register, server_client

        register(self.base_url, self.server_key or self.profile.api_key)  # the bench child and the gate send it too
        self._client = server_client(self.base_url, 10.0)
        self.phase = PHASE_LAUNCHING
        self._set_state(STARTING, f"launched pid {self.pid} on port {self.profile.port}")
        self._tasks = [
            asyncio.create_task(self._follow_log(), name=f"{self.name}-log"),
            asyncio.create_task(self._watch_exit(), name=f"{self.name}-exit"),
            asyncio.create_task(self._await_ready(), name=f"{self.name}-ready"),
        ]

    async def wait_ready(self, timeout: float | None = None) -> ManagedServer:
        """Until ready. Raises ServerFailed (with the failure event) if it failed or was stopped."""
        if self.state == READY:
            return self
        if self._ready_event is None or self._done_event is None:
            raise ServerFailed(f"server '{self.name}' was not started", self.failure)
        ready = asyncio.create_task(self._ready_event.wait())
        done = asyncio.create_task(self._done_event.wait())
        try:
            await asyncio.wait({ready, done}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
            done.cancel()
        if self.state == READY:
            return self
        if self.state in (FAILED, STOPPED, STOPPING):
            raise ServerFailed(f"server '{self.name}' {self.state}: {self.reason}", self.failure)
        raise TimeoutError(f"server '{self.name}' not ready after {timeout} s (still {self.state})")

    async def _await_ready(self) -> None:
        import httpx

        while self.state == STARTING:
            try:
                resp = await self._http.get("/health_generate", timeout=max(self.ready_poll_s * 4, 5.0))
                if resp.status_code == 200:
                    await self._become_ready()
                    return
            except httpx.HTTPError:
                pass  # not listening yet, or warming up
            await asyncio.sleep(self.ready_poll_s)

    async def _fail(self, reason: str, *, exit_code: int | None = None, exit_signal: int | None = None) -> None:
        if self._stopping or self.state not in (STARTING, READY):
            return
        self._stopping = True  # nothing else may fail or stop it concurrently
        self._drain_log()
        last = self._splitter.flush()  # an unfinished last line says most about a crash
        if last:
            self.log_lines.append(last)
        tail = tuple(self.log_tail(LOG_TAIL_LINES))
        self.exit_code, self.exit_signal = exit_code, exit_signal
        reason += await asyncio.to_thread(lost_note, self.placement)  # a rank's node gone: said as such
        self._record(state=FAILED, reason=reason, exit_code=exit_code, exit_signal=exit_signal,
                     log_tail="\n".join(tail), stopped_at=time.time())
        self.failure = self._set_state(FAILED, reason, exit_code=exit_code, exit_signal=exit_signal, log_tail=tail)
        me = asyncio.current_task()
        for task in self._tasks:
            if task is not me:
                task.cancel()
        if self.stop_on_failure:
            report = await asyncio.to_thread(self._terminate)
            if not report.clean:
                self._notice("error", f"server '{self.name}' after failure: {report.describe()}")
        await self._close()

    def _terminate(self) -> StopReport:
        report = terminate_server(
            self.pid, self.server_id, grace_s=self.grace_s, popen=self._popen,
            gpus=self.profile.gpus if self.profile.engine != "sim" else (), gpu_probe=self.gpu_probe,
        )
        report = swept(report, self.placement, self.server_id, self.python)  # and on the other nodes
        self.last_stop = report
        return report

    async def _close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
        self._close_files()
        if self.last_stop is None or self.last_stop.clean:
            forget_session(self._session)
        with _REGISTRY_LOCK:
            _REGISTRY.discard(self)
        if self._done_event is not None:
            self._done_event.set()

    def _close_files(self) -> None:
        for f in (self._log_file, self._log_reader):
            if f is not None:
                with contextlib.suppress(Exception):
                    f.close()
        if self.expert_dump_dir is not None:  # a profiled run copied what it keeps; links are removed, never followed
            shutil.rmtree(self.expert_dump_dir, ignore_errors=True)

    # -- stop -----------------------------------------------------------------------------------
    async def stop(self, reason: str = "stopped by request") -> StopReport | None:
        """SIGTERM the launcher, wait grace_s for SGLang's own shutdown, then SIGTERM the rest of
        the group, SIGKILL what is left, confirm nothing is (teardown.py). Idempotent: a
        concurrent call waits for the same stop; a stopped server returns the last report."""
        if self._stop_task is not None:
            return await asyncio.shield(self._stop_task)
        if self.state not in (STARTING, READY):
            if self.state == FAILED and self._done_event is not None:
                await self._done_event.wait()  # the failure path is already cleaning up
                if self.last_stop is None and self._popen is not None:  # stop_on_failure=False
                    self.last_stop = await asyncio.to_thread(self._terminate)
            return self.last_stop
        self._stop_task = asyncio.create_task(self._stop(reason))
        return await asyncio.shield(self._stop_task)

    async def _stop(self, reason: str) -> StopReport:
        self._stopping = True
        me = asyncio.current_task()
        for task in self._tasks:
            if task is not me:
                task.cancel()
        self._set_state(STOPPING, reason)
        self._record(state=STOPPING, reason=reason)
        report = await asyncio.to_thread(self._terminate)
        self._drain_log()
        self.exit_code, self.exit_signal = report.exit_code, report.exit_signal
        final = f"{reason}; {report.describe()}"
        self._record(state=STOPPED, reason=final, stopped_at=time.time(), exit_code=report.exit_code,
                     exit_signal=report.exit_signal)
        self._set_state(STOPPED, final, exit_code=report.exit_code, exit_signal=report.exit_signal)
        if not report.clean:
            self._notice("error", f"server '{self.name}' did not stop cleanly: {report.describe()}")
        await self._close()
        return report

    def stop_sync(self, reason: str = "moe-tui is exiting") -> StopReport | None:
        """Blocking stop for exit handlers (no event loop needed). Same guarantees as stop()."""
        if self.state not in (STARTING, READY, STOPPING) and self._popen is None:
            return self.last_stop
        if self.state in (STOPPED,) or (self.state == FAILED and self.last_stop is not None):
            return self.last_stop
        self._stopping = True
        report = self._terminate()
        self.exit_code, self.exit_signal = report.exit_code, report.exit_signal
        if self.state != FAILED:
            final = f"{reason}; {report.describe()}"
            self._record(state=STOPPED, reason=final, stopped_at=time.time(),
                         exit_code=report.exit_code, exit_signal=report.exit_signal)
            self._set_state(STOPPED, final, exit_code=report.exit_code, exit_signal=report.exit_signal)
        self._close_files()
        if self.last_stop is None or self.last_stop.clean:
            forget_session(self._session)
        with _REGISTRY_LOCK:
            _REGISTRY.discard(self)
        return report

    def describe(self) -> ManagedServerJson:
        """Plain data for status displays."""
        return {
            "profile": self.name, "state": self.state, "phase": self.phase, "reason": self.reason,
            "pid": self.pid, "port": self.profile.port, "base_url": self.base_url,
            "start_id": self.start_id, "log_path": str(self.log_path) if self.log_path else None,
            "resolved_backend": self.resolved_backend, "backend_mismatch": self.backend_mismatch,
            "server_info_error": self.server_info_error, "sglang_version": self.sglang_version,
            "keep_running": self.keep_running, "exit_code": self.exit_code, "exit_signal": self.exit_signal,
        }
