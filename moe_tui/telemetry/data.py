"""Telemetry data: NVML's clock-event bits and their names, and the frozen samples every source
(real NVML or the emulator's simulated GPUs) produces: `GpuSample`, `TelemetrySnapshot`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from moe_tui.judgement import CLOCK_DROP_SUSPECT_PCT as CLOCK_DROP_SUSPECT_PCT

# A run whose SM clock under load fell this far below the GPU's max SM clock is flagged: the
# threshold is judgement's (one home for run-trust rules), re-exported here for telemetry callers.
from moe_tui.records import FreeForm, GpuSnapshotJson

# --------------------------------------------------------------------------------------------
# Clock event ("throttle") reasons
# --------------------------------------------------------------------------------------------

# Bit values are NVML's (nvmlClocksEventReason* / the older nvmlClocksThrottleReason*); they are
# written out here so decoding works and is testable without the library.
CLOCK_EVENT_BITS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}

# Reasons that mean the GPU ran slower than it could for reasons outside the workload: a run that
# saw them measured the cooling or the power budget as much as the backend. gpu_idle is benign
# (nothing to do), applications_clocks / display_clocks / sync_boost are configuration, not stress.
SUSPECT_CLOCK_EVENTS: frozenset[str] = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}
)

# A sample counts as "under load" for clock-drop purposes when the GPU was at least this busy and
# NVML did not call it idle: idle GPUs park their clocks and that is no drop.
BUSY_UTIL_PCT = 50.0

NO_DRIVER = "no NVIDIA driver"


def decode_clock_events(bits: int | None) -> tuple[str, ...]:
    """Short names of the reasons set in an NVML clock-event bitmask; unknown bits as hex."""
    if bits is None:
        return ()
    names = [name for bit, name in CLOCK_EVENT_BITS.items() if bits & bit]
    unknown = bits & ~sum(CLOCK_EVENT_BITS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return tuple(names)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on one GPU. `name` is None when the PID is not visible to us (another
    PID namespace, e.g. a container) or psutil may not read it; `used_memory_bytes` is None when
    NVML does not report it (some virtualised setups)."""

    pid: int
    used_memory_bytes: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment. Any metric may be None: the GPU or driver does not report it."""

    index: int
    t: float  # time.monotonic() when the sample was taken (for intervals)
    wall: float  # time.time() when the sample was taken (for display and storage)
    name: str | None = None
    uuid: str | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_bits: int | None = None
    # None: NVML could not list processes; (): it listed none.
    processes: tuple[GpuProcess, ...] | None = None
    # NVML answered GPU_IS_LOST: the GPU fell off the bus (every metric above is None).
    lost: bool = False

    @property
    def clock_events(self) -> tuple[str, ...]:
        return decode_clock_events(self.clock_event_bits)

    @property
    def mem_used_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes

    def to_dict(self) -> FreeForm:
        """This sample's fields (and its clock events by name): read back by `from_dict`, which drops
        keys it does not know (the emulator's /sim/gpus sends its own too)."""
        data = asdict(self)
        data["clock_events"] = list(self.clock_events)
        if self.processes is not None:
            data["processes"] = [asdict(p) for p in self.processes]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuSample:
        # Unknown keys are dropped: samples also arrive over HTTP from the emulator's /sim/gpus.
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        procs = fields.get("processes")
        if procs is not None:
            fields["processes"] = tuple(
                GpuProcess(**{k: v for k, v in p.items() if k in GpuProcess.__dataclass_fields__}) for p in procs)
        return cls(**fields)


@dataclass(frozen=True)
class TelemetrySnapshot:
    """Every GPU at (nearly) one moment, plus what the system reported about NVML itself."""

    t: float
    wall: float
    gpus: tuple[GpuSample, ...] = ()
    available: bool = True
    reason: str | None = None  # why telemetry is unavailable, e.g. "no NVIDIA driver: ..."
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "13.0"
    nvml_version: str | None = None
    sample_seconds: float | None = None  # what taking this snapshot cost
    simulated: bool = False  # the emulator's simulated GPUs, not NVML (the panel says SIMULATED)

    def gpu(self, index: int) -> GpuSample | None:
        return next((g for g in self.gpus if g.index == index), None)

    def to_dict(self) -> GpuSnapshotJson:
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        return cast(GpuSnapshotJson, data)  # this dataclass's fields, the GPUs' as to_dict writes them

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TelemetrySnapshot:
        fields = dict(data)
        fields["gpus"] = tuple(GpuSample.from_dict(g) for g in fields.get("gpus", ()))
        return cls(**fields)


@dataclass(frozen=True)
class ForeignProcess:
    """A GPU compute process that is not one of our managed servers or their descendants."""

    gpu_index: int
    pid: int
    used_memory_bytes: int | None
    name: str | None  # None: the PID is not visible here (other PID namespace) or unreadable
