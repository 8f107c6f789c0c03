"""The emulator's prefix (radix) cache: the tree itself on plain data, then the real emulator over
HTTP driven by moe-tui's own benchmark client: a repeat of the same prompts without a flush
measures faster than the same repeat after `/flush_cache`, and `/metrics` counts the hits under
SGLang's names."""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from moe_tui.bench.engine import run_benchmark
from moe_tui.sim.launch import start_sim
from moe_tui.sim.prefix_cache import RadixCache
from moe_tui.spec import BenchmarkSpec


def test_longest_prefix_match_leaves_the_last_token_to_compute():
    cache = RadixCache(capacity=1000)
    assert cache.match([1, 2, 3]) == 0
    assert cache.insert([1, 2, 3, 4, 5]) == 5
    assert cache.match([1, 2, 3, 4, 5]) == 4  # SGLang always computes the last prompt token
    assert cache.match([1, 2, 3, 9, 9]) == 3
    assert cache.match([7, 1, 2]) == 0
    assert cache.insert([1, 2, 3, 9, 9, 9]) == 3  # edge split at 3: only the new tail is stored
    assert cache.size == 8
    assert cache.match([1, 2, 3, 9, 9, 9, 4]) == 6 and cache.match([1, 2, 3, 4, 5, 6]) == 5


def test_reset_empties_and_capacity_evicts_least_recently_used():
    cache = RadixCache(capacity=10)
    cache.insert([1, 2, 3, 4, 5])
    cache.insert([6, 7, 8, 9, 10])
    cache.match([1, 2, 3, 4, 5, 0])  # touches the first prompt
    cache.insert([11, 12, 13])  # over capacity: the least recently used leaf goes
    assert cache.size <= 10
    assert cache.match([1, 2, 3, 4, 5, 0]) == 5 and cache.match([6, 7, 8, 9, 10, 0]) == 0
    cache.reset()
    assert cache.size == 0 and cache.match([1, 2, 3, 4, 5, 0]) == 0


# Long prompts, short outputs: prefill is most of each request, so skipping it shows.
SPEC = BenchmarkSpec(api="generate", input_len=3000, output_len=4, range_ratio=1.0, num_prompts=12,
                     max_concurrency=2, warmup_requests=0, seed=5)
# Real time (1x): a prompt's modelled prefill (~180 ms) lasts 180 ms, far above a loaded machine's
# late wake-ups, which at 20x (9 ms) could blur warm against cold, and at 4x (45 ms) still did beside
# a second `make test` (warm TTFT 67 ms against cold 101 ms).
ARGS = ["--sim-time-scale", "1", "--enable-metrics", "--sim-exact", "--chunked-prefill-size", "4096"]


def _cached_total(base_url: str) -> float:
    text = urllib.request.urlopen(base_url + "/metrics", timeout=5).read().decode()
    m = re.search(r'^sglang:cached_tokens_total\{[^}]*cache_source="device"\} ([0-9.e+-]+)$', text, re.M)
    assert m, "sglang:cached_tokens_total missing from /metrics"
    assert re.search(r"^sglang:cache_hit_rate\{[^}]*\} [0-9.e+-]+$", text, re.M)
    return float(m.group(1))


def _bench(url: str, flush: bool):
    result = asyncio.run(run_benchmark(SPEC.replace(flush_cache=flush), url, warmup_pause_s=0.0))
    assert result.status == "complete", result.error
    return result.summary


@pytest.mark.integration
def test_repeats_without_flush_measure_faster_than_with_flush():
    with start_sim(ARGS) as sim:
        _bench(sim.base_url, flush=True)  # fills the cache with these prompts
        hits_before = _cached_total(sim.base_url)
        warm = _bench(sim.base_url, flush=False)  # same prompts: every prefix is cached
        hits_warm = _cached_total(sim.base_url) - hits_before
        cold = _bench(sim.base_url, flush=True)  # same prompts after a flush: nothing cached
        hits_cold = _cached_total(sim.base_url) - hits_before - hits_warm
    assert hits_warm == SPEC.num_prompts * (SPEC.input_len - 1)
    assert hits_cold == 0
    # 3000 prompt tokens of prefill (~180 modelled ms) vs one decode step: TTFT falls by far more
    # than any scheduling noise, and the whole run gets shorter.
    assert warm["mean_ttft_ms"] < 0.6 * cold["mean_ttft_ms"], (warm["mean_ttft_ms"], cold["mean_ttft_ms"])
    assert warm["output_throughput"] > 1.1 * cold["output_throughput"]


@pytest.mark.integration
def test_disable_radix_cache_never_hits():
    with start_sim(ARGS + ["--disable-radix-cache"]) as sim:
        _bench(sim.base_url, flush=False)
        _bench(sim.base_url, flush=False)
        assert _cached_total(sim.base_url) == 0
