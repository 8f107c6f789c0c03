"""Background sampling: `TelemetryThread` (one sample at a time on a daemon thread, subscribers,
bounded history) and `SnapshotCollector` (a run's snapshots)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from moe_tui.telemetry.data import GpuSample, TelemetrySnapshot
from moe_tui.telemetry.nvml import NvmlSampler

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
