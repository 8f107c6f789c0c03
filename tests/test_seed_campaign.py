"""The seed's afternoon, replayed headless: cutlass vs cutedsl at concurrency 2, 64 and 256 with 3
repeats (and one run a side at 10), through `moe-tui queue add` + `moe-tui run` against real emulator servers, then
`moe-tui compare`. The grid must call the seed's shape (cutedsl ahead at 64, behind from 256 on:
516 vs 719 tok/s in the seed, 797 vs 1603 at 1024) with verdicts, keep the concurrency-2 control
check quiet, and refuse the concurrency-10 cell, queued one profile at a time with the baseline's output
length drifted: a cell's evidence is the campaigns that measured both profiles (issue 34), so those runs
are judged only where the pair's campaigns never went, and the cell names both the drift (`output_len`)
and the separate campaigns."""

from __future__ import annotations

import csv
import io

import pytest
from runner_support import STREAMED_ARGS, Env, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]


LOSS = 256  # where the seed's cutedsl falls behind
WORKLOAD = ["--input-len", "128", "--output-len", "32", "--num-prompts", "8",
            "--prompts-per-concurrency", "1", "--no-warmup-pass"]


def add_profile(env: Env, name: str, backend: str) -> str:
    # Fast enough for CI (time scale 6), streamed every 16 tokens; a small start-to-start variance (0.3%,
    # not the hardware-like 1.5%): this test is about the seed's shape across concurrencies; what the grid
    # does with hardware-like variance is measured by benches/aa_emulator.py and tested on plain data in
    # tests/test_compare.py.
    return env.profile(name, backend, extra_args=STREAMED_ARGS, time_scale=6, start_sigma=0.3, run_jitter=0.3)


def grid_rows(env: Env, baseline: str, candidate: str) -> dict[tuple[int, str], dict[str, str]]:
    proc = env.run("compare", baseline, candidate, "--format", "csv")
    assert proc.returncode == 0, proc.stdout
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert rows, proc.stdout
    return {(int(r["concurrency"]), r["metric"]): r for r in rows}


def claim(row: dict, expected: str) -> bool:
    """The expected verdict, True; or False where this machine made the benchmark client the limit:
    then the grid must say so (unreliable, naming client_bound) instead of claiming anything."""
    flags = f"{row['baseline_flags']} {row['candidate_flags']}"
    if row["verdict"] == "unreliable" and "client_bound" in flags:
        return False
    assert row["verdict"] == expected, row
    return True


def test_seed_campaign_verdicts_and_the_drifted_cell(env):
    cutlass = add_profile(env, "sim-cutlass", "flashinfer_cutlass")
    cutedsl = add_profile(env, "sim-cutedsl", "flashinfer_cutedsl")
    pdir = ["--profiles-dir", str(env.profiles)]

    # The sweep both columns share, interleaved so drift falls on both alike: the control (2), the
    # seed's win (64) and its loss (256, the first concurrency past the sign change); 1 and 1024 add
    # CPU and wall time, not a new claim (a 1024 wave is 4x the requests of one at 256, six times).
    added = env.run("queue", "add", "--profiles", f"{cutlass},{cutedsl}", "--concurrency",
                    "2,64,256", "--repeats", "3", "--order", "interleaved", *pdir, *WORKLOAD)
    assert added.returncode == 0, added.stdout
    # Concurrency 10, as in the seed: the baseline was measured with a drifted output length, each side
    # in a campaign of its own. Neither campaign measured both: the cell is judged on them (the pair's
    # campaigns never reached 10) but can only be refused.
    drift = [a if a != "32" else "16" for a in WORKLOAD]
    assert env.run("queue", "add", "--profiles", cutlass, "--concurrency", "10", "--repeats", "1",
                   *pdir, *drift).returncode == 0
    assert env.run("queue", "add", "--profiles", cutedsl, "--concurrency", "10", "--repeats", "1",
                   *pdir, *WORKLOAD).returncode == 0

    done = env.run("run", *pdir, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    states = env.query("SELECT state, count(*) FROM queue_items GROUP BY state")
    # 18 sweep items + 2 at concurrency 10; concurrency 2 rides in every sweep (each cell is judged
    # against it on its own server starts), so the plan adds no control-only starts.
    assert "control: concurrency 2 runs in every sweep" in added.stdout, added.stdout
    assert states == [("done", 20)], (states, done.stdout[-4000:])
    wait_gone(env)

    rows = grid_rows(env, cutlass, cutedsl)
    throughput = {c: rows[(c, "output_throughput")] for c in (2, 10, 64, LOSS)}
    summary = {c: (r["baseline_mean"], r["candidate_mean"], r["verdict"], r["baseline_flags"],
                   r["candidate_flags"]) for c, r in throughput.items()}
    print(summary)

    # The seed's shape: ahead at 64, behind at 256, each with a verdict from 3 repeats.
    # Output throughput of one short wave at 256 is noisy on a shared 2-core machine, so the
    # verdict at 256 is read from TPOT (the decode step the backends differ in), while the
    # throughput means must still point the seed's way.
    tpot = {c: rows[(c, "mean_tpot_ms")] for c in (64, LOSS)}
    checked = [claim(throughput[64], "better")]
    for c in (LOSS,):
        checked.append(claim(tpot[c], "worse"))
        if throughput[c]["baseline_mean"] and throughput[c]["candidate_mean"]:
            assert float(throughput[c]["candidate_mean"]) < float(throughput[c]["baseline_mean"]), summary
    # A 2-core machine may make the client the limit at 256: the grid then refuses that verdict,
    # naming client_bound (checked in `claim`). At 64 the client keeps up, so at least the seed's
    # "ahead at 64" is always checked.
    assert checked[0], ("concurrency 64 must be clean enough to check", summary)
    for c in (64, LOSS):
        row = throughput[c]
        n_b = int(row["baseline_n"]) + int(row["baseline_flagged_left_out"] or 0)
        n_c = int(row["candidate_n"]) + int(row["candidate_flagged_left_out"] or 0)
        assert (n_b, n_c) == (3, 3), row  # every planned repeat is in the cell, clean or set aside
    # The seed at 256: 516 / 719 = 0.72 of the baseline's throughput (decode steps 339 vs 480 ms).
    if tpot[LOSS]["baseline_mean"] and tpot[LOSS]["candidate_mean"]:
        step_ratio = float(tpot[LOSS]["baseline_mean"]) / float(tpot[LOSS]["candidate_mean"])
        assert 0.6 < step_ratio < 0.82, step_ratio

    # The drifted cell: no delta, the reason names output_len with both values, and the separate campaigns.
    cell = throughput[10]
    assert cell["delta"] == "" and cell["verdict"] == "refused", cell
    assert "output_len: 16 vs 32" in cell["reasons"], cell
    assert "measured in separate campaigns" in cell["reasons"], cell

    # The low-concurrency control check agrees (both backends are alike at batch 1-2).
    text = env.run("compare", cutlass, cutedsl).stdout
    assert "environment differs" not in text.lower(), text
    assert "output_len: 16 vs 32" in text
