"""GPU telemetry: NVML or simulated GPUs, background sampling, run summaries, process ownership.

What lives here (one module each; everything is importable from `moe_tui.telemetry`):

- `data`: NVML's clock-event ("throttle") bits and the frozen samples every source produces
  (`GpuSample`, `TelemetrySnapshot`, `GpuProcess`, `ForeignProcess`).
- `nvml`: `NvmlSampler`, a defensive NVML reader: lazy init, every query may fail (None, "n/a"), no
  driver is `available=False` with a reason, a GPU off the bus is `lost=True`.
- `simulated`: `SimulatedGpuSampler` (the emulators' `/sim/gpus`) and `ControlRoomSampler` (NVML
  when a driver answers, else the simulated GPUs of the simulated servers running).
- `sampling`: `TelemetryThread` (one sample at a time on a daemon thread, subscribers, history)
  and `SnapshotCollector`.
- `summary`: `foreign_processes`, `summarize_run` (pure) and `suspect_reasons`.
- `ownership`: which server a process belongs to (judgement's one rule over the process table).

No Textual here: the TUI subscribes and posts its own messages.
"""

from moe_tui.telemetry.data import (
    BUSY_UTIL_PCT,
    CLOCK_DROP_SUSPECT_PCT,
    CLOCK_EVENT_BITS,
    NO_DRIVER,
    SUSPECT_CLOCK_EVENTS,
    ForeignProcess,
    GpuProcess,
    GpuSample,
    TelemetrySnapshot,
    decode_clock_events,
)
from moe_tui.telemetry.nvml import NvmlSampler
from moe_tui.telemetry.ownership import gpu_owners, server_families
from moe_tui.telemetry.sampling import SnapshotCallback, SnapshotCollector, TelemetryThread
from moe_tui.telemetry.simulated import ControlRoomSampler, SimSource, SimulatedGpuSampler, sim_sources
from moe_tui.telemetry.summary import expand_descendants, foreign_processes, summarize_run, suspect_reasons

__all__ = [
    "BUSY_UTIL_PCT", "CLOCK_DROP_SUSPECT_PCT", "CLOCK_EVENT_BITS", "NO_DRIVER", "SUSPECT_CLOCK_EVENTS",
    "ControlRoomSampler", "ForeignProcess", "GpuProcess", "GpuSample", "NvmlSampler", "SimSource",
    "SimulatedGpuSampler", "SnapshotCallback", "SnapshotCollector", "TelemetrySnapshot", "TelemetryThread",
    "decode_clock_events", "expand_descendants", "foreign_processes", "gpu_owners", "server_families",
    "sim_sources", "summarize_run", "suspect_reasons",
]
