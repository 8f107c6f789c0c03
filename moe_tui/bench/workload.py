"""The requests a BenchmarkSpec stands for: prompts, lengths and arrival times, seeded.

`random-ids` is sglang 0.5.23's dataset of that name (`sglang/benchmark/datasets/random.py` with
`--tokenize-prompt`), drawn from numpy's legacy global generator seeded with the spec's seed, in
bench_serving's order:
  1. input lengths: uniform integers on [max(int(input_len * ratio), 1), input_len];
  2. output lengths: the same with output_len;
  3. one offset per prompt, uniform on [0, vocab_size);
  prompt i is the token ids (offset_i + i + j) mod vocab_size for j < its length;
  4. for a finite request rate, one exponential inter-arrival gap (mean 1/rate) after each request,
     in request order (bench_serving draws them lazily from the same generator, after the dataset).
The server receives these exact ids (no decode/re-encode, which changes lengths: sglang #15732).
`vocab_size` is the tokenizer's base vocabulary (HF `tokenizer.vocab_size`, i.e. without added
tokens), which bench_serving reads from the served model's tokenizer; `resolve_vocab_size` finds it.

Arrival times are absolute offsets from the start of the timed phase (cumulative gaps), so sleep
overshoot does not accumulate the way chained sleeps do. The last gap also elapses before the
timed phase can end, as in bench_serving (its generator sleeps after the last request).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from moe_tui.spec import BenchmarkSpec

if TYPE_CHECKING:
    import aiohttp

# bench_serving sends warmup requests as copies of request 0 with at most this many output tokens.
WARMUP_MAX_OUTPUT_TOKENS = 32


class WorkloadError(ValueError):
    """The workload cannot be built (bad seed, unknown vocabulary size); the message says why."""


@dataclass(frozen=True)
class WorkItem:
    """One request of the workload; its prompt ids are made on demand (they can be large)."""

    idx: int
    offset: int
    prompt_len: int
    output_len: int
    vocab_size: int

    def input_ids(self) -> list[int]:
        return ((self.offset + self.idx + np.arange(self.prompt_len, dtype=np.int64)) % self.vocab_size).tolist()


@dataclass(frozen=True)
class Workload:
    items: tuple[WorkItem, ...]
    arrivals: tuple[float, ...]  # seconds after the timed phase starts; all 0.0 for rate inf
    tail_s: float  # when the arrival process ends (last arrival + the gap drawn after it)
    vocab_size: int

    def warmup_item(self) -> WorkItem:
        first = self.items[0]
        return WorkItem(first.idx, first.offset, first.prompt_len,
                        min(first.output_len, WARMUP_MAX_OUTPUT_TOKENS), first.vocab_size)


def _lengths(rng: np.random.RandomState, full_len: int, ratio: float, n: int) -> list[int]:
    lengths: list[int] = rng.randint(max(int(full_len * ratio), 1), full_len + 1, size=n).tolist()
    return lengths


def build_workload(spec: BenchmarkSpec, vocab_size: int) -> Workload:
    if spec.dataset != "random-ids":
        raise WorkloadError(f"dataset {spec.dataset!r} is not supported (only random-ids)")
    if not isinstance(vocab_size, int) or vocab_size < 1:
        raise WorkloadError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    rng = np.random.RandomState(spec.seed)
    n = spec.num_prompts
    input_lens = _lengths(rng, spec.input_len, spec.range_ratio, n)
    output_lens = _lengths(rng, spec.output_len, spec.range_ratio, n)
    offsets = rng.randint(0, vocab_size, size=n).tolist()
    items = tuple(WorkItem(i, offsets[i], input_lens[i], output_lens[i], vocab_size) for i in range(n))
    if math.isinf(spec.request_rate):
        arrivals = (0.0,) * n
        tail = 0.0
    else:
        gaps = rng.exponential(1.0 / spec.request_rate, size=n)
        cumulative = np.concatenate(([0.0], np.cumsum(gaps)))
        arrivals = tuple(float(x) for x in cumulative[:n])
        tail = float(cumulative[n])
    return Workload(items, arrivals, tail, vocab_size)


def vocab_size_from_tokenizer(path: str | Path) -> int:
    """Base vocabulary size of a HF tokenizer directory or tokenizer.json file."""
    from tokenizers import Tokenizer

    p = Path(path).expanduser()
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise WorkloadError(f"tokenizer {path}: no tokenizer.json there")
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise WorkloadError(f"tokenizer {file}: cannot be read: {exc}") from None
    return int(tok.get_vocab_size(with_added_tokens=False))


async def resolve_vocab_size(session: aiohttp.ClientSession, base_url: str, tokenizer: str | None = None) -> tuple[int, str]:
    """The vocabulary size and where it came from: --tokenizer, else the server's /model_info
    tokenizer_path (or model_path) when that is a local directory, as bench_serving does."""
    if tokenizer:
        return vocab_size_from_tokenizer(tokenizer), f"tokenizer {tokenizer}"
    import aiohttp

    async with session.get(f"{base_url}/model_info", timeout=aiohttp.ClientTimeout(total=10.0)) as response:
        if response.status != 200:
            raise WorkloadError(f"{base_url}/model_info answered HTTP {response.status}")
        body = await response.read()
    try:
        info = json.loads(body)
    except ValueError:
        raise WorkloadError(f"{base_url}/model_info answered something that is not JSON: {body[:200]!r}") from None
    if not isinstance(info, dict):
        raise WorkloadError(f"{base_url}/model_info answered {type(info).__name__}, not a JSON object")
    for key in ("tokenizer_path", "model_path"):
        candidate = info.get(key)
        if candidate and (Path(candidate).expanduser() / "tokenizer.json").is_file():
            return vocab_size_from_tokenizer(candidate), f"/model_info {key} {candidate}"
    raise WorkloadError(
        f"cannot find the served model's tokenizer from {base_url}/model_info "
        f"({json.dumps({k: info.get(k) for k in ('tokenizer_path', 'model_path')})}); "
        "pass --tokenizer PATH or --vocab-size N")
