"""Build a store shaped like a team's history (issue 34), for benches/scale.py.

One baseline profile compared against 19 candidates over months: every campaign is the baseline
against one candidate, interleaved (so the baseline holds about half of all runs), the candidates in
turn; the spec changes three times (four eras, by campaign order: a longer input each era); one campaign in
`INVESTIGATION_EVERY` is an investigation of the latest candidate (a cold and a warm run, the cold
one diagnostic); one run in 50 fails. Written through the store and queue API the runner uses
(`add_planned_campaign`, `claim_next`, `record_server_start`, `create_run`, `finish_run(close_item=...)`)
with the process clock moved forward (about `HOURS_PER_CAMPAIGN` hours a campaign, so 100k runs span
months). Runs are lean (`REQUEST_KB` of per-request data, the issue's 52 KB runs being mostly samples:
the grid never reads them).

    .venv/bin/python benches/history_store.py N PATH
    .venv/bin/python benches/history_store.py --grow N PATH    (add campaigns to an existing store up to N runs)
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.db import Store  # noqa: E402
from moe_tui.store.queue import PlannedItem, QueueItem, RunQueue  # noqa: E402

BASELINE = "baseline-cutlass"
CANDIDATES = tuple(f"cand-{i:02d}" for i in range(1, 20))
CONCS = (2, 8, 32, 64, 128)
REPEATS = 3
INVESTIGATION_EVERY = 25
FAIL_EVERY = 50
HOURS_PER_CAMPAIGN = 1.5
ERAS = 4
REQUEST_KB = int(os.environ.get("MOE_TUI_SCALE_REQUEST_KB", "8"))
REQUESTS_PER_RUN = 20
T0 = 1_780_000_000.0  # 2026-05-28: months before "today" (2026-12-05)


class _Clock:
    """The builder's clock: `time.time` of this process, moved forward by the builder."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def campaigns_for(n_runs: int) -> int:
    return max(1, n_runs // (len(CONCS) * REPEATS * 2))


def spec(conc: int, era: int) -> BenchmarkSpec:
    return BenchmarkSpec.from_dict({"input_len": 1024 * (era + 1), "output_len": 256, "num_prompts": 4 * conc,
                                    "max_concurrency": conc, "seed": 42})


def profile(name: str) -> dict:
    backend = "flashinfer_cutlass" if name == BASELINE else ("triton", "flashinfer_cutedsl", "deep_gemm")[
        int(name[-2:]) % 3]
    return {"name": name, "engine": "sim", "moe_runner_backend": backend, "tp_size": 8, "ep_size": 8,
            "model_path": "zai-org/GLM-5-NVFP4", "quantization": "modelopt_fp4", "gpus": list(range(8)), "port": 31000}


def provenance(prof: dict, item_id: int) -> dict:
    resolved = {f"arg_{k}": k * 3 for k in range(60)} | {"moe_runner_backend": prof["moe_runner_backend"],
                                                          "kv_cache_dtype": "auto", "simulated": True}
    return {"provenance_schema": 2,
            "server": {"engine": "sim", "sglang_version": "0.5.23-sim", "resolved_backend": prof["moe_runner_backend"],
                       "requested_backend": prof["moe_runner_backend"], "backend_mismatch": False,
                       "resolved_args": resolved, "argv": ["python", "-m", "sglang.launch_server"] + ["--x"] * 30},
            "gpu": {"gpu_names": {str(i): "NVIDIA H200" for i in range(8)}, "driver_version": "580.65",
                    "cuda_driver_version": "13.0", "sm_clock_max_seen_mhz": 1980, "sm_clock_min_mhz": 1755},
            "host": {"hostname": "box", "platform": "Linux-6.8-x86_64", "python_version": "3.11.9",
                     "moe_tui_version": "0.4.0"},
            "client": {"name": "moe-tui", "version": "0.4.0"}, "queue_item": {"id": item_id},
            "warmup_pass": {"duration_s": 3.2, "requests": 8}, "simulated": True}


def _telemetry() -> dict:
    gpu = {"name": "NVIDIA H200", "util_mean_pct": 91.0, "sm_clock_drop_pct": 1.2, "suspect_clock_events": []}
    return {"available": True, "driver_version": "580.65", "gpus": {str(i): dict(gpu) for i in range(8)},
            "overall": {"util_mean_pct": 91.0, "sm_clock_drop_pct": 1.2, "suspect_clock_events": []},
            "foreign_processes": [], "simulated": True}


def _requests(rng: random.Random) -> list[dict]:
    itl_n = max(1, REQUEST_KB * 1024 // REQUESTS_PER_RUN // 22)
    return [{"idx": i, "ok": True, "ttft": rng.uniform(0.05, 0.2), "latency": rng.uniform(2, 3),
             "itl": [round(rng.uniform(0.008, 0.012), 6) for _ in range(itl_n)]} for i in range(REQUESTS_PER_RUN)]


def _summary(rng: random.Random, conc: int, base: float) -> dict:
    tok = base * conc ** 0.8 * rng.uniform(0.98, 1.02)
    j = rng.uniform(0.98, 1.02)
    return {"completed": 4 * conc, "failed": 0, "output_throughput": tok, "mean_ttft_ms": (40.0 + conc) * j,
            "p99_ttft_ms": (80.0 + conc) * j, "mean_tpot_ms": 9.0 * j, "mean_itl_ms": 9.0 * j,
            "mean_e2e_latency_ms": (600.0 + conc) * j, "request_throughput": tok / 256,
            "total_output_tokens": 1024 * conc}


def start_item_run(store: Store, item: QueueItem, prof: dict, provenance: dict,
                   start_of: dict[str, int]) -> tuple[int, dict[str, int]]:
    """An item's run begun as the controller begins it: a server start when the profile changes (the
    last one otherwise), then the run's row. Returns the run id and the server start in use."""
    if item.profile_name not in start_of:
        start_of = {item.profile_name: store.record_server_start(
            profile_name=item.profile_name, profile=prof, argv=["python", "-m", "sglang.launch_server"],
            env={}, log_path="/dev/null", pid=4242, state="ready")}
    rid = store.create_run(profile_name=item.profile_name, spec_json=item.spec.canonical_json(),
                           fingerprint=item.fingerprint, client="moe-tui", profile=prof, provenance=provenance,
                           queue_item_id=item.id, server_start_id=start_of[item.profile_name])
    return rid, start_of


def work(store: Store, queue: RunQueue, clock: _Clock, name: str, policy: str, definition: dict,
         planned: list[PlannedItem], rng: random.Random, counter: list[int]) -> None:
    """Queue a campaign and run every item as the controller does (a server start per profile change)."""
    queue.add_planned_campaign(name, policy, definition, planned)
    start_of: dict[str, int] = {}
    while (item := queue.claim_next()) is not None:
        prof = profile(item.profile_name)
        rid, start_of = start_item_run(store, item, prof, provenance(prof, item.id), start_of)
        clock.now += 60.0
        counter[0] += 1
        base = 100.0 + (7.0 if item.profile_name != BASELINE else 0.0) + int(item.profile_name[-2:] or 0) \
            if item.profile_name != BASELINE else 100.0
        if counter[0] % FAIL_EVERY == 0:
            store.finish_run(rid, status="failed", error="server exited with code 1 (simulated)", flags=["simulated"],
                             close_item=(item.id, "failed", "server exited"))
            continue
        store.finish_run(rid, status="complete", summary=_summary(rng, item.spec.max_concurrency, base),
                         flags=["simulated"] + ([] if item.warmup else ["no_warmup_pass"]), telemetry=_telemetry(),
                         selfcheck={"client_bound": False}, requests=_requests(rng),
                         gpu_samples=[(clock.now + i, {"util": 90}) for i in range(5)], close_item=(item.id, "done", ""))


def write_profiles(where: Path) -> None:
    """The history's profiles as TOML files (`queue add --dry-run` plans from them)."""
    where.mkdir(parents=True, exist_ok=True)
    for name in (BASELINE, *CANDIDATES):
        prof = profile(name)
        (where / f"{name}.toml").write_text(
            f'name = "{name}"\nengine = "sim"\nmodel_path = "{prof["model_path"]}"\n'
            f'moe_runner_backend = "{prof["moe_runner_backend"]}"\ntp_size = 8\nep_size = 8\n'
            f'quantization = "modelopt_fp4"\ngpus = [0, 1, 2, 3, 4, 5, 6, 7]\nport = 31000\n')


def build(n_runs: int, path: Path) -> dict:
    """Campaigns until the store holds `n_runs` runs (or more: whole campaigns), eras by campaign order."""
    rng = random.Random(34)
    clock = _Clock(T0)
    started = time.monotonic()
    total = campaigns_for(n_runs)
    real_time = time.time
    time.time = clock  # type: ignore[assignment]  # the store and queue stamp rows with this clock
    try:
        with Store(path) as store:
            queue = RunQueue(store)
            counter = [int(store.query("SELECT COUNT(*) FROM runs")[0][0])]
            k = int(store.query("SELECT COUNT(*) FROM campaigns")[0][0])
            clock.now = max(clock.now, float(store.query("SELECT IFNULL(MAX(created_at), 0) FROM runs")[0][0]))
            while counter[0] < n_runs:
                k += 1
                era = min(ERAS - 1, (k - 1) * ERAS // total)
                cand = CANDIDATES[(k - 1) % len(CANDIDATES)]
                clock.now += HOURS_PER_CAMPAIGN * 3600
                if k % INVESTIGATION_EVERY == 0:
                    planned = [PlannedItem(cand, spec(64, era), 0, False, True), PlannedItem(cand, spec(64, era), 1, True)]
                    definition = {"kind": "investigation", "baseline": BASELINE, "candidate": cand, "concurrency": 64,
                                  "metric": "output_throughput", "before": {}, "proposals": [],
                                  "item_roles": [{"kind": "cold_warm", "role": "cold", "side": "candidate"},
                                                 {"kind": "cold_warm", "role": "warm", "side": "candidate"}]}
                    work(store, queue, clock, f"investigate:{BASELINE}-vs-{cand}:c=64:output_throughput",
                         "investigation", definition, planned, rng, counter)
                    continue
                planned = [PlannedItem(p, spec(c, era), rep, True) for rep in range(REPEATS) for c in CONCS
                           for p in (BASELINE, cand)]
                work(store, queue, clock, f"sweep {k}: {BASELINE} vs {cand}", "interleaved",
                     {"profiles": [BASELINE, cand]}, planned, rng, counter)
            runs = int(store.query("SELECT COUNT(*) FROM runs")[0][0])
            latest = json.loads(store.query("SELECT definition_json FROM campaigns WHERE policy = 'interleaved'"
                                            " ORDER BY id DESC LIMIT 1")[0][0])["profiles"]
            store.query("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        time.time = real_time  # type: ignore[assignment]
    return {"runs": runs, "bytes": path.stat().st_size, "build_s": round(time.monotonic() - started, 1),
            "pair": latest, "campaigns": k}


if __name__ == "__main__":
    n, where = int(sys.argv[-2]), Path(sys.argv[-1])
    where.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(build(n, where)))
