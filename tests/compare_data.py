"""Plain-data runs for the comparison and export tests (no store, no processes).

`make_run` builds a `store.RunRecord` the way the controller would store it: the spec's
canonical dict and fingerprint, a summary with sglang bench_serving's field names, a profile
snapshot, provenance in `moe_tui.provenance.build_provenance`'s layout. `golden_runs` is the fixed
scenario behind the golden files in tests/golden/.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import RunRecord

METRIC_KEYS = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
               "mean_e2e_latency_ms")


def snapshot(name: str, backend: str, *, engine: str = "sglang", port: int = 30000,
             extra_args: tuple[str, ...] = ("--enable-metrics",), **changes: Any) -> dict[str, Any]:
    snap = {
        "name": name, "engine": engine, "model_path": "GLM-5-NVFP4", "moe_runner_backend": backend,
        "served_model_name": "", "tp_size": 8, "ep_size": 8, "quantization": "modelopt_fp4",
        "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "host": "127.0.0.1", "port": port, "startup_timeout_s": 1800.0,
        "extra_args": list(extra_args), "env": {}, "python": "", "description": "", "sim": {},
        "source": f"server_profiles/{name}.toml",
    }
    snap.update(changes)
    return snap


def provenance(*, engine: str = "sglang", sglang_version: str = "0.5.23", driver: str = "580.65.06",
               resolved_backend: str | None = None, backend_mismatch: bool = False) -> dict[str, Any]:
    return {
        "provenance_schema": 1,
        "simulated": engine == "sim",
        "server": {"engine": engine, "sglang_version": sglang_version, "resolved_backend": resolved_backend,
                   "backend_mismatch": backend_mismatch, "pid": 1234, "start_id": 1},
        "host": {"hostname": "gpu-box", "python_version": "3.11.9", "moe_tui_version": "0.1.0"},
        "client": {"name": "moe-tui", "version": "0.1.0"},
        "gpu": {"driver_version": driver, "cuda_driver_version": "13.0",
                "gpu_names": {str(i): "NVIDIA RTX PRO 6000 Blackwell" for i in range(8)}},
        "started_at": 1.0, "finished_at": 2.0,
    }


def summary(output_throughput: float, *, scale: float = 1.0, failed: int = 0, **overrides: float) -> dict[str, Any]:
    """A bench_serving-style summary; latencies derived from throughput so the numbers hang together."""
    s = {
        "output_throughput": output_throughput,
        "mean_ttft_ms": 120.0 * scale, "p99_ttft_ms": 300.0 * scale, "mean_tpot_ms": 95.0 * scale,
        "mean_itl_ms": 94.0 * scale, "mean_e2e_latency_ms": 97000.0 * scale,
        "completed": 100 - failed, "failed": failed,
    }
    s.update(overrides)
    return s


def make_run(run_id: int, profile_name: str, *, concurrency: int, summary: Mapping[str, Any] | None = None,
             status: str = "complete", flags: tuple[str, ...] = (), spec_changes: Mapping[str, Any] | None = None,
             profile: Mapping[str, Any] | None = None, prov: Mapping[str, Any] | None = None,
             telemetry: Mapping[str, Any] | None = None, selfcheck: Mapping[str, Any] | None = None,
             when: float | None = None, error: str = "", start: int | None = None) -> RunRecord:
    spec = BenchmarkSpec(max_concurrency=concurrency, num_prompts=max(10, concurrency * 4)).replace(**(spec_changes or {}))
    t = float(run_id) if when is None else when
    return RunRecord(
        id=run_id, created_at=t, started_at=t, finished_at=t + 0.5, status=status, profile_name=profile_name,
        spec=spec.canonical_dict(), fingerprint=spec.fingerprint, client=spec.client,
        profile=dict(profile or {}), provenance=dict(prov or {}), summary=dict(summary or {}),
        flags=list(flags), telemetry=dict(telemetry or {}), selfcheck=dict(selfcheck or {}),
        queue_item_id=None, server_start_id=start, source="test", error=error,
    )


def golden_runs() -> tuple[list[RunRecord], list[RunRecord]]:
    """The seed's sweep, made to exercise every kind of cell.

    Only the MoE backend differs between the profiles (identity fields aside), so verdicts can stand.
    conc 1: one run each (noise unknown). conc 2: five repeats each, equal (the control check
    agrees). conc 10: three repeats each, a clear win. conc 64: the candidate ran output_len 512
    (refused, fields named); the baseline also has an older spec there. conc 256: the candidate has
    no run. conc 1024: the baseline has two complete runs and one incomplete (not averaged); the
    candidate's two runs are client-bound and a backend fallback: no clean run, unreliable.
    """
    base_snap = snapshot("glm5-cutlass", "flashinfer_cutlass", port=30000)
    cand_snap = snapshot("glm5-cutedsl", "flashinfer_cutedsl", port=30001)
    bp = provenance(resolved_backend="flashinfer_cutlass")
    cp = provenance(resolved_backend="flashinfer_cutedsl")
    rid = iter(range(1, 1000))
    a: list[RunRecord] = []
    b: list[RunRecord] = []

    def add(side: list[RunRecord], name: str, snap: dict, pv: dict, conc: int, values: list[float], **kw: Any) -> None:
        # Interleaved in time, as a campaign runs them: the k-th baseline run, then the k-th candidate run;
        # the k-th run of every concurrency on a side shares that side's k-th server start (one sweep a start,
        # concurrency 2 inside), so each cell is judged against the control on its own starts.
        for k, v in enumerate(values):
            when = 1000.0 * conc + 2 * k + (side is b)
            side.append(make_run(next(rid), name, concurrency=conc, summary=summary(v, scale=10.36 / v * conc),
                                 profile=snap, prov=pv, when=when, start=100 * (side is b) + k + 1, **kw))

    add(a, "glm5-cutlass", base_snap, bp, 1, [10.36])
    add(b, "glm5-cutedsl", cand_snap, cp, 1, [10.07])
    add(a, "glm5-cutlass", base_snap, bp, 2, [19.29, 19.31, 19.22, 19.35, 19.27])
    add(b, "glm5-cutedsl", cand_snap, cp, 2, [19.24, 19.30, 19.26, 19.33, 19.21])
    add(a, "glm5-cutlass", base_snap, bp, 10, [38.46, 38.90, 38.12])
    add(b, "glm5-cutedsl", cand_snap, cp, 10, [64.29, 64.64, 63.90])
    add(a, "glm5-cutlass", base_snap, bp, 64, [200.10], spec_changes={"seed": 7})
    add(a, "glm5-cutlass", base_snap, bp, 64, [218.74, 221.02])
    add(b, "glm5-cutedsl", cand_snap, cp, 64, [249.23, 251.50], spec_changes={"output_len": 512})
    add(a, "glm5-cutlass", base_snap, bp, 256, [718.83, 722.10])
    add(a, "glm5-cutlass", base_snap, bp, 1024, [1603.04, 1598.40])
    a.append(make_run(next(rid), "glm5-cutlass", concurrency=1024, summary=summary(400.0, failed=60),
                      status="incomplete", profile=base_snap, prov=bp, error="60 of 100 requests failed"))
    add(b, "glm5-cutedsl", cand_snap, cp, 1024, [796.93], flags=("client-bound",),
        selfcheck={"client_bound": True, "client_bound_reasons": ["event loop lag p99 80 ms"]})
    b.append(make_run(next(rid), "glm5-cutedsl", concurrency=1024, summary=summary(801.20, scale=10.36 / 801.20 * 1024),
                      profile=cand_snap, flags=("backend_mismatch",),
                      prov=provenance(resolved_backend="triton", backend_mismatch=True)))
    return a, b


def control_fail_runs() -> tuple[list[RunRecord], list[RunRecord]]:
    """Simulated runs where the concurrency-2 control point differs by ~8%: environment differs."""
    snap_a = snapshot("sim-cutlass", "flashinfer_cutlass", engine="sim", sim={"time_scale": 10})
    snap_b = snapshot("sim-cutedsl", "flashinfer_cutedsl", engine="sim", sim={"time_scale": 10}, port=30001)
    pa, pb = provenance(engine="sim"), provenance(engine="sim")
    a = [make_run(i, "sim-cutlass", concurrency=2, summary=summary(v), profile=snap_a, prov=pa)
         for i, v in enumerate([19.3, 19.1, 19.4], start=1)]
    b = [make_run(i, "sim-cutedsl", concurrency=2, summary=summary(v), profile=snap_b, prov=pb)
         for i, v in enumerate([20.9, 20.8, 21.0], start=10)]
    a += [make_run(20, "sim-cutlass", concurrency=64, summary=summary(218.7), profile=snap_a, prov=pa)]
    b += [make_run(21, "sim-cutedsl", concurrency=64, summary=summary(249.2), profile=snap_b, prov=pb)]
    return a, b


SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)


SNAP_A = snapshot("a", "flashinfer_cutlass")
SNAP_B = snapshot("b", "flashinfer_cutedsl", port=30001)


def grid_of(a: list[RunRecord], b: list[RunRecord], settings: Any = None, **kw: Any) -> Any:
    """The grid with uncontrolled verdicts accepted (labelled): the tests that use it are about what a
    cell's own evidence says; the control gate is tested on its own (test_compare.py, test_compare_gate.py)."""
    from moe_tui.compare import CompareSettings

    settings = dataclasses.replace(settings or CompareSettings(), accept_uncontrolled=True)
    return build_grid_from_runs(a, b, settings=settings, **kw)


def runs(name: str, conc: int, values: list[float], start: int, snap: Any = None, **kw: Any) -> list[RunRecord]:
    """Runs of `name` at concurrency `conc`, one a value (output throughput), ids from `start`."""
    return [make_run(start + i, name, concurrency=conc, summary=summary(v), profile=snap or SNAP_A, **kw)
            for i, v in enumerate(values)]

