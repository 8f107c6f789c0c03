"""Run-to-run variance like hardware's, as one multiplicative factor on every modelled step time.

Real GPUs do not repeat a benchmark to 0.1%: a server start lands on a slightly different clock,
memory layout and kernel selection (a per-start offset of a percent or two), a long-running start
wanders slowly (temperature, fragmentation), and two runs on the same start still differ a little.
`VarianceModel` draws each of those from one seeded generator:

- start factor: exp(N(0, start_sigma)), drawn once when the server starts and recorded in
  `/server_info` (`sim.perf_factor_start`);
- drift: an Ornstein-Uhlenbeck walk of the log factor in modelled minutes since ready
  (`drift_sigma` percent per sqrt(minute), pulled back with time constant `drift_tau_min`), plus
  the optional deterministic linear drift of `--sim-drift-pct-per-min` (in wall minutes);
- run jitter: exp(N(0, run_jitter)), drawn again whenever a new "run" begins (the engine found
  work after an idle gap, or the prefix cache was flushed: what a benchmark does between runs);
- step noise: the old per-step gaussian (`--sim-noise-pct`), independent per step.

Pure: time comes in as arguments, randomness from the seeded generator.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class VarianceSettings:
    """Standard deviations in percent; drift in percent per sqrt(modelled minute)."""

    start_sigma_pct: float = 1.5
    drift_sigma_pct: float = 0.3
    drift_tau_min: float = 10.0
    run_jitter_pct: float = 0.5
    step_noise_pct: float = 0.0
    drift_pct_per_min: float = 0.0  # deterministic, signed (tests and faults)


class VarianceModel:
    """The performance factor in force (step time is multiplied by it; > 1 is slower)."""

    FLOOR = 0.2  # a factor never makes a step 5x faster, whatever the draws

    def __init__(self, settings: VarianceSettings, seed: int) -> None:
        self.settings = settings
        self.rng = random.Random(seed)
        self.start_factor = math.exp(self.rng.gauss(0.0, settings.start_sigma_pct / 100.0))
        self.drift_log = 0.0
        self.run_factor = 1.0
        self.runs = 0
        self._drift_at_min = 0.0

    def new_run(self) -> float:
        """Draw the jitter of a run that begins now; returns the new run factor."""
        self.runs += 1
        self.run_factor = math.exp(self.rng.gauss(0.0, self.settings.run_jitter_pct / 100.0))
        return self.run_factor

    def advance(self, minutes_since_ready: float) -> None:
        """Move the drift walk to `minutes_since_ready` (modelled minutes; monotone calls)."""
        dt = minutes_since_ready - self._drift_at_min
        if dt <= 0:
            return
        self._drift_at_min = minutes_since_ready
        s = self.settings
        if s.drift_sigma_pct <= 0:
            return
        # Exact OU transition: mean decays by exp(-dt/tau), variance tops up to the stationary one.
        decay = math.exp(-dt / s.drift_tau_min) if s.drift_tau_min > 0 else 1.0
        sigma = s.drift_sigma_pct / 100.0
        var = (sigma ** 2) * (s.drift_tau_min / 2.0) * (1 - decay ** 2) if s.drift_tau_min > 0 else sigma ** 2 * dt
        self.drift_log = self.drift_log * decay + math.sqrt(var) * self.rng.gauss(0.0, 1.0)

    def slow_factor(self, minutes_since_ready: float, wall_minutes: float | None = None) -> float:
        """Start x drift x run factor (no step noise): the server's current 'speed'. The random
        walk runs in modelled minutes, the linear drift in wall minutes (as its flag always did)."""
        self.advance(minutes_since_ready)
        wall = minutes_since_ready if wall_minutes is None else wall_minutes
        linear = 1.0 + self.settings.drift_pct_per_min / 100.0 * wall
        return max(self.FLOOR, self.start_factor * math.exp(self.drift_log) * self.run_factor * linear)

    def step_factor(self, minutes_since_ready: float, wall_minutes: float | None = None) -> float:
        """The factor for one step: the slow factor times independent per-step noise."""
        factor = self.slow_factor(minutes_since_ready, wall_minutes)
        if self.settings.step_noise_pct:
            factor *= max(self.FLOOR, 1.0 + self.rng.gauss(0.0, self.settings.step_noise_pct / 100.0))
        return factor

    def describe(self) -> dict[str, float | int]:
        return {"perf_factor_start": round(self.start_factor, 6),
                "perf_factor_drift": round(math.exp(self.drift_log), 6),
                "perf_factor_run": round(self.run_factor, 6), "runs_seen": self.runs}
