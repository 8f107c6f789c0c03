"""What the emulator writes: SGLang-looking log lines, the generated text bank, Prometheus metrics.

- `log` / `log_raw`: lines like SGLang's (`[2026-12-01 09:00:00 TP0 EP0] message`), flushed per
  line so the parent (moe-tui's lifecycle) reads phases live.
- `TextBank`: one seeded stream of token ids and their pre-escaped decoded text, sliced per request.
- `Histogram` / `Metrics`: the counters and histograms `/metrics` renders under SGLang's names
  (srt/observability/metrics_collector.py in SGLang 0.5.23).
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from itertools import accumulate

from tokenizers import Tokenizer

# ---------------------------------------------------------------------------------------------
# Logging: SGLang-looking lines on stdout, flushed per line so a parent sees them live.


def log(message: str, prefix: str = "", level: str = "") -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    lvl = f" {level}" if level else ""
    sys.stdout.write(f"[{stamp}{prefix}]{lvl} {message}\n")
    sys.stdout.flush()


def log_raw(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# Output text: one long pseudo-random token stream, pre-decoded and pre-escaped once.


class TextBank:
    """Token ids a request 'generates' and their decoded text, sliced rather than rebuilt.

    Every request reads a window of one seeded stream of ids, `SIZE` long, kept as `BLOCK`-token
    blocks. All are built at start, before the server is ready: built on first use instead (cheaper:
    a short run reads a few), a request that reached a new block paid for it on the engine's loop,
    and the first runs of each server start measured that (the seed campaign's control at
    concurrency 2 moved with it under load). The tokenizer decodes
    WordLevel ids by joining words with single spaces, so a window's decoded text is a slice of
    " word" pieces (minus the first space); each word is JSON-escaped once.
    """

    SIZE = 1 << 17
    BLOCK = 1 << 10

    def __init__(self, tokenizer: Tokenizer, seed: int = 0) -> None:
        specials = {"<unk>", "<s>", "</s>", "<pad>"}
        words = sorted((i, w) for w, i in tokenizer.get_vocab().items() if w not in specials)
        escaped = {i: json.dumps(" " + w)[1:-1] for i, w in words}
        as_csv = {i: f"{i}," for i, _ in words}
        ids = random.Random(seed).choices([i for i, _ in words], k=self.SIZE)
        self._blocks: list[_Block] = []
        for start in range(0, self.SIZE, self.BLOCK):
            block_ids = ids[start:start + self.BLOCK]
            text_parts = [escaped[i] for i in block_ids]
            id_parts = [as_csv[i] for i in block_ids]
            self._blocks.append(_Block(block_ids, "".join(text_parts), "".join(id_parts),
                                       list(accumulate(map(len, text_parts), initial=0)),
                                       list(accumulate(map(len, id_parts), initial=0))))

    def _windows(self, offset: int, count: int) -> list[tuple[_Block, int, int]]:
        """(block, start, end) pieces covering `count` tokens from `offset`, wrapping at SIZE."""
        out = []
        offset %= self.SIZE
        while count > 0:
            k, start = divmod(offset, self.BLOCK)
            take = min(count, self.BLOCK - start)
            out.append((self._blocks[k], start, start + take))
            count -= take
            offset = (offset + take) % self.SIZE
        return out

    def text_json(self, offset: int, count: int) -> str:
        """JSON-escaped decoded text of `count` tokens from `offset` (no surrounding quotes)."""
        return "".join(b.text[b.text_pos[i]:b.text_pos[j]] for b, i, j in self._windows(offset, count))[1:]

    def ids_csv(self, offset: int, count: int) -> str:
        return "".join(b.id_csv[b.id_pos[i]:b.id_pos[j]] for b, i, j in self._windows(offset, count))[:-1]

    def token_ids(self, offset: int, count: int) -> list[int]:
        return [t for b, i, j in self._windows(offset, count) for t in b.ids[i:j]]


@dataclass(frozen=True)
class _Block:
    ids: list[int]
    text: str  # the ids' escaped " word" pieces, joined
    id_csv: str  # "id," pieces, joined
    text_pos: list[int]  # where each piece starts in `text` (and where the last ends)
    id_pos: list[int]


# ---------------------------------------------------------------------------------------------
# Metrics


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: list[float]) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.sum += value * times
        self.count += times
        for i, le in enumerate(self.buckets):
            if value <= le:
                self.counts[i] += times
                break

    def render(self, labels: str) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for le, c in zip(self.buckets, self.counts):
            running += c
            out.append(f'{self.name}_bucket{{{labels},le="{le}"}} {running}')
        out.append(f'{self.name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{self.name}_sum{{{labels}}} {self.sum}")
        out.append(f"{self.name}_count{{{labels}}} {self.count}")
        return out


LATENCY_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0,
                   80.0, 120.0, 160.0, 240.0, 480.0, 960.0, 1920.0, 3840.0]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
               0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]


@dataclass
class Metrics:
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    num_requests_total: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(
        "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
        LATENCY_BUCKETS))
    cached_tokens_total: int = 0
    cache_hit_rate: float = 0.0  # of the last prefill batch, as SGLang's gauge
    itl: Histogram = field(default_factory=lambda: Histogram(
        "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
        ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(
        "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
        LATENCY_BUCKETS))


