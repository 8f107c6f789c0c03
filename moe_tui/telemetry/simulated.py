"""Telemetry sources for the control room: NVML when a driver answers, else the simulated GPUs of
the simulated servers it runs.

Every emulator (`moe-tui sim`) serves `GET /sim/gpus`: its GPU set as `GpuSample` dicts (see
`moe_tui.sim.gpus`). `SimulatedGpuSampler` polls the live simulated servers' endpoints, merges
their GPUs by index, fills the indices of simulated profiles no running server holds with idle
GPUs, looks up process names like `NvmlSampler` does, and returns one `TelemetrySnapshot` with
`simulated=True` (the panel title says SIMULATED). `ControlRoomSampler` is what the TUI and the
controller sample: NVML's snapshot when the driver is there, the simulated one otherwise.

API (all synchronous, safe on a sampling thread; nothing raises for an unreachable server):

    sources = lambda: [SimSource("http://127.0.0.1:31000", (0, 1, 2, 3, 4, 5, 6, 7), live=True)]
    sampler = ControlRoomSampler(sources)
    snapshot = sampler.sample()          # TelemetrySnapshot; .simulated tells which
    sim_sources(objects)                 # SimSource list from ServerRow / ManagedServer objects
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from moe_tui.judgement import SIM_ENGINE, is_live
from moe_tui.telemetry.data import GpuProcess, GpuSample, TelemetrySnapshot
from moe_tui.telemetry.nvml import NvmlSampler, _process_name

SIM_GPUS_PATH = "/sim/gpus"
NO_SIM = "no NVIDIA driver, and no simulated server runs"


@dataclass(frozen=True)
class SimSource:
    """One simulated server: where it answers, its GPU set, whether it is running."""

    url: str
    gpus: tuple[int, ...] = ()
    live: bool = False


def sim_sources(servers: Iterable[object]) -> list[SimSource]:
    """SimSources from objects that look like a dashboard `ServerRow` (engine, state, port, gpus)
    or a `ManagedServer` (profile.engine/host/port/gpus, state); non-simulated ones are skipped."""
    out = []
    for server in servers:
        profile = getattr(server, "profile", server)
        if isinstance(profile, str):  # a dashboard row: `profile` is the name, the facts are on it
            profile = server
        if getattr(profile, "engine", None) != SIM_ENGINE:
            continue
        host = getattr(profile, "host", "127.0.0.1") or "127.0.0.1"
        host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        port = getattr(profile, "port", None)
        if port is None:
            continue
        out.append(SimSource(f"http://{host}:{port}", tuple(getattr(profile, "gpus", ()) or ()),
                             is_live(getattr(server, "state", None))))
    return out


def _fetch(url: str, timeout_s: float) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url + SIM_GPUS_PATH, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError, TimeoutError):
        return None  # starting, stopping or gone: its GPUs show idle this second
    return data if isinstance(data, dict) and data.get("simulated") else None


def _merge(a: GpuSample, b: GpuSample) -> GpuSample:
    """Two servers claiming one GPU (an overlap the lifecycle refuses, or an orphan): both listed."""
    procs = (a.processes or ()) + (b.processes or ())
    used = (a.mem_used_bytes or 0) + (b.mem_used_bytes or 0)
    return replace(a if (a.util_gpu_pct or 0) >= (b.util_gpu_pct or 0) else b, processes=procs,
                   mem_used_bytes=used)


class SimulatedGpuSampler:
    """The simulated servers' GPUs as one snapshot (see the module docstring)."""

    def __init__(self, sources: Callable[[], Iterable[SimSource]], *, timeout_s: float = 0.5,
                 process_names: bool = True) -> None:
        self._sources = sources
        self.timeout_s = timeout_s
        self._process_names = process_names

    def sample(self) -> TelemetrySnapshot:
        from moe_tui.sim.gpus import idle_sample

        start = time.perf_counter()
        t, wall = time.monotonic(), time.time()
        sources = list(self._sources())
        gpus: dict[int, GpuSample] = {}
        for source in sources:
            data = _fetch(source.url, self.timeout_s) if source.live else None
            for raw in (data or {}).get("gpus") or ():
                sample = self._named(GpuSample.from_dict(raw))
                gpus[sample.index] = _merge(gpus[sample.index], sample) if sample.index in gpus else sample
        for index in sorted({g for s in sources for g in s.gpus} - set(gpus)):
            gpus[index] = GpuSample.from_dict(idle_sample(index, wall, t))
        if not gpus:
            return TelemetrySnapshot(t=t, wall=wall, available=False, reason=NO_SIM, simulated=True,
                                     sample_seconds=time.perf_counter() - start)
        return TelemetrySnapshot(t=t, wall=wall, gpus=tuple(gpus[i] for i in sorted(gpus)), available=True,
                                 driver_version="simulated", simulated=True,
                                 sample_seconds=time.perf_counter() - start)

    def _named(self, sample: GpuSample) -> GpuSample:
        if not self._process_names or not sample.processes:
            return sample
        return replace(sample, processes=tuple(
            p if p.name else GpuProcess(p.pid, p.used_memory_bytes, _process_name(p.pid))
            for p in sample.processes))


class ControlRoomSampler:
    """NVML's snapshot when a driver answers; otherwise the simulated GPUs (never both: a real
    box's panel never mixes in simulated rows). `may_appear`: keep sampling even while
    unavailable (a simulated server may start at any time)."""

    may_appear = True

    def __init__(self, sources: Callable[[], Iterable[SimSource]], *, nvml: NvmlSampler | None = None,
                 simulated: SimulatedGpuSampler | None = None) -> None:
        self.nvml = nvml if nvml is not None else NvmlSampler()
        self.simulated = simulated if simulated is not None else SimulatedGpuSampler(sources)

    def sample(self) -> TelemetrySnapshot:
        real = self.nvml.sample()
        if real.available:
            return real
        sim = self.simulated.sample()
        if sim.available:
            return sim
        return replace(real, reason=f"{real.reason}; no simulated server runs" if real.reason else NO_SIM)
