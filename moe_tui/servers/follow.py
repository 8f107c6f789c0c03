"""How a `ManagedServer` follows its child while it runs: the log read in bounded chunks (each new
byte is startup progress), the startup phases named from it, and the exit / startup-deadline /
no-progress watchdog. A mixin of `ManagedServer` (kept apart so each file stays under the size
target; the HTTP side is `watch.py`, launch and stop are `managed.py`)."""

from __future__ import annotations

import asyncio
import collections
import io
import signal
import subprocess
import time
from typing import TYPE_CHECKING

from moe_tui.events import ServerLogLine
from moe_tui.servers.base import _PHASE_MARKERS, PHASE_LAUNCHING, PHASES, READY, STARTING
from moe_tui.servers.failures import DIAGNOSE_LINES, diagnose, exit_reason
from moe_tui.servers.logtail import MAX_DRAIN_BYTES, READ_CHUNK, LineSplitter, last_update
from moe_tui.servers.server_key import scrub
from moe_tui.servers.teardown import _split_returncode, signal_name


class ServerFollowMixin:
    """The log follower and the process watchdog of a `ManagedServer`."""

    if TYPE_CHECKING:  # what the mixin uses of ManagedServer (declared there, typed here for mypy)
        import httpx

        from moe_tui.events import Event, ServerStateChanged
        from moe_tui.profiles import ServerProfile

        profile: ServerProfile
        state: str
        phase: str
        log_lines: collections.deque[str]
        _log_reader: io.BufferedReader | None
        _splitter: LineSplitter
        _popen: subprocess.Popen[bytes] | None
        _stopping: bool
        _deadline: float
        _last_progress: float
        _client: httpx.AsyncClient | None

        @property
        def secrets(self) -> tuple[str, ...]: ...

        @property
        def name(self) -> str: ...
        def _emit(self, event: Event) -> None: ...
        def _set_state(self, state: str, reason: str, **extra: object) -> ServerStateChanged: ...
        def log_tail(self, n: int = ...) -> list[str]: ...
        async def _fail(self, reason: str, *, exit_code: int | None = None, exit_signal: int | None = None) -> None: ...

    # -- background work ------------------------------------------------------------------------
    def _drain_log(self) -> None:
        """New log lines, in bounded reads and bounded lines (`servers.logtail`): a server's
        output never grows the runner's memory, however fast or long its lines."""
        if self._log_reader is None:
            return
        lines: list[str] = []
        for _ in range(MAX_DRAIN_BYTES // READ_CHUNK):
            chunk = self._log_reader.read(READ_CHUNK)
            if not chunk:
                break
            # Any new output is progress (the no-progress watchdog's clock): SGLang's weight load is a
            # tqdm bar, "\r"-separated updates of one line with a single newline at its end.
            self._last_progress = time.monotonic()
            lines += self._splitter.feed(chunk)
        # a terminal shows only a bar's last update; the server echoes its args, keys included
        lines = [scrub(last_update(line), self.secrets) for line in lines]
        for line in lines:
            self.log_lines.append(line)
            self._emit(ServerLogLine(profile=self.name, line=line))
            if self.state == STARTING:
                self._phase_from(line)

    def _phase_from(self, line: str) -> None:
        lowered = line.lower()
        for marker, phase in _PHASE_MARKERS:
            if marker.lower() in lowered:
                if PHASES.index(phase) > PHASES.index(self.phase or PHASE_LAUNCHING):
                    self.phase = phase
                    self._set_state(STARTING, f"phase: {phase}")
                return

    async def _follow_log(self) -> None:
        while True:
            self._drain_log()
            if self._popen is None or self._popen.poll() is not None and self.state not in (STARTING, READY):
                self._drain_log()
                return
            await asyncio.sleep(0.1)

    async def _watch_exit(self) -> None:
        assert self._popen is not None
        while True:
            rc = self._popen.poll()
            if self._stopping:
                return
            if rc is not None:
                code, sig = _split_returncode(rc)
                how = f"killed by {signal_name(sig)}" if sig else f"exit code {code}"
                when = "while starting" if self.state == STARTING else "while ready"
                self._drain_log()
                # the error line can sit under hundreds of lines of other ranks' tracebacks
                reason = exit_reason(how, when, diagnose(self.log_tail(DIAGNOSE_LINES)),
                                     by_sigkill=sig == signal.SIGKILL)
                await self._fail(reason, exit_code=code, exit_signal=sig)
                return
            if self.state == STARTING and time.monotonic() >= self._deadline:
                await self._fail(
                    f"not ready within startup_timeout_s={self.profile.startup_timeout_s:g} s "
                    f"(last phase: {self.phase or 'none'})"
                )
                return
            stalled = time.monotonic() - self._last_progress
            if self.state == STARTING and stalled >= self.profile.startup_stall_s:
                open_bar = last_update(self._splitter.pending())
                last = (open_bar or (self.log_lines[-1] if self.log_lines else "(none)"))[:160]
                await self._fail(
                    f"no startup progress for {stalled:.0f} s (startup_stall_s={self.profile.startup_stall_s:g}): "
                    f"no new output since {last!r} (phase: {self.phase or 'none'})")
                return
            await asyncio.sleep(0.1)

    async def still_serving(self, timeout: float, exit_wait: float) -> bool:
        """Whether a ready server is still one to run the next item on: its process alive and GET /health
        answered 200 within `timeout`. A server that crashed during the last item may not have exited when
        the next item asks (SGLang's crash handler stops its children before it kills itself): reused, it
        failed that item too (the reliability suite, 2026-12-05). One that does not answer is given
        `exit_wait` seconds to exit, so its crash is recorded as such (`_watch_exit`); False either way."""
        import httpx

        if self.state != READY or self._popen is None or self._client is None:
            return False
        if self._popen.poll() is None:
            try:
                if (await self._client.get("/health", timeout=timeout)).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
        until = time.monotonic() + exit_wait
        while self.state == READY and time.monotonic() < until:
            await asyncio.sleep(0.1)
        return False
