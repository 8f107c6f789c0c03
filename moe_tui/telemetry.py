"""GPU telemetry: a defensive NVML sampler, a background sampling thread and run summaries.

What lives here:

- `NvmlSampler` reads every GPU through nvidia-ml-py's `pynvml` and returns a frozen
  `TelemetrySnapshot` of `GpuSample`s. NVML is initialised lazily on first use and shut down at
  interpreter exit. Every query is allowed to fail: a metric a GPU does not support is `None`
  ("n/a"), never an exception, and a machine without the driver yields `available=False` with a
  reason instead of failing (the emulator, CI and laptops all run without a GPU).
- `TelemetryThread` samples on a background thread at a fixed interval without ever overlapping
  itself, hands each snapshot to subscribers and keeps a bounded per-GPU history for sparklines.
- `foreign_processes` tells which GPU compute processes are not ours (not a managed server or one
  of its descendants): a foreign process on a benchmarked GPU makes that run's numbers suspect.
- `summarize_run` (pure) turns the snapshots recorded during a run into a JSON-serialisable dict
  (utilization, clocks, throttle reasons, power, memory, foreign processes), and `suspect_reasons`
  turns that dict into the human-readable flags the comparison grid shows.

No Textual here: the TUI subscribes to `TelemetryThread` and posts its own messages.
"""

from __future__ import annotations

import atexit
import collections
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

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

# A run whose SM clock under load fell this far below the GPU's max SM clock is flagged.
CLOCK_DROP_SUSPECT_PCT = 10.0
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

    @property
    def clock_events(self) -> tuple[str, ...]:
        return decode_clock_events(self.clock_event_bits)

    @property
    def mem_used_pct(self) -> float | None:
        if self.mem_used_bytes is None or not self.mem_total_bytes:
            return None
        return 100.0 * self.mem_used_bytes / self.mem_total_bytes

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["clock_events"] = list(self.clock_events)
        if self.processes is not None:
            data["processes"] = [asdict(p) for p in self.processes]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuSample:
        fields = dict(data)
        fields.pop("clock_events", None)  # derived from clock_event_bits
        procs = fields.get("processes")
        if procs is not None:
            fields["processes"] = tuple(GpuProcess(**p) for p in procs)
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

    def gpu(self, index: int) -> GpuSample | None:
        return next((g for g in self.gpus if g.index == index), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = [g.to_dict() for g in self.gpus]
        return data

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
        self._static: dict[int, dict[str, Any]] = {}
        self._system: dict[str, str | None] = {}
        self._proc_fn: Any = None

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
        except (nvml.NVMLError, OSError, AttributeError):
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

    def _read_static(self, handle: Any) -> dict[str, Any]:
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
            **self._system,
        )

    def _sample_gpu(self, index: int, handle: Any) -> GpuSample:
        nvml = _NVML.module
        q = self._query
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


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _process_name(pid: int) -> str | None:
    import psutil

    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):  # gone, another PID namespace, or not ours to read
        return None


# --------------------------------------------------------------------------------------------
# Foreign processes
# --------------------------------------------------------------------------------------------


def expand_descendants(pids: Iterable[int]) -> set[int]:
    """The given PIDs plus every live descendant (SGLang's TP workers are the launcher's children,
    and they are the processes NVML lists). Take it while the servers run."""
    import psutil

    result = set(int(p) for p in pids)
    for pid in list(result):
        try:
            result.update(child.pid for child in psutil.Process(pid).children(recursive=True))
        except (psutil.Error, OSError):
            continue
    return result


def foreign_processes(
    snapshot: TelemetrySnapshot, our_pids: Iterable[int], *, include_descendants: bool = True
) -> list[ForeignProcess]:
    """GPU compute processes in `snapshot` that are not in `our_pids` (nor, by default, their
    live descendants). A PID we cannot see at all is reported too, with `name=None`: we cannot
    prove it is ours."""
    ours = expand_descendants(our_pids) if include_descendants else {int(p) for p in our_pids}
    return _foreign_in(snapshot, ours)


def _foreign_in(snapshot: TelemetrySnapshot, ours: set[int]) -> list[ForeignProcess]:
    found = []
    for gpu in snapshot.gpus:
        for proc in gpu.processes or ():
            if proc.pid not in ours:
                found.append(ForeignProcess(gpu.index, proc.pid, proc.used_memory_bytes, proc.name))
    return found


# --------------------------------------------------------------------------------------------
# Background sampling
# --------------------------------------------------------------------------------------------

SnapshotCallback = Callable[[TelemetrySnapshot], None]


class TelemetryThread:
    """Samples on a daemon thread every `interval_s`, one sample at a time.

    The next sample is scheduled only after the previous one returned (a slow NVML never piles up
    calls): it starts `interval_s` after the previous one started, or at once if that has passed.
    Subscribers are called on the sampling thread, so they must be quick and thread-safe (the TUI
    posts a message; the controller appends to a list). The last `history` samples per GPU are kept
    for sparklines, as are the last `history` snapshots.
    """

    def __init__(
        self,
        sample: Callable[[], TelemetrySnapshot] | NvmlSampler | None = None,
        *,
        interval_s: float = 1.0,
        history: int = 300,
        on_snapshot: SnapshotCallback | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ):
        if interval_s <= 0:
            raise ValueError(f"TelemetryThread interval_s must be > 0, got {interval_s!r}")
        if history < 1:
            raise ValueError(f"TelemetryThread history must be >= 1, got {history!r}")
        if sample is None:
            sample = NvmlSampler()
        self._sample = sample.sample if isinstance(sample, NvmlSampler) else sample
        self.interval_s = float(interval_s)
        self._history = history
        self._on_error = on_error
        self._subscribers: list[SnapshotCallback] = [on_snapshot] if on_snapshot else []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._snapshots: collections.deque[TelemetrySnapshot] = collections.deque(maxlen=history)
        self._per_gpu: dict[int, collections.deque[GpuSample]] = {}
        self.samples_taken = 0
        self.last_error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> TelemetryThread:
        if self._thread is not None:
            raise RuntimeError("TelemetryThread already started")
        self._thread = threading.Thread(target=self._loop, name="moe-tui-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Ask the thread to stop and wait for it; True when it has ended. A sample in flight
        finishes first (NVML calls cannot be interrupted)."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> TelemetryThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- subscribers --------------------------------------------------------------------------

    def subscribe(self, callback: SnapshotCallback) -> Callable[[], None]:
        """Call `callback(snapshot)` for every new snapshot; returns the unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # -- history ------------------------------------------------------------------------------

    @property
    def latest(self) -> TelemetrySnapshot | None:
        with self._lock:
            return self._snapshots[-1] if self._snapshots else None

    def snapshots(self, since_t: float | None = None) -> list[TelemetrySnapshot]:
        """Kept snapshots, oldest first; with `since_t` (monotonic) only those taken at or after it."""
        with self._lock:
            snaps = list(self._snapshots)
        return snaps if since_t is None else [s for s in snaps if s.t >= since_t]

    def history(self, gpu_index: int) -> list[GpuSample]:
        """The kept samples of one GPU, oldest first (for a sparkline)."""
        with self._lock:
            return list(self._per_gpu.get(gpu_index, ()))

    # -- the loop -----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                snapshot = self._sample()
            except Exception as exc:  # a broken sampler must not kill the thread silently
                self.last_error = exc
                if self._on_error is not None:
                    self._on_error(exc)
            else:
                self._record(snapshot)
            delay = self.interval_s - (time.monotonic() - started)
            if delay > 0:
                self._stop.wait(delay)

    def _record(self, snapshot: TelemetrySnapshot) -> None:
        with self._lock:
            self.samples_taken += 1
            self._snapshots.append(snapshot)
            for gpu in snapshot.gpus:
                ring = self._per_gpu.get(gpu.index)
                if ring is None:
                    ring = self._per_gpu[gpu.index] = collections.deque(maxlen=self._history)
                ring.append(gpu)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(snapshot)
            except Exception as exc:
                self.last_error = exc
                if self._on_error is not None:
                    self._on_error(exc)


class SnapshotCollector:
    """A subscriber that keeps every snapshot it is given (a run's telemetry), thread-safe.

        collector = SnapshotCollector()
        unsubscribe = telemetry.subscribe(collector)
        ...  # run the benchmark
        unsubscribe(); summary = summarize_run(collector.snapshots, our_pids)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[TelemetrySnapshot] = []

    def __call__(self, snapshot: TelemetrySnapshot) -> None:
        with self._lock:
            self._items.append(snapshot)

    @property
    def snapshots(self) -> list[TelemetrySnapshot]:
        with self._lock:
            return list(self._items)


# --------------------------------------------------------------------------------------------
# Run summary
# --------------------------------------------------------------------------------------------


def _stats(values: list[float]) -> tuple[float | None, float | None, float | None]:
    if not values:
        return None, None, None
    return round(statistics.fmean(values), 2), min(values), max(values)


def _is_busy(gpu: GpuSample) -> bool:
    if gpu.clock_event_bits is not None and gpu.clock_event_bits & 0x001:
        return False
    return gpu.util_gpu_pct is not None and gpu.util_gpu_pct >= BUSY_UTIL_PCT


def _summarize_gpu(samples: list[GpuSample]) -> dict[str, Any]:
    util = [g.util_gpu_pct for g in samples if g.util_gpu_pct is not None]
    util_mem = [g.util_mem_pct for g in samples if g.util_mem_pct is not None]
    power = [g.power_w for g in samples if g.power_w is not None]
    clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None]
    busy_clocks = [g.sm_clock_mhz for g in samples if g.sm_clock_mhz is not None and _is_busy(g)]
    rated = [g.sm_clock_max_mhz for g in samples if g.sm_clock_max_mhz]
    mem_used = [g.mem_used_bytes for g in samples if g.mem_used_bytes is not None]
    temps = [g.temperature_c for g in samples if g.temperature_c is not None]
    # The rated max is the reference; without it, the highest clock seen (a drop within the run).
    max_clock = max(rated) if rated else (max(clocks) if clocks else None)
    min_busy = min(busy_clocks) if busy_clocks else None
    drop = None
    if max_clock and min_busy is not None:
        drop = round(max(0.0, 100.0 * (max_clock - min_busy) / max_clock), 1)
    event_counts: collections.Counter[str] = collections.Counter()
    with_events = 0
    for g in samples:
        if g.clock_event_bits is not None:
            with_events += 1
            event_counts.update(g.clock_events)
    fractions = {k: round(v / with_events, 3) for k, v in sorted(event_counts.items())}
    util_mean, util_min, util_max = _stats(util)
    return {
        "name": next((g.name for g in samples if g.name), None),
        "uuid": next((g.uuid for g in samples if g.uuid), None),
        "samples": len(samples),
        "busy_samples": sum(1 for g in samples if _is_busy(g)),
        "util_gpu_mean": util_mean,
        "util_gpu_min": util_min,
        "util_gpu_max": util_max,
        "util_mem_mean": _stats(util_mem)[0],
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "sm_clock_max_seen_mhz": max(clocks) if clocks else None,
        "sm_clock_min_busy_mhz": min_busy,
        "sm_clock_max_mhz": max_clock,
        "sm_clock_drop_pct": drop,
        "clock_events_seen": sorted(event_counts),
        "clock_event_fraction": fractions,
        "suspect_clock_events": sorted(set(event_counts) & SUSPECT_CLOCK_EVENTS),
        "power_mean_w": _stats(power)[0],
        "power_max_w": max(power) if power else None,
        "mem_used_peak_bytes": max(mem_used) if mem_used else None,
        "mem_total_bytes": next((g.mem_total_bytes for g in samples if g.mem_total_bytes), None),
        "temperature_max_c": max(temps) if temps else None,
    }


def summarize_run(
    snapshots: Sequence[TelemetrySnapshot], our_pids: Iterable[int] | None = None
) -> dict[str, Any]:
    """Summarise a run's telemetry into a JSON-serialisable dict (stored with the run).

    `our_pids` are the managed servers' PIDs *with their descendants* (`expand_descendants`, taken
    while the servers ran); None means "not judged" and leaves `foreign_processes` as None. Pure:
    no NVML, no psutil.
    """
    available = [s for s in snapshots if s.available]
    reasons = sorted({s.reason for s in snapshots if not s.available and s.reason})
    summary: dict[str, Any] = {
        "available": bool(available),
        "reason": None if available else (reasons[0] if reasons else "no telemetry samples"),
        "snapshots": len(snapshots),
        "duration_s": round(snapshots[-1].t - snapshots[0].t, 3) if len(snapshots) > 1 else 0.0,
        "driver_version": next((s.driver_version for s in available if s.driver_version), None),
        "cuda_driver_version": next(
            (s.cuda_driver_version for s in available if s.cuda_driver_version), None
        ),
        "gpus": {},
        "overall": {},
        "foreign_processes": None,
    }
    per_gpu: dict[int, list[GpuSample]] = collections.defaultdict(list)
    for snap in available:
        for gpu in snap.gpus:
            per_gpu[gpu.index].append(gpu)
    gpus = {str(i): _summarize_gpu(per_gpu[i]) for i in sorted(per_gpu)}
    summary["gpus"] = gpus

    all_samples = [g for i in sorted(per_gpu) for g in per_gpu[i]]
    util_mean, util_min, util_max = _stats(
        [g.util_gpu_pct for g in all_samples if g.util_gpu_pct is not None]
    )
    drops = [v["sm_clock_drop_pct"] for v in gpus.values() if v["sm_clock_drop_pct"] is not None]
    clocks = [g.sm_clock_mhz for g in all_samples if g.sm_clock_mhz is not None]
    peaks = [v["mem_used_peak_bytes"] for v in gpus.values() if v["mem_used_peak_bytes"] is not None]
    powers = [v["power_mean_w"] for v in gpus.values() if v["power_mean_w"] is not None]
    seen = sorted({e for v in gpus.values() for e in v["clock_events_seen"]})
    summary["overall"] = {
        "gpu_count": len(gpus),
        "util_gpu_mean": util_mean,
        "util_gpu_min": util_min,
        "util_gpu_max": util_max,
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "sm_clock_max_seen_mhz": max(clocks) if clocks else None,
        "sm_clock_drop_pct": max(drops) if drops else None,  # the worst GPU sets the pace in TP
        "clock_events_seen": seen,
        "suspect_clock_events": sorted(set(seen) & SUSPECT_CLOCK_EVENTS),
        "power_mean_w": round(statistics.fmean(powers), 2) if powers else None,  # per GPU
        "power_total_mean_w": round(sum(powers), 2) if powers else None,
        "mem_used_peak_bytes": max(peaks) if peaks else None,  # the fullest GPU
    }

    if our_pids is not None:
        ours = {int(p) for p in our_pids}
        seen_foreign: dict[tuple[int, int], dict[str, Any]] = {}
        for snap in available:
            for fp in _foreign_in(snap, ours):
                entry = seen_foreign.setdefault(
                    (fp.gpu_index, fp.pid),
                    {"gpu": fp.gpu_index, "pid": fp.pid, "name": fp.name, "samples": 0,
                     "max_used_memory_bytes": None},
                )
                entry["samples"] += 1
                entry["name"] = entry["name"] or fp.name
                if fp.used_memory_bytes is not None:
                    prev = entry["max_used_memory_bytes"] or 0
                    entry["max_used_memory_bytes"] = max(prev, fp.used_memory_bytes)
        summary["foreign_processes"] = [seen_foreign[k] for k in sorted(seen_foreign)]
    return summary


def suspect_reasons(summary: Mapping[str, Any]) -> list[str]:
    """Human-readable reasons to distrust a run, from `summarize_run`'s dict; [] when none.

    Missing telemetry is not a suspect reason (the emulator has no GPU); the grid says that
    separately from `summary["available"]`.
    """
    reasons: list[str] = []
    for index, gpu in (summary.get("gpus") or {}).items():
        fractions = gpu.get("clock_event_fraction") or {}
        for event in gpu.get("suspect_clock_events") or ():
            share = fractions.get(event)
            when = f" in {share * 100:.0f}% of samples" if share is not None else ""
            reasons.append(f"GPU {index} throttled: {event}{when}")
        drop = gpu.get("sm_clock_drop_pct")
        if drop is not None and drop >= CLOCK_DROP_SUSPECT_PCT:
            reasons.append(
                f"GPU {index} SM clock dropped {drop:.0f}% under load "
                f"({gpu.get('sm_clock_min_busy_mhz')} of {gpu.get('sm_clock_max_mhz')} MHz)"
            )
    for proc in summary.get("foreign_processes") or ():
        who = proc.get("name") or "not visible here"
        mem = proc.get("max_used_memory_bytes")
        size = f", {mem / 2**30:.1f} GiB" if mem is not None else ""
        reasons.append(f"foreign GPU process on GPU {proc['gpu']}: pid {proc['pid']} ({who}{size})")
    return reasons
