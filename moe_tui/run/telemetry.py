"""The controller's GPU telemetry: one sampler shared by the controller and the TUI, relayed as
`GpuTelemetry` events with the GPU processes each server owns (`TelemetryRelay`, a part of
`moe_tui.run.controller.Controller`).

The sampler is NVML when a driver answers, else the simulated GPUs of the emulators this controller
runs; a caller may pass its own `TelemetryThread` (or False for none). Ownership of a GPU process is
decided by `moe_tui.telemetry.gpu_owners` (a server's leader, its descendants, or its marker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from moe_tui.events import GpuTelemetry
from moe_tui.records import GpuSnapshotJson
from moe_tui.run.context import RunContext

if TYPE_CHECKING:
    from moe_tui.telemetry import TelemetrySnapshot, TelemetryThread


class TelemetryRelay:
    """Start, relay and stop the controller's GPU sampler."""

    def __init__(self, ctx: RunContext, sampler: TelemetryThread | Literal[False] | None,
                 interval_s: float = 1.0) -> None:
        self._ctx = ctx
        # None: start our own at `start()`; False: none at all.
        self._wanted: TelemetryThread | Literal[False] | None = sampler
        self.sampler: TelemetryThread | None = None if sampler is False else sampler
        self._interval_s = interval_s
        self._owns = False
        self._was_available: bool | None = None
        self.last: GpuSnapshotJson | None = None  # the latest snapshot (a TUI attaching late draws it)

    def start(self) -> Callable[[], None] | None:
        """Start (or adopt) the sampler and relay it; the unsubscribe, or None without telemetry."""
        if self._wanted is False:
            self.sampler = None
            return None
        if self.sampler is None:
            try:
                from moe_tui.telemetry import ControlRoomSampler, TelemetryThread, sim_sources

                # NVML when a driver answers, else the simulated GPUs of the emulators we run.
                sampler = ControlRoomSampler(lambda: sim_sources(self._ctx.servers.live()))
                self.sampler = TelemetryThread(sampler.sample, interval_s=self._interval_s)
                self.sampler.start()
                self._owns = True
            except Exception as exc:  # no telemetry is a flag on the run, never a stop
                self._ctx.notice("warning", f"GPU telemetry unavailable: {exc}")
                self.sampler = None
        if self.sampler is None:
            return None
        return self.sampler.subscribe(self._relay)

    def _relay(self, snapshot: TelemetrySnapshot) -> None:
        """The one GPU sampler feeds the TUI too: every snapshot while NVML answers, and the first
        one that says why it does not (no driver will not appear while we run)."""
        self.last = snapshot.to_dict()
        if snapshot.available or self._was_available is not False:
            self._ctx.emit(GpuTelemetry(snapshot=self.last, owners=self._gpu_owners(snapshot)))
        self._was_available = bool(snapshot.available)

    def _gpu_owners(self, snapshot: TelemetrySnapshot) -> dict[str, str]:
        """pid -> profile for the snapshot's GPU processes that are a server's (leader or descendant,
        or carrying its marker): the dashboard's owner column, decided here once, not in the UI."""
        try:
            from moe_tui.telemetry import gpu_owners

            live = self._ctx.servers.live()
            leaders = {s.name: s.pid for s in live if s.pid}
            markers = {s.name: s.server_id for s in live}
            pids = {p.pid for g in snapshot.gpus for p in (g.processes or ())}
            owners = gpu_owners(pids, leaders, markers) | {pid: name for name, pid in leaders.items() if pid}
            return {str(pid): name for pid, name in owners.items()}
        except Exception:  # a process that vanished mid-read: no owners this second, never a stop
            return {}

    def stop(self) -> None:
        if self._owns and self.sampler is not None:
            self.sampler.stop()
