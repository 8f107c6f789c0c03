"""Provenance of one run: everything needed to say afterwards how a number was measured.

`build_provenance` gathers, as one JSON-safe dict stored with the run (`runs.provenance_json`):
spec and fingerprint, the profile snapshot and the server's resolved args (`/server_info`), the
resolved MoE backend and whether it matched the profile, the SGLang version (or the emulator's),
GPU names, driver and CUDA versions, clocks and throttle summary from telemetry, host name,
moe-tui version, the benchmark client used (moe-tui's own or sglang.bench_serving, with versions),
Python version, start/end times, and `simulated` (true for the emulator, whose numbers must never
pass for a GPU's). The controller builds it at run start (so an interrupted run still says what
it was) and completes it at the end with times and telemetry.

`run_flags` turns a benchmark outcome, a telemetry summary and the server's own load counts into
the run's flags (`RUN_FLAGS`), each of which a reader must see before trusting the number. A run
is clean only if nothing else touched it: someone else's requests on the server (`foreign_load`),
a frozen server (`server_stall`: one long freeze or many short ones adding up), throttling and
foreign GPU processes (telemetry) each flag it.

Pure functions over plain data, apart from reading the host name and interpreter version.
"""

from __future__ import annotations

import platform
import socket
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from moe_tui import judgement as J
from moe_tui.disturbance import load_flags
from moe_tui.records import FreeForm, GpuFactsJson, HostFactsJson, ProvenanceJson, QueueFactsJson, SimClockJson, WarmupPassJson
from moe_tui.spec import BenchmarkSpec

# Flags a run can carry, in words: the one list lives in moe_tui.judgement (this name is kept for
# callers that imported it from here).
RUN_FLAGS = J.FLAG_WORDS


def moe_tui_version() -> str:
    try:
        from moe_tui import __version__

        return str(__version__)
    except Exception:  # a broken install must not lose the run
        return "unknown"


def host_facts() -> HostFactsJson:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "moe_tui_version": moe_tui_version(),
    }


def client_facts(spec: Mapping[str, Any], bench_client: Mapping[str, Any] | None = None) -> FreeForm:
    """Which client measured: moe-tui's own loader (with its version) or sglang.bench_serving. Free-form:
    the client's self-description (`bench_client`: its name, version and limits) with name and version set."""
    name = spec.get("client", "moe-tui")
    facts = dict(bench_client or {})
    facts.setdefault("name", name)
    if not facts.get("version"):
        facts["version"] = spec.get("client_version") or (moe_tui_version() if name == "moe-tui" else "unknown")
    return facts


def telemetry_facts(telemetry: Mapping[str, Any] | None) -> GpuFactsJson:
    """GPU names, driver, CUDA, clocks and throttle summary from `telemetry.summarize_run`'s dict."""
    if not telemetry:
        return {"available": False, "reason": "no telemetry recorded"}
    gpus = telemetry.get("gpus") or {}
    overall = telemetry.get("overall") or {}
    return {
        "available": bool(telemetry.get("available")),
        "reason": telemetry.get("reason"),
        "driver_version": telemetry.get("driver_version"),
        "cuda_driver_version": telemetry.get("cuda_driver_version"),
        "gpu_names": {idx: g.get("name") for idx, g in gpus.items()},
        "gpu_uuids": {idx: g.get("uuid") for idx, g in gpus.items()},
        "sm_clock_min_mhz": overall.get("sm_clock_min_mhz"),
        "sm_clock_max_seen_mhz": overall.get("sm_clock_max_seen_mhz"),
        "sm_clock_drop_pct": overall.get("sm_clock_drop_pct"),
        "clock_events_seen": overall.get("clock_events_seen") or [],
        "suspect_clock_events": overall.get("suspect_clock_events") or [],
        "foreign_processes": telemetry.get("foreign_processes"),
        "gpus_lost": overall.get("gpus_lost") or [],
        # the emulator's simulated GPUs, not NVML: names and clocks above are modelled
        "simulated": bool(telemetry.get("simulated")),
    }


def build_provenance(
    *,
    spec: BenchmarkSpec,
    profile: Mapping[str, Any],
    server: Mapping[str, Any] | None,
    queue_item: QueueFactsJson | None = None,
    bench_client: Mapping[str, Any] | None = None,
    warmup: WarmupPassJson | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
    telemetry: Mapping[str, Any] | None = None,
    sim_clock: SimClockJson | None = None,
) -> ProvenanceJson:
    """The whole provenance dict. `server` is `ManagedServer.describe()`
    plus `server_info` (the resolved args); `profile` is `ServerProfile.snapshot()`; `sim_clock`
    (an emulator's run on a per-cell clock, `moe_tui.run.sim_clock`) the run's time scale beside
    the launch's: a property of the run, never of the launch settings."""
    server = dict(server or {})
    server_info = server.get("server_info") or {}
    engine = profile.get("engine", "sglang")
    simulated = J.is_simulated(profile=profile, server_info=server_info)
    spec_dict = spec.canonical_dict()
    provenance: ProvenanceJson = {
        "provenance_schema": 1,
        "simulated": simulated,
        "spec": spec_dict,
        "fingerprint": spec.fingerprint,
        "spec_summary": spec.describe(),
        "profile": dict(profile),
        "server": {
            "start_id": server.get("start_id"),
            "pid": server.get("pid"),
            "base_url": server.get("base_url"),
            "log_path": server.get("log_path"),
            "requested_backend": profile.get("moe_runner_backend"),
            "resolved_backend": server.get("resolved_backend"),
            "backend_mismatch": bool(server.get("backend_mismatch")),
            "server_info_error": server.get("server_info_error"),
            "resolved_args": server_info,
            "sglang_version": server.get("sglang_version") or server_info.get("version"),
            "engine": engine,
        },
        "client": client_facts(spec_dict, bench_client),
        "host": host_facts(),
        "gpu": telemetry_facts(telemetry),
        "queue_item": queue_item,
        "warmup_pass": warmup or None,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    if sim_clock:
        provenance["sim_clock"] = sim_clock
    return provenance


def run_flags(
    *,
    backend_mismatch: bool = False,
    backend_unverified: bool = False,
    simulated: bool = False,
    bench_flags: Iterable[str] = (),
    completed: int | None = None,
    expected: int | None = None,
    errors: int | None = None,
    status: str = "complete",
    telemetry: Mapping[str, Any] | None = None,
    warmup_pass: bool = True,
    server_load: Mapping[str, Any] | None = None,
) -> list[str]:
    """Every flag the run earns, sorted. `bench_flags` are the benchmark's own (client_bound,
    request_errors, incomplete, ...); the rest are derived here so no source is forgotten."""
    flags = {J.normalise_flag(f) for f in bench_flags if f}
    if backend_mismatch:
        flags.add(J.FLAG_BACKEND_MISMATCH)
    if backend_unverified:
        flags.add(J.FLAG_BACKEND_UNVERIFIED)
    if simulated:
        flags.add(J.FLAG_SIMULATED)
    if errors:
        flags.add(J.FLAG_REQUEST_ERRORS)
    if status != "complete" or (expected is not None and completed is not None and completed < expected):
        flags.add(J.FLAG_INCOMPLETE)
    if not warmup_pass:
        flags.add(J.FLAG_NO_WARMUP_PASS)
    if telemetry:
        flags |= _telemetry_flags(telemetry)
    flags |= load_flags(server_load)  # someone else's requests on the server (moe_tui.disturbance)
    return sorted(flags)


def _telemetry_flags(telemetry: Mapping[str, Any]) -> set[str]:
    """Flags from `telemetry.summarize_run`'s dict: throttling, clock drop, foreign processes, lost GPUs."""
    flags: set[str] = set()
    overall = telemetry.get("overall") or {}
    if overall.get("suspect_clock_events"):
        flags.add(J.FLAG_THROTTLED)
    drop = overall.get("sm_clock_drop_pct")
    if drop is not None and drop >= J.CLOCK_DROP_SUSPECT_PCT:
        flags.add(J.FLAG_CLOCK_DROP)
    if telemetry.get("foreign_processes"):
        flags.add(J.FLAG_FOREIGN_GPU_PROCESS)
    if overall.get("gpus_lost"):
        flags.add(J.FLAG_GPU_LOST)
    return flags
