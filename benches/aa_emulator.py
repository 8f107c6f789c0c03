"""A/A and power check of the comparison grid against the real emulator, over many seeds.

For each seed: a fresh store, three emulator profiles with the emulator's hardware-like variance
(a per-start performance factor, slow drift within a start, per-run jitter: `--sim-start-sigma`,
`--sim-drift-sigma`, `--sim-run-jitter`, defaults 1.5% / 0.3% per sqrt(min) / 0.5%; optional
per-step noise `--sim-noise-pct`, default off):
  A1, A2  the same backend model (an A/A pair: every better/worse verdict is false)
  B       a model whose decode steps are 15% faster (a real +15% throughput difference)
and one campaign, interleaved, 5 repeats at concurrency 1, 8 and 64, worked by `moe-tui run`.
It reads `moe-tui compare --format csv` for A1 vs A2 and A1 vs B and reports:
  - the share of A/A cells with a false better/worse (target <= 5%) and every state they got,
  - the share of seeds where B is called "better" on output throughput at concurrency 64
    (target >= 80%).
The same checks on plain data (a noise model, thousands of seeds) run in tests/test_compare.py;
this script shows the statistics hold on measured runs. It takes about a minute per seed.

    .venv/bin/python benches/aa_emulator.py --seeds 10
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BACKENDS = """
[backends.default]
prefill_ms_per_token = 0.06
points = [[1, 100.0], [8, 140.0], [64, 300.0], [1024, 900.0]]

# The A/A model (used by A1 and A2).
[backends.triton]
prefill_ms_per_token = 0.06
points = [[1, 100.0], [8, 140.0], [64, 300.0], [1024, 900.0]]

# 15% more output throughput at every batch size: steps take 1/1.15 as long.
[backends.cutlass]
prefill_ms_per_token = 0.06
points = [[1, 86.96], [8, 121.74], [64, 260.87], [1024, 782.61]]
"""

PROFILE = """
name = "{name}"
engine = "sim"
model_path = "aa-model"
moe_runner_backend = "{backend}"
port = {port}
startup_timeout_s = 30
extra_args = ["--stream-interval", "4"]

[sim]
time_scale = 10
load_seconds = 0.2
graph_seconds = 0.1
warmup_seconds = 0.1
noise_pct = {noise}
start_sigma = {start_sigma}
drift_sigma = {drift_sigma}
run_jitter = {run_jitter}
backends_file = "{backends}"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def moe_tui(env: dict, *args: str, timeout: float = 1800) -> str:
    proc = subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, cwd=REPO, text=True,
                          capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"moe-tui {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def one_seed(seed: int, noise: float, repeats: int, variance: dict, order: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="aa-") as tmp:
        tmp_path = Path(tmp)
        backends = tmp_path / "backends.toml"
        backends.write_text(BACKENDS)
        profiles = tmp_path / "profiles"
        profiles.mkdir()
        # No [sim] seed: every server start draws fresh noise, so repeats are independent samples
        # (a fixed seed would replay the same noise at every restart of a profile).
        for name, backend in (("A1", "triton"), ("A2", "triton"), ("B", "cutlass")):
            (profiles / f"{name}.toml").write_text(PROFILE.format(
                name=name, backend=backend, port=free_port(), noise=noise, backends=backends, **variance))
        env = {**os.environ, "MOE_TUI_HOME": str(tmp_path / "home")}
        moe_tui(env, "queue", "add", "--profiles", "A1,A2,B", "--concurrency", "1,8,64", "--repeats",
                str(repeats), "--order", order, "--profiles-dir", str(profiles),
                "--input-len", "64", "--output-len", "32", "--num-prompts", "8",
                "--prompts-per-concurrency", "2", "--seed", str(seed))
        moe_tui(env, "run", "--profiles-dir", str(profiles))
        aa = list(csv.DictReader(io.StringIO(moe_tui(env, "compare", "A1", "A2", "--format", "csv"))))
        ab = list(csv.DictReader(io.StringIO(moe_tui(env, "compare", "A1", "B", "--format", "csv"))))
    verdicts = [r["verdict"] for r in aa]
    call64 = next(r["verdict"] for r in ab if r["concurrency"] == "64" and r["metric"] == "output_throughput")
    return {"seed": seed, "aa_cells": len(verdicts), "aa_within_noise": verdicts.count("within noise"),
            # A false call is a better/worse verdict on an A/A pair; other states claim nothing.
            "aa_false_calls": [(r["concurrency"], r["metric"], r["verdict"]) for r in aa
                               if r["verdict"] in ("better", "worse")],
            "aa_states": {v: verdicts.count(v) for v in sorted(set(verdicts))},
            "b_call_at_64": call64}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--noise-pct", type=float, default=0.0, help="per-step noise (default off)")
    parser.add_argument("--start-sigma", type=float, default=1.5)
    parser.add_argument("--drift-sigma", type=float, default=0.3)
    parser.add_argument("--run-jitter", type=float, default=0.5)
    parser.add_argument("--order", default="interleaved", choices=("interleaved", "grouped", "alternating"))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    started = time.time()
    results = []
    for seed in range(args.seeds):
        variance = {"start_sigma": args.start_sigma, "drift_sigma": args.drift_sigma,
                    "run_jitter": args.run_jitter}
        r = one_seed(seed, args.noise_pct, args.repeats, variance, args.order)
        results.append(r)
        print(json.dumps(r), flush=True)
    cells = sum(r["aa_cells"] for r in results)
    within = sum(r["aa_within_noise"] for r in results)
    false = sum(len(r["aa_false_calls"]) for r in results)
    states: dict[str, int] = {}
    for r in results:
        for k, v in r["aa_states"].items():
            states[k] = states.get(k, 0) + v
    called = sum(r["b_call_at_64"] == "better" for r in results)
    load = os.getloadavg()
    lines = [
        f"# A/A and power on the emulator ({dt.date.today().isoformat()})",
        "",
        f"seeds {args.seeds}, variance: start sigma {args.start_sigma}%, drift sigma {args.drift_sigma}%/sqrt(min), "
        f"run jitter {args.run_jitter}%, per-step noise {args.noise_pct}%; {args.repeats} repeats per side, "
        f"concurrency 1/8/64, {args.order}; {time.time() - started:.0f} s; load average at end "
        f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} on {os.cpu_count()} CPUs",
        "",
        f"- A/A cells with a false better/worse: {false}/{cells} = {100 * false / max(cells, 1):.1f}% (target <= 5%)",
        f"- A/A cells within noise: {within}/{cells} = {100 * within / max(cells, 1):.1f}%; every A/A state: "
        + ", ".join(f"{k} {v}" for k, v in states.items()),
        f"- +15% model called 'better' at concurrency 64: {called}/{len(results)} = "
        f"{100 * called / max(len(results), 1):.0f}% of seeds (target >= 80%)",
        "",
        "Per seed:",
        "",
        *[f"- seed {r['seed']}: A/A {r['aa_within_noise']}/{r['aa_cells']} within noise, {len(r['aa_false_calls'])} false"
          f"{' (false: ' + ', '.join('/'.join(x) for x in r['aa_false_calls']) + ')' if r['aa_false_calls'] else ''};"
          f" B at 64: {r['b_call_at_64']}" for r in results],
    ]
    suffix = "" if args.order == "interleaved" else f"-{args.order}"
    out = REPO / "benches" / "results" / f"aa_emulator{suffix}-{dt.date.today().isoformat()}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
