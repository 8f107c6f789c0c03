"""Tokens counted as the server says it sent them, under the load where SGLang merges chunks.

The emulator's `--sim-merge-chunks-above N` sends, with more than N running requests, a stream's
queued outputs as one chunk of several tokens, as SGLang's tokenizer manager coalesces them
(tokenizer_manager.py). moe-tui's client asks for per-chunk usage on /v1/completions
(`stream_options.continuous_usage_stats`) and reads `meta_info.completion_tokens` on /generate, so
its token totals stay exact while a chunk counter would read low."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from moe_tui.bench.process import run_benchmark_subprocess
from moe_tui.sim.launch import FAST_START, start_sim
from moe_tui.spec import BenchmarkSpec
from tests.support import loopback

pytestmark = pytest.mark.integration  # starts real processes

BACKENDS_FILE = Path(__file__).parent.parent / "agreement_backends.toml"
MERGE = ["--sim-backends-file", str(BACKENDS_FILE), "--sim-exact", "--sim-time-scale", "4",
         "--sim-merge-chunks-above", "2", *FAST_START]


def _chunks_without_usage(base_url: str, concurrency: int, output_len: int) -> list[tuple[int, int]]:
    """(text chunks, usage tokens) per stream of `concurrency` plain /v1/completions streams at once."""
    async def one(client: httpx.AsyncClient) -> tuple[int, int]:
        body = {"prompt": list(range(1, 33)), "max_tokens": output_len, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        texts, usage = 0, 0
        async with client.stream("POST", base_url + "/v1/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: {"):
                    msg = json.loads(line[6:])
                    texts += bool(msg["choices"] and msg["choices"][0]["text"])
                    usage = (msg.get("usage") or {}).get("completion_tokens") or usage
        return texts, usage

    async def main() -> list[tuple[int, int]]:
        async with loopback.AsyncClient(timeout=60) as client:
            return list(await asyncio.gather(*(one(client) for _ in range(concurrency))))
    return asyncio.run(main())


def test_merged_chunks_would_undercount_a_chunk_counter():
    with start_sim(MERGE) as sim:
        streams = _chunks_without_usage(sim.base_url, 8, 24)
    assert all(usage == 24 for _, usage in streams)
    # 8 running > 2: chunks carry ~4 tokens each, so counting chunks reads far below 24.
    assert max(chunks for chunks, _ in streams) < 24 * 0.6, streams


@pytest.mark.parametrize("api", ["completions", "generate"])
def test_client_counts_every_token_under_merging(api):
    spec = BenchmarkSpec(api=api, input_len=32, output_len=24, range_ratio=1.0, num_prompts=16, max_concurrency=8,
                         seed=7, warmup_requests=1)
    with start_sim(MERGE) as sim:
        result = asyncio.run(run_benchmark_subprocess(spec, sim.base_url))
    assert result.status == "complete", result.error
    assert result.summary["completed"] == 16
    assert result.summary["total_output_tokens"] == 16 * 24
    assert all(r["output_len"] == 24 for r in result.requests)
    # merging did happen in this run: fewer chunks than tokens on the streams
    assert sum(r["chunks"] for r in result.requests) < 16 * 24 * 0.6
