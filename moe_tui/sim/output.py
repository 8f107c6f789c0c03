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


def randrange_draws(rng: random.Random, n: int, count: int) -> list[int]:
    """`[rng.randrange(n) for _ in range(count)]`, the same values, in a third of the time (every
    emulator start draws 131k): CPython's randrange keeps the top `n.bit_length()` bits of one 32-bit
    word of the generator and draws again when they reach `n`; here the words come in bulk."""
    shift, out = 32 - n.bit_length(), list[int]()
    while len(out) < count:
        words = count - len(out) + 64  # a few spare: each is refused with probability under 1/2
        block = memoryview(rng.getrandbits(32 * words).to_bytes(4 * words, "little")).cast("I")
        out += [r for w in block if (r := w >> shift) < n]
    del out[count:]
    return out


class TextBank:
    """Token ids a request 'generates' and their decoded text, sliced rather than rebuilt.

    Every request reads a window of one seeded stream of ids. The tokenizer decodes WordLevel
    ids by joining words with single spaces, so the decoded text of a window is a slice of one
    long string of " word" pieces (minus the first space); JSON escaping is done once up front.
    """

    SIZE = 1 << 17

    def __init__(self, tokenizer: Tokenizer, seed: int = 0) -> None:
        # Built at every emulator start (~130k tokens): each word is escaped once, not once per
        # occurrence, and the offsets are running sums; the seeded draws are the same as ever.
        # Whole, before the server is ready: built in pieces on first use (tried in wave 12), a
        # request paid for its piece on the engine's loop and the seed campaign's control moved.
        vocab = tokenizer.get_vocab()
        specials = {"<unk>", "<s>", "</s>", "<pad>"}
        words = sorted((i, w) for w, i in vocab.items() if w not in specials)
        word_ids = [i for i, _ in words]
        picks = randrange_draws(random.Random(seed), len(word_ids), self.SIZE)  # indices into `words`
        self.ids = list(map(word_ids.__getitem__, picks))
        escaped = [json.dumps(" " + w)[1:-1] for _, w in words]
        as_csv = [f"{i}," for i in word_ids]
        text_parts = list(map(escaped.__getitem__, picks))
        id_parts = list(map(as_csv.__getitem__, picks))
        self.text = "".join(text_parts)
        self.id_csv = "".join(id_parts)
        self.text_pos = list(accumulate(map(len, text_parts), initial=0))
        self.id_pos = list(accumulate(map(len, id_parts), initial=0))

    def _slices(self, offset: int, count: int, data: str, pos: list[int]) -> str:
        parts = []
        while count > 0:
            take = min(count, self.SIZE - offset)
            parts.append(data[pos[offset]:pos[offset + take]])
            count -= take
            offset = 0
        return "".join(parts)

    def text_json(self, offset: int, count: int) -> str:
        """JSON-escaped decoded text of `count` tokens from `offset` (no surrounding quotes)."""
        return self._slices(offset, count, self.text, self.text_pos)[1:]

    def ids_csv(self, offset: int, count: int) -> str:
        return self._slices(offset, count, self.id_csv, self.id_pos)[:-1]

    def token_ids(self, offset: int, count: int) -> list[int]:
        return [self.ids[(offset + i) % self.SIZE] for i in range(count)]


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


