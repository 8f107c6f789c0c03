"""A recording ControlClient for pilot tests: it records every command the UI sends and
serves fixed, deterministic data. Injected only at the adapter boundary; events a controller or
worker would produce are posted to the App as the same messages they would arrive as."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from moe_tui.compare.build import build_grid_from_runs
from moe_tui.control import CampaignRequest, ControlClient, ControlSnapshot, QueueRow, RunView, ServerRow
from moe_tui.events import Event, GpuTelemetry
from moe_tui.telemetry import GpuProcess, GpuSample, TelemetrySnapshot

FP_A = "3fa9c1e2b7d04c5e8a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7"
FP_B = "9b8a7c6d5e4f30211234567890abcdef1234567890abcdef1234567890abcdef"
T0 = 1_700_000_000.0


def demo_servers() -> tuple[ServerRow, ...]:
    return (
        ServerRow("sim-flashinfer-cutlass", "sim", "flashinfer_cutlass", 31000, tuple(range(8)),
                  state="ready", pid=4242, resolved_backend="flashinfer_cutlass", ready_since=T0 - 125),
        ServerRow("sim-flashinfer-cutedsl", "sim", "flashinfer_cutedsl", 31001, tuple(range(8)), state="stopped"),
    )


def demo_queue() -> tuple[QueueRow, ...]:
    rows = []
    n = 1
    for rep in range(2):
        for profile in ("sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"):
            for conc in (1, 2, 10, 64):
                state = "done" if n <= 2 else "running" if n == 3 else "pending"
                rows.append(QueueRow(n, float(n), profile, conc, rep, FP_A, state, attempts=1 if n <= 3 else 0,
                                     run_id=n if n <= 3 else None, campaign="demo"))
                n += 1
    rows[5] = replace(rows[5], state="failed", error="server exited with code 1", attempts=1)
    return tuple(rows)


def gpu_snapshot(t: float = T0, util: float = 63.0) -> TelemetrySnapshot:
    gpus = tuple(
        GpuSample(index=i, t=t, wall=t, name="NVIDIA RTX PRO 6000 Blackwell", util_gpu_pct=util - i * 3,
                  mem_used_bytes=int((60 + i) * 2**30), mem_total_bytes=96 * 2**30, power_w=410.0 - i,
                  power_limit_w=600.0, temperature_c=61.0 + i, sm_clock_mhz=2610 - i * 10,
                  sm_clock_max_mhz=2800, clock_event_bits=0x004 if i == 5 else 0,
                  processes=(GpuProcess(4242, 60 * 2**30, "python"),) if i < 7 else (GpuProcess(999, 2**30, "jupyter"),))
        for i in range(8)
    )
    return TelemetrySnapshot(t=t, wall=t, gpus=gpus, driver_version="580.65", cuda_driver_version="13.0")


def no_driver_snapshot() -> TelemetrySnapshot:
    return TelemetrySnapshot(t=T0, wall=T0, available=False,
                             reason="no NVIDIA driver: NVML Shared Library Not Found")


def _run(run_id: int, profile: str, backend: str, conc: int, tok_s: float, fp_spec: dict[str, Any],
         start: int | None = None) -> dict[str, Any]:
    spec = {"spec_schema": 1, "client": "moe-tui", "client_version": "", "api": "generate", "dataset": "random-ids",
            "input_len": 128, "output_len": 64, "range_ratio": 1.0, "num_prompts": 40, "max_concurrency": conc,
            "request_rate": "inf", "seed": 42, "warmup_requests": 1, "ignore_eos": True, "temperature": 0.0,
            "flush_cache": False}
    spec.update(fp_spec)
    from moe_tui.spec import BenchmarkSpec

    bs = BenchmarkSpec.from_dict(spec)
    return dict(
        id=run_id, created_at=T0 + run_id, started_at=T0 + run_id, finished_at=T0 + run_id + 5, status="complete",
        profile_name=profile, spec=bs.canonical_dict(), fingerprint=bs.fingerprint, client="moe-tui",
        profile={"name": profile, "engine": "sim", "moe_runner_backend": backend, "tp_size": 8, "ep_size": 8,
                 "model_path": "GLM-5-NVFP4", "quantization": "modelopt_fp4", "gpus": list(range(8))},
        # the start also named in the record, so runs stored through the store keep their pairing
        provenance={"engine": "sim", "sglang_version": "0.5.23-sim", "server_start": f"start-{start or run_id}"},
        summary={"output_throughput": tok_s, "mean_ttft_ms": 40.0 + conc, "p99_ttft_ms": 80.0 + conc,
                 "mean_tpot_ms": 9.0, "mean_itl_ms": 9.0, "mean_e2e_latency_ms": 600.0 + conc},
        flags=[], telemetry={}, selfcheck={}, queue_item_id=None, server_start_id=start or run_id, source="moe-tui",
        error="",
    )


def demo_runs(control_starts: int = 3) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    a, b = [], []
    rid = 1
    # One sweep per server start (the grid's unit), concurrency 2 inside each: the k-th run of every
    # concurrency on a side shares that side's k-th start, so each cell is judged against the control on
    # its own starts; a third start measures only the control.
    for conc, ta, tb in ((1, 95.0, 97.0), (2, 180.0, 181.0), (10, 700.0, 1100.0), (64, 2400.0, 1500.0)):
        for rep, jitter in enumerate((-2.0, 2.5) if conc != 2 else (-0.6, 0.5, 0.1)[:control_starts]):
            a.append(_run(rid, "sim-flashinfer-cutlass", "flashinfer_cutlass", conc, ta + jitter, {}, 1000 + rep))
            rid += 1
            extra = {"input_len": 256} if conc == 64 and rep == 1 else {}
            b.append(_run(rid, "sim-flashinfer-cutedsl", "flashinfer_cutedsl", conc, tb + jitter * 1.5,
                          extra if conc != 64 else {"input_len": 256}, 2000 + rep))
            rid += 1
    return a, b


class RecordingAdapter(ControlClient):
    mode = "in-process (test)"
    can_detach = False

    def __init__(self, *, fail: dict[str, Exception] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.callbacks: list[Callable[[Event], None]] = []
        self.servers = demo_servers()
        self.queue = demo_queue()
        self.fail = fail or {}
        self.export_dir = Path(".")
        self.called = threading.Event()
        self._grids: dict[tuple[Any, ...], Any] = {}

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        self.called.set()
        exc = self.fail.get(call[0])
        if exc is not None:
            raise exc

    def subscribe(self, callback):
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    def emit(self, event: Event) -> None:
        for cb in list(self.callbacks):
            cb(event)

    def snapshot(self) -> ControlSnapshot:
        return ControlSnapshot(servers=self.servers, queue=self.queue_window(current=3), activity="benchmarking",
                               detail="sim-flashinfer-cutlass conc 10", paused=False, current_item=3)

    def queue_rows(self):
        return self.queue

    def profile_names(self):
        return [s.profile for s in self.servers]

    def policies(self):
        return {"grouped": "each profile's items together", "interleaved": "A sweep, B sweep, A sweep",
                "alternating": "A,B,A,B item by item"}

    def restart_counts(self, request: CampaignRequest):
        p, c, r = len(request.profiles), len(request.concurrencies), request.repeats
        return {"grouped": p, "interleaved": p * r, "alternating": p * c * r}

    def campaign_preview(self, request: CampaignRequest):
        """Planned as the core plans it (the controller's plan_campaign op, on no stored noise)."""
        from moe_tui.control.reads import campaign_preview
        from moe_tui.spec import BenchmarkSpec
        from moe_tui.store.queue_plan import CampaignPlan

        plan = CampaignPlan(profiles=request.profiles, concurrencies=request.concurrencies, repeats=request.repeats,
                            base_spec=BenchmarkSpec.from_dict(request.spec), policy=request.policy,
                            prompts_per_concurrency=request.prompts_per_concurrency, control=request.control)
        items = [{"concurrency": p.spec.max_concurrency, "num_prompts": p.spec.num_prompts} for p in plan.items()]
        answer = {"name": plan.default_name(), "control": plan.control_plan(), "items": items,
                  "server_starts": plan.start_costs()}
        return campaign_preview(request, answer)

    def compared_profiles(self):
        return ["sim-flashinfer-cutedsl", "sim-flashinfer-cutlass"]

    def comparison(self, baseline: str, candidate: str, include_flagged: bool = False, accept_uncontrolled: bool = False):
        # The same grid object while nothing was recorded, as the store-backed client answers
        # (grids are cached per store generation; the screen skips a grid it already shows).
        key = (baseline, candidate, include_flagged, accept_uncontrolled)
        if key not in self._grids:
            self._grids[key] = self._build_grid(*key)
        return self._grids[key]

    def _build_grid(self, baseline: str, candidate: str, include_flagged: bool, accept_uncontrolled: bool):
        from moe_tui.compare import CompareSettings

        a, b = demo_runs()
        runs = {"sim-flashinfer-cutlass": a, "sim-flashinfer-cutedsl": b}
        grid = build_grid_from_runs(runs[baseline], runs[candidate], baseline_name=baseline, candidate_name=candidate,
                                    settings=CompareSettings(include_flagged=include_flagged,
                                                             accept_uncontrolled=accept_uncontrolled))
        return _with_extras(grid, runs[baseline], runs[candidate])

    def run_view(self, run_id: int):
        ttft = tuple(30.0 + (i * 7) % 40 for i in range(60))
        return RunView(id=run_id, profile="sim-flashinfer-cutlass", status="complete", fingerprint=FP_A,
                       spec={"input_len": 128, "output_len": 64, "max_concurrency": 10, "num_prompts": 40},
                       provenance={"engine": "sim", "sglang_version": "0.5.23-sim"},
                       summary={"completed": 40, "output_throughput": 702.5, "mean_ttft_ms": 48.1},
                       flags=(), simulated=True,
                       latencies_ms={"ttft": ttft, "latency": tuple(x * 10 for x in ttft), "itl": (9.0,) * 50},
                       roofline=_roofline_terms(run_id))

    def log_lines(self, profile: str, limit: int = 2000):
        return [f"[2025-01-01 00:00:0{i}] {profile} line {i}" for i in range(5)] + ["ERROR something odd"]

    def start_server(self, profile):
        self._record("start_server", profile)

    def stop_server(self, profile):
        self._record("stop_server", profile)

    def pause(self):
        self._record("pause")

    def resume(self):
        self._record("resume")

    def skip(self):
        self._record("skip")

    def retry(self, item_id):
        self._record("retry", item_id)

    def cancel(self, item_id):
        self._record("cancel", item_id)

    def delete(self, item_id):
        self._record("delete", item_id)

    def move(self, item_id, direction):
        self._record("move", item_id, direction)

    def add_campaign(self, request):
        self._record("add_campaign", request)
        return len(request.profiles) * len(request.concurrencies) * request.repeats

    def export(self, baseline, candidate, fmt):
        self._record("export", baseline, candidate, fmt)
        return self.export_dir / f"compare.{ 'md' if fmt == 'markdown' else 'csv'}"

    def shutdown(self, stop_servers):
        self._record("shutdown", stop_servers)


def telemetry_message(snapshot: TelemetrySnapshot, owners: dict[int, str] | None = None) -> Any:
    """A GPU snapshot as it reaches the App: the controller's sample (and the GPU processes' owners
    it decided) relayed as a core event."""
    from moe_tui.ui.messages import CoreEventArrived

    return CoreEventArrived(GpuTelemetry(snapshot=snapshot.to_dict(),
                                         owners={str(pid): name for pid, name in (owners or {}).items()}))


def _roofline_terms(run_id: int) -> tuple[tuple[str, str], ...]:
    """The core's own roofline terms for a run like the one shown (GLM-5-NVFP4 sim, conc 10)."""
    from compare_data import make_run, snapshot, summary

    from moe_tui.grids.extras import run_roofline_terms

    run = make_run(run_id, "sim-flashinfer-cutlass", concurrency=10, summary=summary(702.5),
                   spec_changes={"input_len": 128, "output_len": 64},
                   profile=snapshot("sim-flashinfer-cutlass", "flashinfer_cutlass", engine="sim"))
    return run_roofline_terms(run)


def _with_extras(grid, base_runs, cand_runs):
    """The grid as the store-backed core returns it: roofline % per concurrency and a gate verdict
    (both sides answered the gate prompts identically here), computed by the core from plain data."""
    from moe_tui.gate.correctness import GateSample, compare_gate
    from moe_tui.grids.extras import GridExtras, apply_gate, roofline_cells

    samples = [GateSample(f"p{i}", tuple(range(i, i + 16)), (-0.05,) * 16) for i in range(8)]
    extras = GridExtras(compare_gate(samples, samples), roofline_cells(base_runs), roofline_cells(cand_runs))
    return apply_gate(grid, extras)
