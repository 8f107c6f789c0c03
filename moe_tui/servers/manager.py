"""`ServerManager` (several managed servers by profile name, one subscriber list) and the stop
of a server recorded by another moe-tui process (the CLI's `server stop`/`status`)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from moe_tui.events import Event
from moe_tui.profiles import ServerProfile
from moe_tui.servers.base import DEFAULT_GRACE_S, SERVER_ID_ENV, EventCallback, GpuProbe, ServerStartError, nvml_gpu_view
from moe_tui.servers.managed import ManagedServer
from moe_tui.servers.teardown import StopReport, has_marker, processes_of, terminate_server

if TYPE_CHECKING:
    from moe_tui.store.db import Store


class ServerManager:
    """The servers of one program, by profile name, with one subscriber list for all of them.

    `server_options` are passed to each ManagedServer (grace_s, health_interval_s, gpu_probe, ...).
    """

    def __init__(self, store: Store | None = None, **server_options: Any) -> None:
        self.store = store
        self.server_options = server_options
        self.servers: dict[str, ManagedServer] = {}
        self._subscribers: list[EventCallback] = []

    def subscribe(self, callback: EventCallback) -> Callable[[], None]:
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _forward(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event)
            except Exception as exc:
                print(f"moe-tui: server event subscriber failed: {exc!r}", file=sys.stderr)

    def get(self, name: str) -> ManagedServer | None:
        return self.servers.get(name)

    def server_for(self, profile: ServerProfile, **overrides: Any) -> ManagedServer:
        """The handle for this profile (created if new; replaced if the profile changed and the
        old one is not live)."""
        current = self.servers.get(profile.name)
        if current is not None and (current.profile == profile or current.is_live):
            return current
        server = ManagedServer(profile, store=self.store, **{**self.server_options, **overrides})
        server.subscribe(self._forward)
        self.servers[profile.name] = server
        return server

    async def start(self, profile: ServerProfile, *, force: bool = False, keep_running: bool | None = None,
                    wait: bool = True, timeout: float | None = None) -> ManagedServer:
        current = self.servers.get(profile.name)
        if current is not None and current.is_live and current.profile != profile:
            raise ServerStartError(
                f"server '{profile.name}' is running with a different version of the profile; stop it first"
            )
        server = self.server_for(profile)
        if keep_running is not None:
            server.keep_running = keep_running
        await server.start(force=force)
        if wait:
            await server.wait_ready(timeout)
        return server

    async def stop(self, name: str, reason: str = "stopped by request") -> StopReport | None:
        server = self.servers.get(name)
        if server is None:
            raise KeyError(f"no managed server named '{name}'")
        return await server.stop(reason)

    async def stop_all(self, reason: str = "stopping all servers", *, include_kept: bool = True) -> list[StopReport]:
        targets = [s for s in self.servers.values() if include_kept or not s.keep_running]
        results = await asyncio.gather(*(s.stop(reason) for s in targets))
        return [r for r in results if r is not None]

    def live(self) -> list[ManagedServer]:
        return [s for s in self.servers.values() if s.is_live]


# -- servers started by another moe-tui process (the CLI's stop/status) -------------------------
def recorded_marker(start: Mapping[str, Any]) -> str | None:
    env = start.get("env") or {}
    marker = env.get(SERVER_ID_ENV)
    return marker if isinstance(marker, str) else None


def recorded_server_alive(start: Mapping[str, Any]) -> bool:
    """Is the server of a store `server_starts` row still running? Checks the marker, not just the
    PID (PIDs are reused)."""
    marker = recorded_marker(start)
    pid = start.get("pid")
    if marker is None:
        return False
    if pid and has_marker(int(pid), marker):
        return True
    return bool(processes_of(None, marker))


def stop_recorded_server(start: Mapping[str, Any], *, grace_s: float | None = None,
                         gpu_probe: GpuProbe | None = nvml_gpu_view) -> StopReport:
    """Stop a server recorded in the store (possibly started by another process)."""
    marker = recorded_marker(start)
    pid = start.get("pid")
    profile = start.get("profile") or {}
    engine = profile.get("engine", "sglang")
    # Only treat the PID as the group leader if it is provably ours: PIDs are reused.
    leader = int(pid) if pid and marker and has_marker(int(pid), marker) else None
    return terminate_server(
        leader, marker, grace_s=DEFAULT_GRACE_S.get(engine, 20.0) if grace_s is None else grace_s,
        gpus=tuple(profile.get("gpus") or ()) if engine != "sim" else (), gpu_probe=gpu_probe,
    )
