"""Simulated GPUs: what NVML would report for the emulator's GPU set, computed from the engine.

One `SimGpuBoard` per emulator, one `SimGpu` per rank (the profile's GPU set, from
CUDA_VISIBLE_DEVICES like SGLang's own processes see it). Modelled:

- utilization follows how busy the engine was over the last second and how full the batch is
  (`load` = busy x (0.55 + 0.45 x sqrt(running / max_running))); NVML's own figure is only the
  share of time a kernel ran, a batch of 1 shows 100% on a real box: documented in docs/emulator.md;
- memory as SGLang fills it: CUDA context at init, weights during the load phase, then the static
  KV pool (`--mem-fraction-static` of the card) and CUDA graphs; flat after start (SGLang
  pre-allocates its KV pool; used memory does not follow the batch);
- power demand rises with load to ~90% of the card's power limit; when demand passes the enforced limit
  (`--sim-gpu-power-limit-w`, the fault of a lowered cap), power sits at the limit, the SM clock
  falls as (limit / demand)^1.2 and the clock-event bitmask carries sw_power_cap (0x4) as NVML
  encodes it; an idle GPU reports gpu_idle (0x1) and a parked clock;
- temperature relaxes toward 28 C + 0.055 C/W with an 8 s (wall) time constant;
- the card: `GPU_PRESETS` (default RTX PRO 6000 Blackwell, the performance model's box; `--sim-gpu
  h200` for an H200), its name, memory, power limit and clocks as NVML reports them;
- compute processes: each rank's scheduler child, holding that rank's memory; fault flags add a
  foreign process on one GPU or make one GPU "lost" (NVML_ERROR_GPU_IS_LOST on every query).

The wire format is `moe_tui.telemetry.GpuSample`'s dict (plus `lost`), so the control room reads
it with the same code as NVML's. Pure apart from the clock passed in.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict


class SimProcessWire(TypedDict):
    """A compute process on a simulated GPU, as NVML's process list reads."""

    pid: int
    used_memory_bytes: int
    name: str | None


class SimGpuWire(TypedDict):
    """One simulated GPU on the wire (`GET /sim/gpus`): `telemetry.GpuSample`'s fields plus `lost`;
    a lost GPU carries only the first six (NVML_ERROR_GPU_IS_LOST on every other query)."""

    index: int
    t: float
    wall: float
    name: str
    lost: bool
    processes: list[SimProcessWire] | None
    uuid: NotRequired[str]
    util_gpu_pct: NotRequired[float]
    util_mem_pct: NotRequired[float]
    mem_used_bytes: NotRequired[int]
    mem_total_bytes: NotRequired[int]
    power_w: NotRequired[float]
    power_limit_w: NotRequired[float]
    temperature_c: NotRequired[int]
    sm_clock_mhz: NotRequired[int]
    sm_clock_max_mhz: NotRequired[int]
    mem_clock_mhz: NotRequired[int]
    clock_event_bits: NotRequired[int]

@dataclass(frozen=True)
class GpuPreset:
    """One simulated card: what NVML reports for it, and its compute capability (SGLang's
    choices depend on it: NVFP4 MoE runners need SM100+, DSA's default KV cache is fp8 from SM100)."""

    key: str
    name: str  # nvmlDeviceGetName
    mem_total_bytes: int
    power_limit_w: float
    sm_clock_max_mhz: int
    mem_clock_mhz: int
    sm_major: int

    @property
    def blackwell(self) -> bool:
        return self.sm_major >= 10


# The performance model (backends.toml) is 8 x RTX PRO 6000 Blackwell (the seed's box): that card is
# the default. Figures: the Server Edition's datasheet (96 GB GDDR7, 600 W, 2617 MHz boost) and the
# MiB nvidia-smi lists for 96 GB cards; the name is NVML's for the Server Edition. The H200 preset is
# an H200 SXM (143771 MiB, 700 W, 1980 MHz) and SM90: SGLang 0.5.23 refuses NVFP4 MoE runners there.
GPU_PRESETS: dict[str, GpuPreset] = {
    "rtx-pro-6000": GpuPreset("rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97_887 * 2**20,
                              600.0, 2617, 14001, 12),
    "h200": GpuPreset("h200", "NVIDIA H200", 143_771 * 2**20, 700.0, 1980, 3201, 9),
}
DEFAULT_PRESET = GPU_PRESETS["rtx-pro-6000"]
GPU_NAME = DEFAULT_PRESET.name
MEM_TOTAL_BYTES = DEFAULT_PRESET.mem_total_bytes
POWER_LIMIT_W = DEFAULT_PRESET.power_limit_w
IDLE_POWER_W = 75.0
PEAK_DEMAND_FRACTION = 0.9  # full load asks 90% of the default limit: no throttle by default
SM_CLOCK_MAX_MHZ = DEFAULT_PRESET.sm_clock_max_mhz
SM_CLOCK_IDLE_MHZ = 345
MEM_CLOCK_MHZ = DEFAULT_PRESET.mem_clock_mhz
CONTEXT_BYTES = int(0.55 * 2**30)
GRAPH_BYTES = int(2.1 * 2**30)
TEMP_AMBIENT_C = 28.0
TEMP_PER_W = 0.055
TEMP_TAU_S = 8.0
THROTTLE_EXPONENT = 1.2
BIT_GPU_IDLE = 0x001
BIT_SW_POWER_CAP = 0x004
FOREIGN_BYTES = 8 * 2**30
UPDATE_EVERY_S = 0.1


@dataclass
class SimGpu:
    index: int
    rank: int
    temp_c: float = TEMP_AMBIENT_C + 4
    power_w: float = IDLE_POWER_W
    clock_mhz: int = SM_CLOCK_IDLE_MHZ
    bits: int = BIT_GPU_IDLE
    util: float = 0.0
    offset: dict[str, float] = field(default_factory=dict)  # fixed per-board differences
    holder_pid: int | None = None


class SimGpuBoard:
    """The emulator's GPUs: per-GPU state advanced from engine load (see the module docstring)."""

    def __init__(self, indices: list[int], *, weights_gib: float, mem_fraction: float,
                 power_limit_w: float | None = None, seed: int = 0, preset: GpuPreset = DEFAULT_PRESET) -> None:
        self.preset = preset
        power_limit_w = preset.power_limit_w if power_limit_w is None else power_limit_w
        rng = random.Random(seed ^ 0x5EED)
        self.gpus = [SimGpu(index=g, rank=r, offset={
            "power": rng.uniform(-0.03, 0.03), "temp": rng.uniform(-2.0, 2.0),
            "mem": (0.3 if r == 0 else 0.0) + rng.uniform(0.0, 0.05)}) for r, g in enumerate(indices)]
        self.weights_bytes = int(weights_gib * 2**30)
        self.static_bytes = int(mem_fraction * preset.mem_total_bytes)
        self.power_limit_w = power_limit_w
        self.mem_phase = "empty"  # empty -> context -> loading -> kv -> graphs
        self.load_progress = 0.0
        self.foreign: tuple[int, int] | None = None  # (gpu index, pid)
        self.lost: set[int] = set()
        self._last_t: float | None = None
        self.speed = 1.0  # step-time divisor from the slowest GPU's clock (TP moves at its pace)

    # -- inputs ---------------------------------------------------------------------------------
    def set_holders(self, pids: list[int]) -> None:
        for gpu, pid in zip(self.gpus, pids):
            gpu.holder_pid = pid

    def update(self, now: float, busy: float, occupancy: float) -> None:
        """Advance every GPU to wall time `now` given the engine's recent busy share and batch
        occupancy (both 0..1). Cheap to call often: it recomputes at most every 0.1 s."""
        if self._last_t is not None and now - self._last_t < UPDATE_EVERY_S:
            return
        dt = 0.0 if self._last_t is None else now - self._last_t
        self._last_t = now
        load = max(0.0, min(1.0, busy)) * (0.55 + 0.45 * math.sqrt(max(0.0, min(1.0, occupancy))))
        slowest = 1.0
        for gpu in self.gpus:
            demand = (IDLE_POWER_W + (PEAK_DEMAND_FRACTION * self.preset.power_limit_w - IDLE_POWER_W)
                      * load ** 0.8) * (1.0 + gpu.offset["power"])
            gpu.util = 100.0 * load
            if load < 0.02:
                gpu.bits, gpu.clock_mhz, gpu.power_w = BIT_GPU_IDLE, SM_CLOCK_IDLE_MHZ, demand
            elif demand > self.power_limit_w:
                ratio = (self.power_limit_w / demand) ** THROTTLE_EXPONENT
                gpu.bits, gpu.power_w = BIT_SW_POWER_CAP, self.power_limit_w * 0.995
                gpu.clock_mhz = int(self.preset.sm_clock_max_mhz * ratio) // 15 * 15  # 15 MHz bins
                slowest = min(slowest, ratio)
            else:
                gpu.bits, gpu.clock_mhz, gpu.power_w = 0, self.preset.sm_clock_max_mhz, demand
            target = TEMP_AMBIENT_C + gpu.offset["temp"] + TEMP_PER_W * gpu.power_w
            gpu.temp_c = target + (gpu.temp_c - target) * math.exp(-dt / TEMP_TAU_S)
        # A throttled rank slows the whole TP group: every step waits for the slowest GPU.
        self.speed = slowest

    # -- output ---------------------------------------------------------------------------------
    def _mem_used(self, gpu: SimGpu) -> int:
        extra = int(gpu.offset["mem"] * 2**30)
        if self.mem_phase == "empty":
            return 0
        if self.mem_phase == "context":
            return CONTEXT_BYTES
        if self.mem_phase == "loading":
            return CONTEXT_BYTES + int(self.weights_bytes * self.load_progress)
        used = CONTEXT_BYTES + max(self.static_bytes, self.weights_bytes) + extra
        return used + (GRAPH_BYTES if self.mem_phase == "graphs" else 0)

    def sample(self, now_wall: float, now_mono: float) -> list[SimGpuWire]:
        """Every GPU as a `GpuSample` dict (what the control room's sampler reads)."""
        out: list[SimGpuWire] = []
        for gpu in self.gpus:
            if gpu.index in self.lost:
                out.append({"index": gpu.index, "t": now_mono, "wall": now_wall, "name": self.preset.name,
                            "lost": True, "processes": None})
                continue
            used = self._mem_used(gpu)
            procs: list[SimProcessWire] = []
            if gpu.holder_pid is not None and used:
                procs.append({"pid": gpu.holder_pid, "used_memory_bytes": used - CONTEXT_BYTES // 2,
                              "name": None})
            if self.foreign is not None and self.foreign[0] == gpu.index:
                procs.append({"pid": self.foreign[1], "used_memory_bytes": FOREIGN_BYTES, "name": None})
                used += FOREIGN_BYTES
            out.append({
                "index": gpu.index, "t": now_mono, "wall": now_wall, "name": self.preset.name,
                "uuid": f"GPU-5130{gpu.index:04d}-sim0-0000-0000-00000000000{gpu.index % 10}",
                "util_gpu_pct": round(gpu.util, 1), "util_mem_pct": round(gpu.util * 0.6, 1),
                "mem_used_bytes": used, "mem_total_bytes": self.preset.mem_total_bytes,
                "power_w": round(gpu.power_w, 1), "power_limit_w": self.power_limit_w,
                "temperature_c": round(gpu.temp_c), "sm_clock_mhz": gpu.clock_mhz,
                "sm_clock_max_mhz": self.preset.sm_clock_max_mhz, "mem_clock_mhz": self.preset.mem_clock_mhz,
                "clock_event_bits": gpu.bits, "processes": procs, "lost": False,
            })
        return out


def idle_sample(index: int, now_wall: float, now_mono: float) -> SimGpuWire:
    """A simulated GPU no running emulator holds: idle, empty, cool (a `GpuSample` dict)."""
    return {"index": index, "t": now_mono, "wall": now_wall, "name": GPU_NAME,
            "uuid": f"GPU-5130{index:04d}-sim0-0000-0000-00000000000{index % 10}",
            "util_gpu_pct": 0.0, "util_mem_pct": 0.0, "mem_used_bytes": 0,
            "mem_total_bytes": MEM_TOTAL_BYTES, "power_w": IDLE_POWER_W, "power_limit_w": POWER_LIMIT_W,
            "temperature_c": round(TEMP_AMBIENT_C + 2), "sm_clock_mhz": SM_CLOCK_IDLE_MHZ,
            "sm_clock_max_mhz": SM_CLOCK_MAX_MHZ, "mem_clock_mhz": MEM_CLOCK_MHZ,
            "clock_event_bits": BIT_GPU_IDLE, "processes": [], "lost": False}
