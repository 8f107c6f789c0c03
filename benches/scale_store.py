"""Build a store of N runs the way the runner writes them, for benches/scale.py (issue 26).

Through the store and queue API the runner itself uses (`RunQueue.add_planned_campaign`,
`claim_next`, `record_server_start`, `Store.create_run`, `Store.finish_run(close_item=...)`), never
raw SQL. What is in it:

- the compared pair, `PAIR` (two profiles, 4 concurrencies x 3 repeats each: 24 runs), always the
  same whatever N, so a grid's cost can be compared across store sizes;
- the rest of N as campaigns of `OTHER_PROFILES` other profiles (one server start per sweep, every
  item done), one in `INVESTIGATION_EVERY` an investigation campaign with a cold item;
- per-request data cut to about `REQUEST_KB` KB a run (a real run writes 3-15 MB) so that 100k
  runs fit on a laptop disk; run rows carry provenance and telemetry of a real run's size.

    .venv/bin/python benches/scale_store.py N PATH
    .venv/bin/python benches/scale_store.py --clone SRC N PATH

`--clone` makes a larger store from a built one when building it run by run would take too long
(100k runs on a shared 2-core box: most of an hour): every non-pair row (campaigns, queue items,
server starts, runs with their requests and GPU samples) is copied by SQL with shifted ids until
there are N runs. The rows are the ones the runner's path wrote; the compared pair is untouched.
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

from benches.history_store import provenance, start_item_run  # noqa: E402
from moe_tui.spec import BenchmarkSpec  # noqa: E402
from moe_tui.store.db import Store  # noqa: E402
from moe_tui.store.queue import PlannedItem, RunQueue  # noqa: E402

PAIR = ("aa-baseline", "ab-candidate")
PAIR_CONCS = (1, 8, 64, 256)
PAIR_REPEATS = 3
OTHER_PROFILES = 40
CAMPAIGN_ITEMS = 96
INVESTIGATION_EVERY = 20
REQUEST_KB = int(os.environ.get("MOE_TUI_SCALE_REQUEST_KB", "40"))  # smaller for 100k on a small disk
REQUESTS_PER_RUN = 40


def _spec(conc: int) -> BenchmarkSpec:
    return BenchmarkSpec.from_dict({"input_len": 1024, "output_len": 256, "num_prompts": 4 * conc,
                                    "max_concurrency": conc, "seed": 42})


def _profile(name: str) -> dict:
    backend = "flashinfer_cutlass" if name.endswith(("line", "0", "2", "4", "6", "8")) else "flashinfer_cutedsl"
    return {"name": name, "engine": "sim", "moe_runner_backend": backend, "tp_size": 8, "ep_size": 8,
            "model_path": "zai-org/GLM-5-NVFP4", "quantization": "modelopt_fp4", "gpus": list(range(8)),
            "port": 31000, "extra_args": ["--mem-fraction-static", "0.85"], "env": {"SGLANG_X": "1"}}


def _provenance(profile: dict, item_id: int, attempt: int) -> dict:
    """history_store's provenance (the same bytes a run stores), with the item's attempt."""
    prov = provenance(profile, item_id)
    prov["queue_item"]["attempt"] = attempt
    return prov


def _telemetry() -> dict:
    gpu = {"name": "NVIDIA H200", "util_mean_pct": 91.0, "sm_clock_drop_pct": 1.2, "mem_used_peak_bytes": 120 * 2**30,
           "power_mean_w": 610.0, "clock_events_seen": [], "suspect_clock_events": [], "samples": 60}
    return {"available": True, "reason": None, "snapshots": 60, "duration_s": 59.0, "driver_version": "580.65",
            "cuda_driver_version": "13.0", "gpus": {str(i): dict(gpu) for i in range(8)},
            "overall": {"util_mean_pct": 91.0, "sm_clock_drop_pct": 1.2, "suspect_clock_events": []},
            "foreign_processes": [], "simulated": True}


def _requests(rng: random.Random) -> list[dict]:
    itl_n = max(1, REQUEST_KB * 1024 // REQUESTS_PER_RUN // 22)  # ~22 bytes a latency in JSON
    return [{"idx": i, "ok": True, "sent_at": 1.0 + i, "prompt_len": 1024, "output_len": 256,
             "ttft": rng.uniform(0.05, 0.2), "latency": rng.uniform(2, 3),
             "itl": [rng.uniform(0.008, 0.012) for _ in range(itl_n)], "finish_reason": "length"}
            for i in range(REQUESTS_PER_RUN)]


def _summary(rng: random.Random, conc: int, base: float) -> dict:
    tok = base * conc ** 0.8 * rng.uniform(0.98, 1.02)
    j = rng.uniform(0.98, 1.02)
    return {"completed": 4 * conc, "failed": 0, "output_throughput": tok, "mean_ttft_ms": (40.0 + conc) * j,
            "p99_ttft_ms": (80.0 + conc) * j, "mean_tpot_ms": 9.0 * j, "mean_itl_ms": 9.0 * j,
            "mean_e2e_latency_ms": (600.0 + conc) * j,
            "request_throughput": tok / 256, "total_output_tokens": 1024 * conc}


def work_campaign(store: Store, queue: RunQueue, name: str, policy: str, definition: dict,
                  planned: list[PlannedItem], rng: random.Random, base: dict[str, float]) -> int:
    """Queue a campaign and run every item as the controller does: claim, server start per
    profile change, create the run, finish it with samples and the item closed in one transaction."""
    queue.add_planned_campaign(name, policy, definition, planned)
    done = 0
    start_of: dict[str, int] = {}
    while (item := queue.claim_next()) is not None:
        profile = _profile(item.profile_name)
        rid, start_of = start_item_run(store, item, profile, _provenance(profile, item.id, item.attempts), start_of)
        flags = ["simulated"] + ([] if item.warmup else ["no_warmup_pass"])
        store.finish_run(rid, status="complete", summary=_summary(rng, item.spec.max_concurrency,
                                                                  base.setdefault(item.profile_name, rng.uniform(90, 110))),
                         flags=flags, telemetry=_telemetry(), selfcheck={"client_bound": False},
                         requests=_requests(rng), gpu_samples=[(time.time() + i, {"util": 90}) for i in range(10)],
                         close_item=(item.id, "done", ""))
        done += 1
    return done


def build(n_runs: int, path: Path) -> dict:
    rng = random.Random(26)
    base: dict[str, float] = {}
    started = time.monotonic()
    with Store(path) as store:
        queue = RunQueue(store)
        pair = [PlannedItem(p, _spec(c), rep, True) for rep in range(PAIR_REPEATS) for p in PAIR for c in PAIR_CONCS]
        total = work_campaign(store, queue, "pair", "interleaved", {"profiles": list(PAIR)}, pair, rng, base)
        k = 0
        while total < n_runs:
            k += 1
            a, b = (f"other-{(2 * k) % OTHER_PROFILES:03d}", f"other-{(2 * k + 1) % OTHER_PROFILES:03d}")
            size = min(CAMPAIGN_ITEMS, n_runs - total)
            if k % INVESTIGATION_EVERY == 0:
                planned = [PlannedItem(b, _spec(64), 0, False, True), PlannedItem(b, _spec(64), 1, True, False)][:size]
                definition = {"kind": "investigation", "baseline": a, "candidate": b, "concurrency": 64,
                              "metric": "output_throughput", "before": {}, "proposals": [],
                              "item_roles": [{"kind": "cold_warm", "role": "cold", "side": "candidate"},
                                             {"kind": "cold_warm", "role": "warm", "side": "candidate"}]}
                name, policy = f"investigate:{a}-vs-{b}:c=64:output_throughput", "investigation"
            else:
                concs = (1, 2, 4, 8, 16, 32, 64, 128)
                planned = [PlannedItem(p, _spec(c), rep, True) for rep in range(6) for p in (a, b) for c in concs][:size]
                definition, name, policy = {"profiles": [a, b]}, f"sweep {k}", "grouped"
            total += work_campaign(store, queue, name, policy, definition, planned, rng, base)
        runs = int(store.query("SELECT COUNT(*) FROM runs")[0][0])
    return {"runs": runs, "bytes": path.stat().st_size, "build_s": round(time.monotonic() - started, 1)}


def clone(source: Path, n_runs: int, path: Path) -> dict:
    """`source` copied to `path`, its non-pair rows repeated with shifted ids up to `n_runs` runs."""
    import shutil
    import sqlite3

    started = time.monotonic()
    with Store(source) as s:  # checkpointed, so the copy is the whole store
        s.query("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path, isolation_level=None)
    top = {t: conn.execute(f"SELECT MAX(id) FROM {t}").fetchone()[0] for t in ("runs", "queue_items", "campaigns",
                                                                              "server_starts")}
    pos = conn.execute("SELECT MAX(position) FROM queue_items").fetchone()[0]
    not_pair = f"profile_name NOT IN ('{PAIR[0]}', '{PAIR[1]}')"
    per_copy = conn.execute(f"SELECT COUNT(*) FROM runs WHERE {not_pair}").fetchone()[0]
    k = 0
    while conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] + per_copy <= n_runs:
        k += 1
        r, q, c, st = (top[t] * k for t in ("runs", "queue_items", "campaigns", "server_starts"))
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO campaigns (id, created_at, name, policy, definition_json) SELECT id + {c},"
                     f" created_at, name || ' #{k}', policy, definition_json FROM campaigns WHERE id > 1 AND id <= {top['campaigns']}")
        cols = [row[1] for row in conn.execute("PRAGMA table_info(server_starts)") if row[1] != "id"]
        conn.execute(f"INSERT INTO server_starts (id, {', '.join(cols)}) SELECT id + {st}, {', '.join(cols)}"
                     f" FROM server_starts WHERE id <= {top['server_starts']} AND {not_pair}")
        cols = [row[1] for row in conn.execute("PRAGMA table_info(queue_items)")
                if row[1] not in ("id", "position", "campaign_id", "run_id")]
        conn.execute(f"INSERT INTO queue_items (id, position, campaign_id, run_id, {', '.join(cols)}) SELECT"
                     f" id + {q}, position + {pos * k}, campaign_id + {c}, run_id + {r}, {', '.join(cols)}"
                     f" FROM queue_items WHERE id <= {top['queue_items']} AND {not_pair}")
        cols = [row[1] for row in conn.execute("PRAGMA table_info(runs)")
                if row[1] not in ("id", "queue_item_id", "server_start_id")]
        conn.execute(f"INSERT INTO runs (id, queue_item_id, server_start_id, {', '.join(cols)}) SELECT id + {r},"
                     f" queue_item_id + {q}, server_start_id + {st}, {', '.join(cols)} FROM runs"
                     f" WHERE id <= {top['runs']} AND {not_pair}")
        # The triggers made each copied run's summary; its grid facts are the original's (the write
        # path would compute the same ones from the same provenance).
        conn.execute(f"UPDATE run_summaries SET facts_json = (SELECT o.facts_json FROM run_summaries o WHERE"
                     f" o.run_id = run_summaries.run_id - {r}) WHERE run_id > {r} AND facts_json IS NULL")
        cols = [row[1] for row in conn.execute("PRAGMA table_info(requests)") if row[1] != "run_id"]
        conn.execute(f"INSERT INTO requests (run_id, {', '.join(cols)}) SELECT run_id + {r}, {', '.join(cols)}"
                     f" FROM requests WHERE run_id IN (SELECT id FROM runs WHERE id <= {top['runs']} AND {not_pair})")
        conn.execute(f"INSERT INTO gpu_samples (run_id, t, sample_json) SELECT run_id + {r}, t, sample_json"
                     f" FROM gpu_samples WHERE run_id IN (SELECT id FROM runs WHERE id <= {top['runs']} AND {not_pair})")
        conn.execute("COMMIT")
    runs = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    conn.close()
    return {"runs": runs, "bytes": path.stat().st_size, "build_s": round(time.monotonic() - started, 1),
            "cloned_from": str(source)}


if __name__ == "__main__":
    if sys.argv[1] == "--clone":
        src, n, where = Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
        where.parent.mkdir(parents=True, exist_ok=True)
        print(json.dumps(clone(src, n, where)))
    else:
        n, where = int(sys.argv[1]), Path(sys.argv[2])
        where.parent.mkdir(parents=True, exist_ok=True)
        print(json.dumps(build(n, where)))
