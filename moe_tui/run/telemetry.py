"""The controller's GPU telemetry: one sampler shared by the controller and the TUI, relayed as
`GpuTelemetry` events with the GPU processes each server owns (a mixin of
`moe_tui.run.controller.Controller`).

The sampler is NVML when a driver answers, else the simulated GPUs of the emulators this controller
runs; a caller may pass its own `TelemetryThread` (or False for none). Ownership of a GPU process is
decided by `moe_tui.telemetry.gpu_owners` (a server's leader, its descendants, or its marker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moe_tui.events import Event, GpuTelemetry


class TelemetryRelay:
    """Start, relay and stop the controller's GPU sampler."""

    # Set by Controller.__init__ / start().
    servers: Any
    _telemetry: Any
    _telemetry_interval_s: float
    _owns_telemetry: bool
    _telemetry_was_available: bool | None
    _last_telemetry: dict[str, Any] | None
    _unsubs: list[Callable[[], None]]

    def _emit(self, event: Event) -> None:
        raise NotImplementedError  # provided by Controller

    def _notice(self, level: str, message: str) -> None:
        raise NotImplementedError  # provided by Controller

    def _start_telemetry(self) -> None:
        if self._telemetry is False:
            self._telemetry = None
            return
        if self._telemetry is None:
            try:
                from moe_tui.telemetry import ControlRoomSampler, TelemetryThread, sim_sources

                # NVML when a driver answers, else the simulated GPUs of the emulators we run.
                sampler = ControlRoomSampler(lambda: sim_sources(self.servers.live()))
                self._telemetry = TelemetryThread(sampler.sample, interval_s=self._telemetry_interval_s)
                self._telemetry.start()
                self._owns_telemetry = True
            except Exception as exc:  # no telemetry is a flag on the run, never a stop
                self._notice("warning", f"GPU telemetry unavailable: {exc}")
                self._telemetry = None
        if self._telemetry is not None:
            self._unsubs.append(self._telemetry.subscribe(self._relay_telemetry))

    def _relay_telemetry(self, snapshot: Any) -> None:
        """The one GPU sampler feeds the TUI too: every snapshot while NVML answers, and the first
        one that says why it does not (no driver will not appear while we run)."""
        self._last_telemetry = snapshot.to_dict()
        if snapshot.available or self._telemetry_was_available is not False:
            self._emit(GpuTelemetry(snapshot=self._last_telemetry, owners=self._gpu_owners(snapshot)))
        self._telemetry_was_available = bool(snapshot.available)

    def _gpu_owners(self, snapshot: Any) -> dict[str, str]:
        """pid -> profile for the snapshot's GPU processes that are a server's (leader or descendant,
        or carrying its marker): the dashboard's owner column, decided here once, not in the UI."""
        try:
            from moe_tui.telemetry import gpu_owners

            live = self.servers.live()
            leaders = {s.name: s.pid for s in live if s.pid}
            markers = {s.name: s.server_id for s in live}
            pids = {p.pid for g in snapshot.gpus for p in (g.processes or ())}
            owners = gpu_owners(pids, leaders, markers) | {pid: name for name, pid in leaders.items() if pid}
            return {str(pid): name for pid, name in owners.items()}
        except Exception:  # a process that vanished mid-read: no owners this second, never a stop
            return {}

    def _stop_telemetry(self) -> None:
        if self._owns_telemetry and self._telemetry is not None:
            self._telemetry.stop()
