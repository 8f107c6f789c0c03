"""Agreement: moe-tui's client and sglang.bench_serving (unmodified, 0.5.23) measure the same run alike.

One spec, one emulator (seeded, no noise), both clients in turn; output throughput, mean TTFT, mean
TPOT and mean ITL must agree within 2 % and completed counts (and the drawn prompt lengths) must be
equal. The emulator runs tests/agreement_backends.toml (300 ms prefill, flat 60 ms decode steps) at
concurrency 1, because:
- at concurrency > 1 the batch schedule depends on sub-millisecond arrival phases, so two runs of
  the *same* client already differ by a few percent (measured: TTFT -4 %..+8 % at concurrency 2-8);
- the two clients differ by a few ms per request in how early they stamp chunks (bench_serving
  opens a new aiohttp session and connection per request); long modelled times keep that < 1 %.
bench_serving_args adds `--tokenize-prompt` for the generate API, so the server receives token ids, as
from our client (the random-ids spec means exact ids; without it bench_serving sends decoded text).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from moe_tui.bench.process import run_benchmark_subprocess
from moe_tui.bench.sglang_adapter import bench_serving_args, client_env, parse_bench_serving_jsonl
from moe_tui.sim.launch import start_sim
from moe_tui.spec import BenchmarkSpec

pytestmark = pytest.mark.integration  # starts real processes

BACKENDS_FILE = Path(__file__).with_name("agreement_backends.toml")
AGREE = 0.02
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")


@pytest.mark.slow
@pytest.mark.sglang_client
def test_native_client_agrees_with_bench_serving(sglang_client, tmp_path):
    spec = BenchmarkSpec(input_len=64, output_len=8, range_ratio=0.5, num_prompts=8, max_concurrency=1,
                         seed=42, warmup_requests=1, flush_cache=True)
    with start_sim(["--sim-backends-file", str(BACKENDS_FILE), "--sim-seed", "1"]) as sim:
        ours = asyncio.run(run_benchmark_subprocess(spec, sim.base_url))
        out = tmp_path / "bench_serving.jsonl"
        argv = sglang_client.argv_prefix + bench_serving_args(
            spec.replace(client="sglang.bench_serving"), base_url=sim.base_url, output_file=out,
            output_details=True)
        proc = subprocess.run(argv, env=client_env(client=sglang_client), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    theirs = parse_bench_serving_jsonl(out)[-1]

    assert ours.status == "complete", ours.error
    assert ours.summary["completed"] == theirs["completed"] == spec.num_prompts
    # the same workload: prompt lengths as drawn, in order, and the same token totals
    assert [r["prompt_len"] for r in ours.requests] == theirs["input_lens"]
    assert ours.summary["total_input_tokens"] == theirs["total_input_tokens"]
    assert ours.summary["total_output_tokens"] == theirs["total_output_tokens"]
    report = []
    for name in METRICS:
        a, b = ours.summary[name], theirs[name]
        report.append(f"{name}: moe-tui {a:.3f} bench_serving {b:.3f} ({(a - b) / b:+.2%})")
    for name in METRICS:
        a, b = ours.summary[name], theirs[name]
        assert abs(a - b) <= AGREE * abs(b), "\n".join(report)
