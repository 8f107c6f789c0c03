"""NVML access: one lazy process-wide init, and `NvmlSampler`, which reads every GPU into a
`TelemetrySnapshot` and never raises for NVML reasons (a metric a GPU does not support is None, a
machine without the driver yields `available=False` with the reason, a GPU that fell off the bus
is a sample with `lost=True`)."""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Sequence
from typing import Any

from moe_tui.records import FreeForm
from moe_tui.telemetry.data import NO_DRIVER, GpuProcess, GpuSample, TelemetrySnapshot

# --------------------------------------------------------------------------------------------
# NVML access
# --------------------------------------------------------------------------------------------


class _NvmlLibrary:
    """Process-wide NVML state: one lazy init shared by every sampler, one shutdown at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tried = False
        self.ok = False
        self.reason: str | None = None
        self.init_seconds: float | None = None
        self.module: Any = None

    def ensure(self) -> bool:
        with self._lock:
            if self._tried:
                return self.ok
            self._tried = True
            try:
                import pynvml
            except ImportError as exc:  # the dependency is declared, but be honest if it is absent
                self.reason = f"nvidia-ml-py is not installed ({exc})"
                return False
            self.module = pynvml
            start = time.perf_counter()
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError_LibraryNotFound as exc:
                self.reason = f"{NO_DRIVER}: {_text(str(exc))}"
                return False
            except pynvml.NVMLError as exc:
                self.reason = f"NVML init failed: {_text(str(exc))}"
                return False
            except OSError as exc:  # a broken libnvml.so (wrong arch, missing symbols)
                self.reason = f"NVML init failed: {exc}"
                return False
            self.init_seconds = time.perf_counter() - start
            self.ok = True
            atexit.register(self._shutdown)
            return True

    def _shutdown(self) -> None:
        with self._lock:
            if self.ok:
                try:
                    self.module.nvmlShutdown()
                except Exception:  # at exit nothing useful can be done about it
                    pass
                self.ok = False


_NVML = _NvmlLibrary()


def _text(value: Any) -> Any:
    # Older pynvml releases return bytes for strings.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


class NvmlSampler:
    """Reads all (or the given) GPUs into a `TelemetrySnapshot`. Thread-safe; cheap to call.

    `indices` restricts sampling to those GPU indices (a profile's GPU set); `process_names` looks
    up each compute process's name with psutil (skip it when every microsecond counts).
    """

    def __init__(self, indices: Sequence[int] | None = None, *, process_names: bool = True):
        self._want = None if indices is None else tuple(indices)
        self._process_names = process_names
        self._lock = threading.Lock()
        self._handles: list[tuple[int, Any]] | None = None
        self._static: dict[int, FreeForm] = {}  # per GPU: NVML's fixed readings (name, uuid, limits)
        self._system: dict[str, str | None] = {}
        self._proc_fn: Any = None
        self._lost_seen = False

    # -- library state ------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return _NVML.ensure()

    @property
    def reason(self) -> str | None:
        _NVML.ensure()
        return _NVML.reason

    @property
    def init_seconds(self) -> float | None:
        """How long `nvmlInit` took in this process (None before init or without a driver)."""
        return _NVML.init_seconds

    def _query(self, fn_name: str, *args: Any) -> Any:
        """Call one pynvml function; None when it is unsupported, missing or fails in any NVML way.

        NVML answers NotSupported for fans on data-centre parts, NoPermission in some containers,
        FunctionNotFound on older drivers, GpuIsLost when a GPU falls off the bus: none of these
        may take the whole sample down.
        """
        nvml = _NVML.module
        fn = getattr(nvml, fn_name, None)
        if fn is None:  # this nvidia-ml-py release lacks the binding
            return None
        try:
            return _text(fn(*args))
        except nvml.NVMLError as exc:
            lost = getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15)
            if getattr(exc, "value", None) == lost:
                self._lost_seen = True
            return None
        except (OSError, AttributeError):
            return None

    def _ensure_handles(self) -> list[tuple[int, Any]]:
        if self._handles is not None:
            return self._handles
        count = self._query("nvmlDeviceGetCount") or 0
        indices = range(count) if self._want is None else [i for i in self._want if 0 <= i < count]
        handles = []
        for index in indices:
            handle = self._query("nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                handles.append((index, handle))
                self._static[index] = self._read_static(handle)
        cuda = self._query("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = self._query("nvmlSystemGetCudaDriverVersion")
        self._system = {
            "driver_version": self._query("nvmlSystemGetDriverVersion"),
            # NVML encodes CUDA 13.0 as 13000.
            "cuda_driver_version": None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            "nvml_version": self._query("nvmlSystemGetNVMLVersion"),
        }
        self._handles = handles
        return handles

    def _read_static(self, handle: Any) -> FreeForm:
        nvml = _NVML.module
        limit_mw = self._query("nvmlDeviceGetEnforcedPowerLimit", handle)
        return {
            "name": self._query("nvmlDeviceGetName", handle),
            "uuid": self._query("nvmlDeviceGetUUID", handle),
            "sm_clock_max_mhz": self._query("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
            # A fallback only: the enforced limit can change at runtime (nvidia-smi -pl), so each
            # sample re-reads it.
            "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
        }

    # -- sampling -----------------------------------------------------------------------------

    def sample(self) -> TelemetrySnapshot:
        """One snapshot of every GPU. Never raises for NVML reasons."""
        start = time.perf_counter()
        t, wall = time.monotonic(), time.time()
        if not _NVML.ensure():
            return TelemetrySnapshot(
                t=t,
                wall=wall,
                available=False,
                reason=_NVML.reason,
                sample_seconds=time.perf_counter() - start,
            )
        with self._lock:  # handles and the process-function choice are shared state
            handles = self._ensure_handles()
            gpus = tuple(self._sample_gpu(index, handle) for index, handle in handles)
        return TelemetrySnapshot(
            t=t,
            wall=wall,
            gpus=gpus,
            available=True,
            sample_seconds=time.perf_counter() - start,
            **self._system,  # type: ignore[arg-type]  # driver/CUDA/NVML version strings
        )

    def _sample_gpu(self, index: int, handle: Any) -> GpuSample:
        nvml = _NVML.module
        q = self._query
        self._lost_seen = False
        q("nvmlDeviceGetPowerUsage", handle)  # a GPU off the bus answers GPU_IS_LOST to anything
        if self._lost_seen:
            static = self._static.get(index, {})
            return GpuSample(index=index, t=time.monotonic(), wall=time.time(), name=static.get("name"),
                             uuid=static.get("uuid"), lost=True)
        static = self._static.get(index, {})
        util = q("nvmlDeviceGetUtilizationRates", handle)
        mem = q("nvmlDeviceGetMemoryInfo", handle)
        power_mw = q("nvmlDeviceGetPowerUsage", handle)
        limit_mw = q("nvmlDeviceGetEnforcedPowerLimit", handle)
        events = q("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if events is None:  # drivers before the rename only have the "throttle" name
            events = q("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return GpuSample(
            index=index,
            t=time.monotonic(),
            wall=time.time(),
            name=static.get("name"),
            uuid=static.get("uuid"),
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=static.get("power_limit_w") if limit_mw is None else limit_mw / 1000.0,
            temperature_c=_num(q("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)),
            sm_clock_mhz=q("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
            sm_clock_max_mhz=static.get("sm_clock_max_mhz"),
            mem_clock_mhz=q("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM),
            clock_event_bits=None if events is None else int(events),
            processes=self._processes(handle),
        )

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...] | None:
        # The plain name is the newest struct version in current bindings; a driver older than the
        # binding answers FunctionNotFound, so fall back to older versions and remember what worked.
        names = (
            (self._proc_fn,)
            if self._proc_fn
            else (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetComputeRunningProcesses_v2",
            )
        )
        raw = None
        for fn_name in names:
            raw = self._query(fn_name, handle)
            if raw is not None:
                self._proc_fn = fn_name
                break
        if raw is None:
            return None
        procs = []
        for info in raw:
            pid = int(info.pid)
            used = getattr(info, "usedGpuMemory", None)
            procs.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=None if used is None else int(used),
                    name=_process_name(pid) if self._process_names else None,
                )
            )
        return tuple(procs)


def _num(value: Any) -> float | None:  # what pynvml returns (untyped)
    return None if value is None else float(value)


def _process_name(pid: int) -> str | None:
    import psutil

    try:
        name: str = psutil.Process(pid).name()
        return name
    except (psutil.Error, OSError):  # gone, another PID namespace, or not ours to read
        return None
