"""Investigations end to end, on real emulator servers: `moe-tui queue add` + `moe-tui run` measure
a sweep, `moe-tui investigate` proposes and queues the follow-up, `moe-tui run` works it, and
`moe-tui investigate --report` says what changed.

- a cell with one run a side gets pilot repeats that, once run, settle it (and a sweep without
  concurrency 2 gets a control proposal, which once run makes the control check agree);
- the seed's 64 -> 256 sign change gets bisection items at 128, which once run measure there;
- a JIT-stall fault on the candidate gets a cold/warm pair whose result flags the warmup effect.
"""

from __future__ import annotations

import json

import pytest
from runner_support import STREAMED_ARGS, Env, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKLOAD = ["--input-len", "128", "--output-len", "32", "--num-prompts", "8", "--prompts-per-concurrency", "1"]


def add_profile(env: Env, name: str, backend: str, time_scale: int = 50, **sim: float) -> str:
    return env.profile(name, backend, extra_args=STREAMED_ARGS, time_scale=time_scale, load_seconds=0.1,
                       graph_seconds=0.05, warmup_seconds=0.05, noise_pct=2.0, **sim)


def ok(proc) -> str:
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


def work_queue(env: Env, pdir: list[str]) -> None:
    ok(env.run("run", *pdir, timeout=600))
    states = dict(env.query("SELECT state, count(*) FROM queue_items GROUP BY state"))
    assert set(states) == {"done"}, states
    wait_gone(env)


def report(env: Env, a: str, b: str, conc: int) -> dict:
    out = ok(env.run("investigate", a, b, "--concurrency", str(conc), "--report", "--json"))
    (latest, *_) = json.loads(out)[::-1]
    return latest


def test_too_few_repeats_settle_and_the_missing_control_is_proposed(env):
    # Little start-to-start variance here (0.2%, not the emulator's hardware-like 1.5%): this test is
    # about the flow (proposed, queued, run, reported), and 3 control runs a side can only show
    # agreement within +-3% when the starts barely move.
    # 10x, not 50x: a control run at concurrency 2 lasts ~1.3 s rather than ~0.25 s, so a loaded
    # machine's late wake-ups and client start-up (tens of ms, real time) stay well under the 3%
    # margin; at 50x they spread the starts by 3-4% (measured beside 8 busy loops) and the control
    # said "inconclusive" beside a second `make test`.
    low = {"start_sigma": 0.2, "run_jitter": 0.2}
    a = add_profile(env, "sim-cutlass", "flashinfer_cutlass", time_scale=10, **low)
    b = add_profile(env, "sim-cutedsl", "flashinfer_cutedsl", time_scale=10, **low)
    pdir = ["--profiles-dir", str(env.profiles)]
    # --no-control: the sweep is made without concurrency 2, so the investigation's repeats bring it:
    # each new start measures the control and then the cell (the subject of this test).
    ok(env.run("queue", "add", "--profiles", f"{a},{b}", "--concurrency", "1,10", "--order", "interleaved",
               "--no-control", *pdir, *WORKLOAD))
    work_queue(env, pdir)

    dry = ok(env.run("investigate", a, b, "--concurrency", "10", "--dry-run", *pdir))
    assert "[repeats]" in dry and "[control]" not in dry, dry  # the repeats carry the control
    assert "every proposed repeat measures concurrency 2" in dry, dry
    assert "n=1 vs 1" in dry  # the cell as it stands: one run a side, noise unknown
    control_lines = [ln for ln in dry.splitlines() if " control" in ln and "conc=" in ln]
    # 2 new fresh starts a side (3 a side in all), each measuring concurrency 2 first: no control-only starts
    assert len(control_lines) == 4 and all("conc=2 " in ln and "fresh server start" in ln for ln in control_lines), dry
    assert "nothing queued (--dry-run)" in dry
    assert env.query("SELECT count(*) FROM queue_items WHERE state = 'pending'") == [(0,)]

    queued = ok(env.run("investigate", a, b, "--concurrency", "10", "--only", "repeats", "--yes", *pdir))
    assert f"investigate:{a}-vs-{b}:c=10:output_throughput" in queued
    name, definition = env.query("SELECT name, definition_json FROM campaigns ORDER BY id DESC LIMIT 1")[0]
    definition = json.loads(definition)
    assert definition["before"]["verdict"] == "noise_unknown"
    assert definition["before"]["control"] == "absent"  # concurrency 1 is no control
    under = report(env, a, b, 10)
    assert under["state"] == "under investigation"

    work_queue(env, pdir)
    after = report(env, a, b, 10)
    assert after["state"] == "complete", after
    assert after["after"]["baseline"]["n"] == 3 and after["after"]["candidate"]["n"] == 3
    assert after["settled"] == "settled: better", after  # cutedsl's +67% at concurrency 10 holds
    assert after["after"]["ci_pct"][0] > 2.0  # judged against the control on the 2 new starts a side too


def test_seed_sign_change_is_bisected_and_a_jit_stall_is_flagged_by_the_cold_warm_pair(env):
    # time scale 5 (steps long next to CPU jitter on a loaded box) and stream interval 16 keep the
    # client ahead of the server at concurrency 256;
    # the candidate JIT-compiles each new batch bucket once per server start (0.3 s a bucket here).
    a = add_profile(env, "sim-cutlass", "flashinfer_cutlass", time_scale=5)
    b = add_profile(env, "sim-cutedsl", "flashinfer_cutedsl", time_scale=5, jit_stall_ms=1500.0)
    pdir = ["--profiles-dir", str(env.profiles)]
    # --no-control: the subject is the sign change and the cold/warm pair, read from the raw means
    # (the planner sizes from them when the grid has no verdict); the control: the test above.
    ok(env.run("queue", "add", "--no-control", "--profiles", f"{a},{b}", "--concurrency", "64,256", "--order", "interleaved",
               *pdir, *WORKLOAD))
    work_queue(env, pdir)
    grid = ok(env.run("compare", a, b, "--format", "csv"))
    assert grid  # the sweep is in the grid

    out = ok(env.run("investigate", a, b, "--concurrency", "256", "--json", "--dry-run", *pdir))
    plan = json.loads(out.splitlines()[0])  # stderr's "nothing queued" follows (merged by env.run)
    by_kind = {p["kind"]: p for p in plan["proposals"]}
    # On a 2-core machine the client may be the limit at 256: the cell then has no clean delta, the
    # grid says client_bound, and nothing can be bisected from it; the cold/warm pair still stands.
    client_bound_at_256 = "client_bound" in grid and "bisect" not in by_kind
    assert "cold_warm" in by_kind, (list(by_kind), plan["notes"], grid)
    raw = _raw_deltas(grid, (64, 256))  # the measured means' difference, what the planner brackets
    if client_bound_at_256:
        assert any("client_bound" in n or "client-bound" in n for n in plan["notes"]) or "client_bound" in out
    elif "bisect" not in by_kind:
        # One short run a side on a loaded 2-core box can miss the seed's +14% at 64: then nothing
        # flips or crosses the minimum effect between 64 and 256, and rightly nothing is bisected.
        d64, d256 = raw[64], raw[256]
        assert d64 is not None and d256 is not None and (d64 > 0) == (d256 > 0) and min(abs(d64), abs(d256)) >= 2.0, (
            raw, plan["notes"], grid)
    else:
        assert {i["concurrency"] for i in by_kind["bisect"]["items"]} == {128}
        assert "between concurrency 64" in by_kind["bisect"]["reason"], (raw, by_kind["bisect"]["reason"])
    cold, warm = by_kind["cold_warm"]["items"]
    assert (cold["profile"], cold["fresh_start"], cold["warmup"]) == (b, True, False)
    assert (warm["profile"], warm["fresh_start"], warm["warmup"]) == (b, False, True)
    assert by_kind["cold_warm"]["minutes"] is not None  # priced from the runs already measured

    only = "bisect,cold_warm" if "bisect" in by_kind else "cold_warm"
    ok(env.run("investigate", a, b, "--concurrency", "256", "--only", only, "--yes", *pdir))
    fresh = env.query("SELECT fresh_start, warmup FROM queue_items WHERE state = 'pending' ORDER BY id")
    assert (1, 0) in fresh  # the cold item: fresh server start, no warmup pass
    work_queue(env, pdir)

    # The cold item really ran on its own server start, without a warmup pass.
    rows = env.query("SELECT q.fresh_start, q.warmup, r.server_start_id, r.flags_json FROM queue_items q "
                     "JOIN runs r ON r.id = q.run_id WHERE q.campaign_id = (SELECT max(id) FROM campaigns) "
                     "ORDER BY q.id")
    cold_row, warm_row = rows[-2], rows[-1]
    assert cold_row[0] == 1 and "no_warmup_pass" in json.loads(cold_row[3])
    assert warm_row[2] == cold_row[2]  # the warm run reused the cold run's server

    done = report(env, a, b, 256)
    assert done["state"] == "complete"
    assert "warmup_effect" in done["flags"], done["lines"]
    if not client_bound_at_256 and "bisect" in by_kind:  # a bisection was queued: its report line
        assert any(ln.startswith("bisect   concurrency 128: ") and "no data" not in ln for ln in done["lines"])


def _raw_deltas(grid_csv: str, concurrencies: tuple[int, ...]) -> dict[int, float | None]:
    """Candidate vs baseline mean output tok/s per concurrency, in %, from `compare --format csv`."""
    import csv
    import io

    out: dict[int, float | None] = {c: None for c in concurrencies}
    for row in csv.DictReader(io.StringIO(grid_csv)):
        conc = int(row["concurrency"])
        if row["metric"] == "output_throughput" and conc in out and row["baseline_mean"] and row["candidate_mean"]:
            out[conc] = (float(row["candidate_mean"]) / float(row["baseline_mean"]) - 1.0) * 100.0
    return out
