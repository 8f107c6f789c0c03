"""The correctness gate step: send the fixed greedy prompt set to a running server, store the answers.

Every prompt goes to SGLang's native `POST /generate` (0.5.23) as
`{"text", "sampling_params": {"temperature": 0, "max_new_tokens": N}, "return_logprob": true,
"logprob_start_len": -1, "top_logprobs_num": 0}`, not streamed; the answer's
`meta_info.output_token_logprobs` is a list of `[logprob, token_id, text|null]` per output token
(tokenizer_manager.detokenize_logprob_tokens). Prompts are sent one at a time: a batch of one
gives every backend the same shapes, so batch composition adds no numerical difference of its own.
The token ids and logprobs are stored per profile (store.gate_samples); `correctness.compare_gate`
judges a candidate's against the baseline's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from moe_tui.gate.correctness import GateSample
from moe_tui.records import FreeForm, GateRanJson, GateSamplesRow

if TYPE_CHECKING:
    from moe_tui.servers.managed import ManagedServer
    from moe_tui.store.db import Store

# A fixed, varied set: arithmetic, code, prose, a list, a translation, a long-range recall.
GATE_PROMPTS: tuple[tuple[str, str], ...] = (
    ("arith", "Compute 17 * 23 and explain each step briefly."),
    ("code", "Write a Python function that returns the n-th Fibonacci number iteratively."),
    ("prose", "Describe in three sentences how a mixture-of-experts layer routes a token."),
    ("list", "List the first ten prime numbers, separated by commas."),
    ("translate", "Translate to French: The GPUs are busy, please wait for the benchmark to finish."),
    ("recall", "Remember the word 'cobalt'. Now write a haiku about rain, then repeat the word."),
    ("json", "Return a JSON object with keys name, layers and experts for a model with 78 layers."),
    ("reason", "If a train leaves at 3 pm at 80 km/h, how far has it gone by 5:30 pm?"),
)
GATE_MAX_NEW_TOKENS = 64
GATE_TIMEOUT_S = 300.0  # per prompt: a real 744B model at batch 1 needs seconds, not minutes


class GateError(RuntimeError):
    """The server did not answer a gate prompt usably; the message names the prompt and why."""


def prompt_set_id(prompts: Sequence[tuple[str, str]] = GATE_PROMPTS,
                  max_new_tokens: int = GATE_MAX_NEW_TOKENS) -> str:
    """Identifies the prompts and length: only samples of one set are compared."""
    blob = json.dumps([list(p) for p in prompts] + [max_new_tokens, "greedy"], sort_keys=True)
    return f"greedy{len(prompts)}x{max_new_tokens}-{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


def request_body(text: str, max_new_tokens: int) -> FreeForm:
    """SGLang's /generate body (its GenerateReqInput's fields) for one greedy prompt."""
    return {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens},
            "return_logprob": True, "logprob_start_len": -1, "top_logprobs_num": 0, "stream": False}


def parse_answer(prompt_id: str, body: object) -> GateSample:
    """A GateSample from one /generate answer; GateError naming the prompt when it is unusable."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    meta = body.get("meta_info") if isinstance(body, dict) else None
    pairs = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(pairs, list):
        raise GateError(f"gate prompt '{prompt_id}': the answer has no meta_info.output_token_logprobs "
                        f"(does the server support return_logprob?)")
    ids: list[int] = []
    logprobs: list[float | None] = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) < 2 or not isinstance(pair[1], int):
            raise GateError(f"gate prompt '{prompt_id}': output_token_logprobs[{i}] is not [logprob, token_id, ...]")
        lp = pair[0]
        logprobs.append(float(lp) if isinstance(lp, (int, float)) and not isinstance(lp, bool) else None)
        ids.append(pair[1])
    output_ids = body.get("output_ids") if isinstance(body, dict) else None
    if isinstance(output_ids, list) and output_ids and output_ids != ids:
        raise GateError(f"gate prompt '{prompt_id}': output_ids and output_token_logprobs disagree")
    finish = meta.get("finish_reason") if isinstance(meta, dict) else None
    reason = finish.get("type") if isinstance(finish, dict) else finish
    return GateSample(prompt_id, tuple(ids), tuple(logprobs), reason)


async def collect_samples(base_url: str, *, prompts: Sequence[tuple[str, str]] = GATE_PROMPTS,
                          max_new_tokens: int = GATE_MAX_NEW_TOKENS,
                          timeout_s: float = GATE_TIMEOUT_S) -> list[GateSample]:
    """Every prompt's greedy answer from the server at `base_url`, one request at a time."""
    import httpx

    out: list[GateSample] = []
    from moe_tui.servers.keys import server_client

    async with server_client(base_url, timeout_s) as client:
        for prompt_id, text in prompts:
            try:
                resp = await client.post("/generate", json=request_body(text, max_new_tokens))
            except httpx.HTTPError as exc:
                raise GateError(f"gate prompt '{prompt_id}': {base_url}/generate: {exc!r}") from None
            if resp.status_code != 200:
                raise GateError(f"gate prompt '{prompt_id}': {base_url}/generate answered HTTP "
                                f"{resp.status_code}: {resp.text[:200]}")
            try:
                body = resp.json()
            except ValueError:
                raise GateError(f"gate prompt '{prompt_id}': the answer is not JSON") from None
            out.append(parse_answer(prompt_id, body))
    return out


async def run_gate(store: Store, profile_name: str, base_url: str, *, campaign_id: int | None = None,
                   server_start_id: int | None = None, resolved_backend: str | None = None,
                   prompts: Sequence[tuple[str, str]] = GATE_PROMPTS,
                   max_new_tokens: int = GATE_MAX_NEW_TOKENS) -> int:
    """Collect and store one gate pass; returns the stored row's id. Raises GateError."""
    samples = await collect_samples(base_url, prompts=prompts, max_new_tokens=max_new_tokens)
    return store.record_gate_samples(
        profile_name=profile_name, prompt_set=prompt_set_id(prompts, max_new_tokens),
        samples=[s.to_dict() for s in samples], campaign_id=campaign_id,
        server_start_id=server_start_id, resolved_backend=resolved_backend)


def gate_needed(store: Store, profile_name: str, campaign_id: int | None) -> bool:
    """True before a profile's first timed run in a campaign (no gate pass stored for it yet)."""
    return store.gate_samples(profile_name, campaign_id=campaign_id) is None


def stored_samples(row: GateSamplesRow | None) -> list[GateSample]:
    return [GateSample.from_dict(s) for s in (row["samples"] if row else None) or []]


async def gate_before_first_run(store: Store, campaign_id: int | None, profile_name: str, server: ManagedServer,
                                notice: Callable[[str, str], None]) -> bool:
    """The controller's step before an item's timed run: a gate pass when this is the profile's
    first run in the campaign. A failed gate is a warning (`notice(level, text)`): the grid then
    says the gate could not compare, never 'passed'. True when a pass was stored."""
    if campaign_id is None or not gate_needed(store, profile_name, campaign_id):
        return False
    try:
        await run_gate(store, profile_name, server.base_url, campaign_id=campaign_id,
                       server_start_id=server.start_id, resolved_backend=server.resolved_backend)
    except GateError as exc:
        notice("warning", f"correctness gate of '{profile_name}' failed: {exc}")
        return False
    return True


async def gate_server(store: Store, profile_name: str, server: ManagedServer | None) -> GateRanJson:
    """The gate on demand against a managed server that is ready; GateError otherwise."""
    if server is None or server.state != "ready":
        raise GateError(f"server '{profile_name}' is not ready; start it before running the gate")
    gate_id = await run_gate(store, profile_name, server.base_url, server_start_id=server.start_id,
                             resolved_backend=server.resolved_backend)
    return GateRanJson(gate_id=gate_id, profile=profile_name)
