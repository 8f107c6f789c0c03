"""Agreement: moe-tui's client and sglang.bench_serving (unmodified, 0.5.23) measure the same run alike.

One spec per API (/generate and /v1/completions), twin emulators (same seed, no noise), both clients at
once, one on each (`both_clients`): whatever load the machine is under falls on both alike, where
in turn a busy box's changing load had moved one run's TPOT 1.4-2.9% from the other's beside a
second `make test`. Output throughput, mean TTFT, mean
TPOT and mean ITL must agree within 2 % and completed counts (and the drawn prompt lengths) must be
equal. The emulator runs tests/agreement_backends.toml 10x slowed (3 s prefill, flat 600 ms decode steps) at
concurrency 1, because:
- at concurrency > 1 the batch schedule depends on sub-millisecond arrival phases, so two runs of
  the *same* client already differ by a few percent (measured: TTFT -4 %..+8 % at concurrency 2-8);
- the two clients differ by a few ms per request in how early they stamp chunks (bench_serving
  opens a new aiohttp session and connection per request); long modelled times keep that < 1 %.
bench_serving_args adds `--tokenize-prompt` for the generate API, so the server receives token ids, as
from our client (the random-ids spec means exact ids; without it bench_serving sends decoded text).

`test_token_counts_agree_under_chunk_merging` runs both APIs at concurrency 4 with the emulator
merging chunks as SGLang's tokenizer manager does under load (`--sim-merge-chunks-above 2`): token
totals must be equal, and the figures that depend on counting (mean TPOT; mean ITL) within 0.5 %.
Output throughput and E2E latency are not compared there: they share those exact token totals but
also hold each request's wait for the engine's next step boundary (up to one 600 ms step of ~9,
set by where each client's arrivals fall: measured 0.1-3 % apart on a loaded 2-core box, either
sign); the concurrency-1 test compares them on both APIs. Mean ITL is
compared on /generate only: on /v1/completions bench_serving's ITL is the gap between chunks
whatever their token count (`async_request_openai_completions`), so under merging it is a
per-chunk figure and moe-tui's per-token ITL is lower by design.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from moe_tui.spec import BenchmarkSpec
from tests.support.agreement import assert_agree, both_clients

pytestmark = pytest.mark.integration  # starts real processes

BACKENDS_FILE = Path(__file__).with_name("agreement_backends.toml")
AGREE = 0.02
# Modelled times 10x longer than the backends file's (3 s prefill, 600 ms decode steps) and 3
# prompts, not 8: on a loaded 2-core box bench_serving's heavier per-request client work (a session
# and connection per request) grew by ~14 ms a request beside 8 busy loops, 4.5% of a 300 ms TTFT,
# and its output throughput was 2.35% below ours at 5x beside a second test; at 10x such costs stay
# near 1%, so the 2% bound keeps its meaning on a busy machine.
SLOWER = 0.1
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")


@pytest.mark.slow
@pytest.mark.sglang_client
@pytest.mark.parametrize("api", ["generate", "completions"])
def test_native_client_agrees_with_bench_serving(sglang_client, tmp_path, api):
    spec = BenchmarkSpec(api=api, input_len=64, output_len=8, range_ratio=0.5, num_prompts=3, max_concurrency=1,
                         seed=42, warmup_requests=1, flush_cache=True)
    # readiness (/health_generate) itself waits on a 3 s modelled prefill: time for it on a busy box
    ours, theirs = both_clients(spec, ["--sim-backends-file", str(BACKENDS_FILE), "--sim-seed", "1",
                                       "--sim-time-scale", str(SLOWER)], sglang_client,
                                tmp_path / "bench_serving.jsonl", timeout=120)

    assert ours.status == "complete", ours.error
    assert ours.summary["completed"] == theirs["completed"] == spec.num_prompts
    # the same workload: prompt lengths as drawn, in order, and the same token totals
    assert [r["prompt_len"] for r in ours.requests] == theirs["input_lens"]
    assert ours.summary["total_input_tokens"] == theirs["total_input_tokens"]
    assert ours.summary["total_output_tokens"] == theirs["total_output_tokens"]
    assert_agree(ours.summary, theirs, dict.fromkeys(METRICS, AGREE))


MERGE_AGREE = 0.005
# Steps of 600 ms (not 200): a loaded box's late reads moved mean TPOT by ~4 ms (2% of a 200 ms
# step) beside 8 busy loops; half the prompts and outputs keep the wall time near what it was.
STEP_MS, PROMPTS, OUT = 600.0, 8, 8


@pytest.mark.slow
@pytest.mark.sglang_client
@pytest.mark.parametrize("api", ["generate", "completions"])
def test_token_counts_agree_under_chunk_merging(sglang_client, tmp_path, api):
    spec = BenchmarkSpec(api=api, input_len=64, output_len=OUT, range_ratio=1.0, num_prompts=PROMPTS, max_concurrency=4,
                         seed=42, warmup_requests=1, flush_cache=True)
    # No prefill cost: at concurrency > 1 a 300 ms prefill step lands wherever the arrivals fall, so
    # two clients' schedules would differ by ~10 %; with flat steps only the counting and
    # the arrival phase against the step grid differ.
    flat = tmp_path / "flat.toml"
    flat.write_text(f'[backends.default]\nprefill_ms_per_token = 0.0\npoints = [[1, {STEP_MS}], [1024, {STEP_MS}]]\n')
    ours, theirs = both_clients(spec, ["--sim-backends-file", str(flat), "--sim-seed", "1", "--sim-exact",
                                       "--sim-merge-chunks-above", "2"], sglang_client, tmp_path / "bench_serving.jsonl")
    assert ours.status == "complete", ours.error
    assert ours.summary["total_output_tokens"] == theirs["total_output_tokens"] == PROMPTS * OUT
    # the emulator did merge: fewer chunks than tokens reached our client
    assert sum(r["chunks"] for r in ours.requests) < PROMPTS * OUT
    limits = {"mean_tpot_ms": MERGE_AGREE}
    if api == "generate":
        limits["mean_itl_ms"] = MERGE_AGREE
    assert_agree(ours.summary, theirs, limits)
