"""Server lifecycle vocabulary: states, startup phases, the errors, and the GPU facts the
pre-start checks and the stop consult (an injectable `GpuProbe`, NVML by default)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moe_tui import judgement
from moe_tui.events import Event, ServerStateChanged

if TYPE_CHECKING:
    from moe_tui.telemetry.nvml import NvmlSampler

# -- states and phases ---------------------------------------------------------------------------
STOPPED, STARTING, READY, FAILED, STOPPING = "stopped", "starting", "ready", "failed", "stopping"
STATES = (STOPPED, STARTING, READY, FAILED, STOPPING)
LIVE_STATES = (STARTING, READY, STOPPING)

PHASE_LAUNCHING = "launching"
PHASE_LOADING = "loading weights"
# FlashInfer MoE backends tune their kernels on a first start (minutes, silent): its own phase, so
# it never reads as a weight load that hangs.
PHASE_AUTOTUNE = "autotuning"
PHASE_GRAPHS = "capturing graphs"
PHASE_WARMUP = "warmup"
PHASE_READY = "ready"
PHASES = (PHASE_LAUNCHING, PHASE_LOADING, PHASE_AUTOTUNE, PHASE_GRAPHS, PHASE_WARMUP, PHASE_READY)

# Log line fragments (SGLang's own wording, which the emulator reproduces) -> phase reached.
# Matched case-insensitively: SGLang 0.5.23 logs "Capture target decode CUDA graph begin." (srt/
# model_executor/model_runner_components/cuda_graph_setup.py); older releases "Capture cuda graph begin".
_PHASE_MARKERS: tuple[tuple[str, str], ...] = (
    ("Load weight begin", PHASE_LOADING),
    ("Load weight end", PHASE_LOADING),
    # srt/model_executor/runner/flashinfer_autotune.py
    ("Running FlashInfer autotune", PHASE_AUTOTUNE),
    ("FlashInfer autotune completed", PHASE_AUTOTUNE),
    ("CUDA graph begin", PHASE_GRAPHS),
    ("CUDA graph end", PHASE_WARMUP),
    ("Application startup complete", PHASE_WARMUP),
    ("Uvicorn running on", PHASE_WARMUP),
    ("The server is fired up and ready to roll", PHASE_WARMUP),
)

SERVER_ID_ENV = judgement.SERVER_ID_ENV  # one spelling, in judgement
LOG_TAIL_LINES = 50
DEFAULT_RING_LINES = 2000
# SGLang drains in-flight requests on SIGTERM (about 20 s); the emulator has nothing to drain.
DEFAULT_GRACE_S = {"sglang": 20.0, "sim": 3.0}
KILL_CONFIRM_S = 10.0

EventCallback = Callable[[Event], None]


class ServerError(RuntimeError):
    """A server could not be started, became unusable, or did not stop cleanly."""


class ServerStartError(ServerError):
    """A pre-start check refused the start. The message names the port, GPUs or process."""


class PortInUseError(ServerStartError):
    def __init__(self, message: str, *, port: int, holder_pid: int | None, holder_name: str | None):
        super().__init__(message)
        self.port = port
        self.holder_pid = holder_pid
        self.holder_name = holder_name


class GpuConflictError(ServerStartError):
    """Another managed server uses some of the same GPUs, or a GPU index does not exist."""


class ForeignGpuProcessError(ServerStartError):
    """A process that is not ours holds one of the profile's GPUs (start with force=True to override)."""


class ServerFailed(ServerError):
    """The server failed while starting or running; `event` carries exit code, signal and log tail."""

    def __init__(self, message: str, event: ServerStateChanged | None = None):
        super().__init__(message)
        self.event = event


class ServerInfoError(ValueError):
    """`/server_info` answered something that is not a usable SGLang server-info object."""


# -- GPU facts (injectable so tests and machines without NVML do not depend on it) -------------
@dataclass(frozen=True)
class GpuView:
    """What the machine says about its GPUs: how many, and which processes use each (None = unknown)."""

    count: int | None
    processes: Mapping[int, tuple[tuple[int, str | None], ...] | None] = field(default_factory=dict)

    def pids_on(self, gpus: Iterable[int]) -> dict[int, list[tuple[int, str | None]]]:
        out: dict[int, list[tuple[int, str | None]]] = {}
        for g in gpus:
            procs = self.processes.get(g)
            if procs:
                out[g] = list(procs)
        return out


GpuProbe = Callable[[], "GpuView | None"]

_NVML_SAMPLER: NvmlSampler | None = None


def nvml_gpu_view() -> GpuView | None:
    """GPU count and compute processes from NVML (moe_tui.telemetry); None without a driver."""
    global _NVML_SAMPLER
    try:
        from moe_tui.telemetry import NvmlSampler
    except ImportError:
        return None
    if _NVML_SAMPLER is None:
        _NVML_SAMPLER = NvmlSampler()
    snapshot = _NVML_SAMPLER.sample()
    if not snapshot.available:
        return None
    processes = {
        g.index: None if g.processes is None else tuple((p.pid, p.name) for p in g.processes)
        for g in snapshot.gpus
    }
    return GpuView(count=len(snapshot.gpus), processes=processes)


def no_gpu_view() -> GpuView | None:
    """A probe for machines (and tests) where GPU facts are not to be consulted."""
    return None
