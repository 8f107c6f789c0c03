"""Judgement: the one home of every rule that decides whether a run or a grid cell can be trusted.

What lives here (pure data and pure functions; imports nothing from moe-tui but the standard
library, so every layer may import it):
- run flag codes and their words (`FLAG_WORDS`), and which flags make a run suspect;
- thresholds: clock drop, client lag, server stall;
- "is this simulated?" (`is_simulated`), decided once;
- server lifecycle states and which of them are live;
- the cell verdict vocabulary and control-check states shared by the JSON grid, the text grid,
  the TUI and the exports;
- what a comparison varies and what confounds it (`moe_tui.confounding`, re-exported here);
- who owns a GPU process: a server is its leader process and every descendant of it
  (`server_family`, `owner_of`), so SGLang's TP scheduler children are never "foreign".

Rules are written once here; other modules import them and never re-spell them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# What a comparison varies and what confounds it (its own module; re-exported: callers import them here).
from moe_tui.confounding import DEFAULT_VARY as DEFAULT_VARY
from moe_tui.confounding import DERIVED as DERIVED
from moe_tui.confounding import DERIVED_SERVER_ARGS as DERIVED_SERVER_ARGS
from moe_tui.confounding import ENVIRONMENT_BALANCED_OK as ENVIRONMENT_BALANCED_OK
from moe_tui.confounding import ENVIRONMENT_CONFOUNDERS as ENVIRONMENT_CONFOUNDERS
from moe_tui.confounding import ENVIRONMENT_LISTED as ENVIRONMENT_LISTED
from moe_tui.confounding import KV_POOL_KEY as KV_POOL_KEY
from moe_tui.confounding import PER_START as PER_START
from moe_tui.confounding import PROFILE_IDENTITY_KEYS as PROFILE_IDENTITY_KEYS
from moe_tui.confounding import SERVER_ARG_KINDS as SERVER_ARG_KINDS
from moe_tui.confounding import SERVER_ARGS_DERIVED as SERVER_ARGS_DERIVED
from moe_tui.confounding import SERVER_ARGS_IGNORED as SERVER_ARGS_IGNORED
from moe_tui.confounding import SERVER_ARGS_IGNORED_PREFIXES as SERVER_ARGS_IGNORED_PREFIXES
from moe_tui.confounding import SERVER_ARGS_IGNORED_SUFFIXES as SERVER_ARGS_IGNORED_SUFFIXES
from moe_tui.confounding import SERVER_ARGS_PER_START as SERVER_ARGS_PER_START
from moe_tui.confounding import SERVER_ARGS_PER_START_PREFIXES as SERVER_ARGS_PER_START_PREFIXES
from moe_tui.confounding import SERVER_ARGS_PER_START_SUFFIXES as SERVER_ARGS_PER_START_SUFFIXES
from moe_tui.confounding import SERVER_ARGS_SHOWN as SERVER_ARGS_SHOWN
from moe_tui.confounding import SETTING as SETTING
from moe_tui.confounding import VARY_ALIASES as VARY_ALIASES
from moe_tui.confounding import derived_from_varied as derived_from_varied
from moe_tui.confounding import field_name as field_name
from moe_tui.confounding import server_arg_ignored as server_arg_ignored
from moe_tui.confounding import server_arg_kind as server_arg_kind
from moe_tui.confounding import varied as varied

# -- run flags ------------------------------------------------------------------------------------
FLAG_BACKEND_MISMATCH = "backend_mismatch"
FLAG_BACKEND_UNVERIFIED = "backend_unverified"
FLAG_CLIENT_BOUND = "client_bound"
FLAG_REQUEST_ERRORS = "request_errors"
FLAG_INCOMPLETE = "incomplete"
FLAG_THROTTLED = "throttled"
FLAG_CLOCK_DROP = "clock_drop"
FLAG_FOREIGN_GPU_PROCESS = "foreign_gpu_process"
FLAG_SERVER_STALL = "server_stall"
FLAG_OUTPUT_DIFFERS = "output_differs"
FLAG_SIMULATED = "simulated"
FLAG_NO_WARMUP_PASS = "no_warmup_pass"
FLAG_OUTPUT_TOKENS_MISMATCH = "output_tokens_mismatch"
FLAG_GPU_LOST = "gpu_lost"
FLAG_FOREIGN_LOAD = "foreign_load"
FLAG_CLIENT_LAG_ONCE = "client_lag_once"
# Grid-level flags (about a side or the whole comparison, not one run).
FLAG_PROFILE_CHANGED = "profile_changed"
FLAG_ENVIRONMENT_DIFFERS = "environment_differs"

FLAG_WORDS: Mapping[str, str] = {
    FLAG_BACKEND_MISMATCH: "the server resolved another MoE backend than the profile asked for",
    FLAG_BACKEND_UNVERIFIED: "the resolved MoE backend could not be read from /server_info",
    FLAG_CLIENT_BOUND: "the benchmark client could not keep up; the number measures the client",
    FLAG_REQUEST_ERRORS: "some requests failed",
    FLAG_INCOMPLETE: "the run did not finish every request (aborted, timed out or cut short)",
    FLAG_THROTTLED: "a GPU reported a throttling clock event during the run",
    FLAG_CLOCK_DROP: "a GPU's SM clock dropped under load during the run",
    FLAG_FOREIGN_GPU_PROCESS: "a process other than the server used the GPUs during the run",
    FLAG_SERVER_STALL: "the server made no token progress for a stretch of the run",
    FLAG_OUTPUT_DIFFERS: "the backend's greedy outputs differ from the baseline's beyond tolerance",
    FLAG_SIMULATED: "measured against the SGLang emulator, not a GPU",
    FLAG_NO_WARMUP_PASS: "no warmup pass at this concurrency before the timed run",
    FLAG_OUTPUT_TOKENS_MISMATCH: "output tokens differ from completed requests x output_len (the spec was not followed)",
    FLAG_GPU_LOST: "a GPU fell off the bus during the run (NVML: GPU is lost)",
    FLAG_FOREIGN_LOAD: "the server held more requests than this run sent: someone else was using it",
    FLAG_CLIENT_LAG_ONCE: "one wake-up of the client was late in a run too short for a p99: the run counts; re-measure it",
    FLAG_PROFILE_CHANGED: "the averaged runs used different profile snapshots",
    FLAG_ENVIRONMENT_DIFFERS: "the control check found the environments differ",
}

# Flags that make a run's number untrustworthy: such a run is left out of a cell's mean by default
# and a cell resting on it carries no verdict. "simulated" is a banner, not a suspicion (every
# emulator run carries it alike); "no_warmup_pass" and "backend_unverified" are shown, not excluding.
SUSPECT_FLAGS: frozenset[str] = frozenset({
    FLAG_BACKEND_MISMATCH, FLAG_CLIENT_BOUND, FLAG_REQUEST_ERRORS, FLAG_INCOMPLETE,
    FLAG_THROTTLED, FLAG_CLOCK_DROP, FLAG_FOREIGN_GPU_PROCESS, FLAG_SERVER_STALL, FLAG_GPU_LOST,
    FLAG_OUTPUT_DIFFERS, FLAG_OUTPUT_TOKENS_MISMATCH, FLAG_FOREIGN_LOAD,
})
# "client_lag_once" is a reason to re-measure, not to leave the run out: one late wake-up is one
# event (moe_tui.bench.live.remeasure_reasons), and dropping such runs cost 17 of 28 runs on a
# quiet H200 host (issue #31).
INFORMATIONAL_FLAGS: frozenset[str] = frozenset({FLAG_SIMULATED, FLAG_NO_WARMUP_PASS, FLAG_BACKEND_UNVERIFIED,
                                                 FLAG_CLIENT_LAG_ONCE})


def normalise_flag(raw: str) -> str:
    """One spelling per flag: the bench engine once wrote "client-bound", the store "client_bound"."""
    return str(raw).strip().replace("-", "_")


def flag_words(code: str) -> str:
    return FLAG_WORDS.get(normalise_flag(code), normalise_flag(code).replace("_", " "))


def suspect(flags: Iterable[str]) -> tuple[str, ...]:
    """The suspect flags among `flags`, normalised and sorted."""
    return tuple(sorted({normalise_flag(f) for f in flags} & SUSPECT_FLAGS))


# -- thresholds -----------------------------------------------------------------------------------
# An SM clock this far below the run's own peak under load makes the run suspect (a real H200
# under a power cap dropped 1980 -> 1410-1530 MHz, 23-29%; boost jitter stays under a few %).
CLOCK_DROP_SUSPECT_PCT = 10.0
# Event-loop lag of the load generator beyond this means the client, not the server, set the pace.
CLIENT_LAG_SUSPECT_MS = 10.0
# A server stall: no token arrived on any stream for max(STALL_MIN_S, STALL_ITL_MULTIPLE x median ITL)
# while requests were in flight.
STALL_MIN_S = 5.0
STALL_ITL_MULTIPLE = 10.0


def stall_threshold_s(median_itl_ms: float | None) -> float:
    """Seconds without token progress that count as a server stall for a run with this median ITL."""
    itl_s = (median_itl_ms or 0.0) / 1000.0
    return max(STALL_MIN_S, STALL_ITL_MULTIPLE * itl_s)


# -- simulated ------------------------------------------------------------------------------------
SIM_ENGINE = "sim"


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def sim_time_scale(profile: Mapping[str, Any]) -> float:
    """How many times faster than real time a profile's server runs its clock: the emulator's
    `[sim] time_scale` (a profile as stored, or ServerProfile.to_dict()); 1 for a real server and for
    a value that is not a positive finite number (the emulator refuses those at launch)."""
    if profile.get("engine") != SIM_ENGINE:
        return 1.0
    value = (profile.get("sim") or {}).get("time_scale", 1.0)
    try:
        scale = float(value)
    except (TypeError, ValueError):
        return 1.0
    return scale if 0 < scale < float("inf") else 1.0


def run_time_scale(profile: Mapping[str, Any], provenance: Mapping[str, Any] | None = None) -> float:
    """The time scale a run's server clock ran at: its provenance's `sim_clock` (a cell the runner
    slowed, `moe_tui.run.sim_clock`), else its profile's (`sim_time_scale`)."""
    clock = (provenance or {}).get("sim_clock")
    value = clock.get("time_scale") if isinstance(clock, Mapping) else None
    try:
        scale = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return sim_time_scale(profile)
    return scale if 0 < scale < float("inf") else sim_time_scale(profile)


def sim_time_scale_of_server(server_info: Mapping[str, Any]) -> float | None:
    """The time scale an emulator says it runs at now (`/server_info`'s `sim.sim_time_scale`); None
    for a real server or a value that is not a positive finite number."""
    value = _dig(server_info, "sim", "sim_time_scale") if server_info.get("simulated") else None
    try:
        scale = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return scale if 0 < scale < float("inf") else None


# The emulator's clock for one cell. Every decode step sends one chunk per running request, all at
# once, and one client thread parses that burst in about concurrency x 50-100 us (10-14 ms at 256
# streams, 17-28 ms at 1024, on the 2-core box). Up to CELL_CLOCK_FREE_STREAMS streams the burst
# stays under the client's 10 ms lag floor at any clock; above, the step (the ITL) must be ten
# times the burst (`bench.live.LAG_ITL_FRACTION`). The burst grows with the concurrency and the
# emulator's step only as about its 0.4th power (backends.toml: 356 -> 640 ms from 256 to 1024
# streams), so the clock may run at most CELL_CLOCK_BUDGET / sqrt(concurrency) times faster than
# real time: 256 streams at 1.2, 1024 at 0.62 (at time scale 10 every demo run at 256 and 1024 was
# client-bound: loop lag p99 97-108 ms). Never faster than the profile asks; rounded down to two
# significant figures; a function of the concurrency and the profile's scale only, never of the
# backend, so both sides of a cell run at the same clock.
CELL_CLOCK_FREE_STREAMS = 64
CELL_CLOCK_BUDGET = 20.0


def sim_cell_time_scale(launch_scale: float, concurrency: int, stream_interval: int = 1) -> float:
    """The time scale an emulator runs a cell at: the profile's, or slower where the concurrency's
    bursts of chunks would out-run the client (see CELL_CLOCK_BUDGET). With `--stream-interval k`
    a burst comes every k steps (one chunk of k tokens per request): k times the room."""
    import math

    if not (0 < launch_scale < float("inf")) or concurrency <= CELL_CLOCK_FREE_STREAMS:
        return launch_scale
    cap = max(1, stream_interval) * CELL_CLOCK_BUDGET / math.sqrt(concurrency)
    if cap >= launch_scale:
        return launch_scale
    digits = 1 - math.floor(math.log10(cap))
    return float(math.floor(cap * 10 ** digits) / 10 ** digits)


def is_simulated(*, profile: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None,
                 flags: Iterable[str] = (), server_info: Mapping[str, Any] | None = None) -> bool:
    """True when a number came from the emulator: its profile's engine is "sim", its server said
    so in /server_info, its provenance says so, or it carries the "simulated" flag."""
    prov = provenance or {}
    return bool(
        (profile or {}).get("engine") == SIM_ENGINE
        or prov.get("engine") == SIM_ENGINE
        or _dig(prov, "server", "engine") == SIM_ENGINE
        or prov.get("simulated")
        or _dig(prov, "server_info", "simulated")
        or _dig(prov, "server", "resolved_args", "simulated")
        or (server_info or {}).get("simulated")
        or FLAG_SIMULATED in {normalise_flag(f) for f in flags}
    )


# -- server states --------------------------------------------------------------------------------
STOPPED, STARTING, READY, FAILED, STOPPING = "stopped", "starting", "ready", "failed", "stopping"
SERVER_STATES = (STOPPED, STARTING, READY, FAILED, STOPPING)
LIVE_STATES = frozenset({STARTING, READY, STOPPING})


def is_live(state: str | None) -> bool:
    """A server in this state holds (or may hold) processes and GPUs."""
    return state in LIVE_STATES


def can_start(state: str | None) -> bool:
    return not is_live(state)


def can_stop(state: str | None) -> bool:
    return state in (STARTING, READY)


# -- cell verdicts and control states (one vocabulary for JSON, text, TUI and exports) ------------
BETTER = "better"
WORSE = "worse"
WITHIN_NOISE = "within_noise"
NOISE_UNKNOWN = "noise_unknown"
INTERIM = "interim"
REFUSED = "refused"
CONFOUNDED = "confounded"
UNRELIABLE = "unreliable"
UNVERIFIED = "unverified"
NO_DATA = "no_data"
# A tested cell whose control did not say "agrees" (absent, inconclusive or differs): no verdict
# unless the user accepts uncontrolled verdicts, and then labelled so everywhere.
UNCONTROLLED = "uncontrolled"
# The cell's plan was cut short (queue clear, cancel, skip): planned vs done, no verdict until re-planned.
CUT_SHORT = "cut_short"
# The two sides generated different numbers of output tokens per request (beyond 1%): not one workload.
OUTPUT_DIFFERS = "output_differs"
VERDICTS = (BETTER, WORSE, WITHIN_NOISE, NOISE_UNKNOWN, INTERIM, REFUSED, CONFOUNDED, UNRELIABLE,
            UNVERIFIED, NO_DATA, UNCONTROLLED, CUT_SHORT, OUTPUT_DIFFERS)
VERDICT_WORDS: Mapping[str, str] = {
    BETTER: "better",
    WORSE: "worse",
    WITHIN_NOISE: "within noise",
    NOISE_UNKNOWN: "noise unknown",
    INTERIM: "interim",
    REFUSED: "refused: different spec",
    CONFOUNDED: "confounded",
    UNRELIABLE: "unreliable",
    UNVERIFIED: "spec unverified",
    NO_DATA: "no data",
    UNCONTROLLED: "uncontrolled",
    CUT_SHORT: "cut short",
    OUTPUT_DIFFERS: "output differs",
}

CONTROL_AGREES = "agrees"
CONTROL_DIFFERS = "differs"
CONTROL_INCONCLUSIVE = "inconclusive"
CONTROL_ABSENT = "absent"
CONTROL_STATES = (CONTROL_AGREES, CONTROL_DIFFERS, CONTROL_INCONCLUSIVE, CONTROL_ABSENT)
CONTROL_WORDS: Mapping[str, str] = {
    CONTROL_AGREES: "agrees",
    CONTROL_DIFFERS: "ENVIRONMENT DIFFERS",
    CONTROL_INCONCLUSIVE: "inconclusive",
    CONTROL_ABSENT: "absent",
}


# -- what a verdict must clear (the README's "How a verdict is decided" states these) ------------
# A better/worse verdict needs the family-corrected interval of the effect beyond this (not just the
# point estimate).
MIN_EFFECT_PCT = 2.0
# A within-noise cell whose interval reaches both halving and doubling (this ratio either way) says
# nothing about the difference (two starts a side at c=1 gave [-99.7%, +107157.6%]): its numbers are
# not shown as a delta; the cell says it is too wide to bound and how many repeats would settle it.
INTERVAL_TOO_WIDE_RATIO = 2.0
# False-verdict rate controlled per family (Holm): the primary family is output throughput across
# concurrencies; every other metric's cells form one secondary family.
FAMILY_ALPHA = 0.05
# A side needs this many clean (unflagged, complete) runs for a verdict once flagged runs are left out.
MIN_CLEAN_RUNS = 2
# The control check: equivalence margin, runs per side below which it is inconclusive, and the two
# bars: agreement is claimed at 5% (TOST, a 90% interval inside the margin); a difference at 1%
# (a 99% interval excluding zero and a point estimate beyond the margin), because "differs" withdraws
# every verdict of the grid and an honest environment must trip it at most 1 time in 100.
# The control no longer gates the grid from beside it: every cell is judged against the control measured
# on its own server starts (compare.grid), so an environment shift of any size cancels there. The
# equivalence check that remains is reported beside the grid, its margin below the minimum effect.
CONTROL_MARGIN_PCT = 1.5
CONTROL_MIN_RUNS = 3
CONTROL_AGREE_CONFIDENCE = 0.90
CONTROL_DIFFER_CONFIDENCE = 0.99
# Always 2, never "the lowest of the sweep": in the seed the backends truly differed by 2.8% at 1.
CONTROL_CONCURRENCY = 2
CONTROL_CONCURRENCIES = (CONTROL_CONCURRENCY,)
# Output tokens per request may differ between the sides by at most this (relative) before the cell
# says "output differs": a backend that stops early does less work, not the same work faster.
OUTPUT_TOKENS_TOLERANCE_PCT = 1.0
# A percentile needs enough requests behind it in every run: p99 from fewer than 100 requests is the
# largest one or two (order statistics), so P99 cells need at least this many completed requests a run.
PERCENTILE_MIN_REQUESTS = {"p99": 100, "p95": 20, "p90": 10}

# -- who owns a GPU process -----------------------------------------------------------------------
# The environment marker moe-tui puts on every server it launches (one value per start); children
# inherit it, so it still names a scheduler that was reparented away from its dead leader.
SERVER_ID_ENV = "MOE_TUI_SERVER_ID"


def server_family(leader_pid: int | None, parent_of: Mapping[int, int],
                  marked: Iterable[int] = ()) -> frozenset[int]:
    """The leader and every descendant of it, from a pid -> parent pid map of the process table,
    plus every process carrying this start's `SERVER_ID_ENV` marker (`marked`) and their
    descendants (a reparented scheduler is still the server's).

    SGLang's launch_server is a parent plus one scheduler per TP rank and a detokenizer; the
    schedulers hold the GPUs, so ownership must follow the tree, not the leader pid alone."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    roots = ([leader_pid] if leader_pid is not None else []) + [int(p) for p in marked]
    family = set(roots)
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in family:
                family.add(child)
                stack.append(child)
    return frozenset(family)


def owner_of(pid: int, families: Mapping[str, Iterable[int]]) -> str | None:
    """The server name whose family holds `pid`, or None when the process is foreign."""
    for name, pids in families.items():
        if pid in set(pids):
            return name
    return None


# -- investigations (what a follow-up of a surprising cell may suspect) --------------------------
# MoE runner backends that compile kernels at run time for each new batch shape: a run that meets a
# shape first can pay compilation inside its timed window (the seed's CuTe-DSL JIT hypothesis).
JIT_BACKENDS: frozenset[str] = frozenset({"flashinfer_cutedsl", "triton", "triton_kernel", "deep_gemm"})
# A cold/warm (or cache-empty/cache-hot) pair differing by more than this, or by more than three
# standard deviations of a difference of two single runs at the grid's spread, shows an effect.
PAIR_EFFECT_MIN_PCT = 5.0


def compiles_per_shape(backend: str | None) -> bool:
    return (backend or "") in JIT_BACKENDS


def pair_effect_threshold_pct(spread_pct: float | None) -> float:
    """How far apart (in % of the warm run) two single runs must be to call it an effect."""
    return max(PAIR_EFFECT_MIN_PCT, 3.0 * 2 ** 0.5 * (spread_pct or 0.0))
