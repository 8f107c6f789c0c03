"""The emulator's greedy outputs with logprobs: what `/generate` answers when `return_logprob` is set.

SGLang 0.5.23 answers a non-streamed `/generate` with `return_logprob: true` as
`{"text", "output_ids", "meta_info": {..., "input_token_logprobs": [...],
"output_token_logprobs": [[logprob, token_id, text or null], ...], "output_token_logprobs_length"}}`
(tokenizer_manager.detokenize_logprob_tokens; the text slot is filled only with
`return_text_in_logprobs`). The emulator answers the same shape, at once (the correctness gate is
not a timed run), with outputs that are a pure function of the prompt: the same prompt gives the
same greedy tokens on every backend and every start, as a correct kernel would. Logprobs carry a
tiny per-backend wobble (+-0.004 nats, the noise of reduced precision) and about one position in
ten is a near tie (p ~ 0.4-0.55). `--sim-fault-output-drift-after N` makes a backend whose tokens
leave the faithful continuation from output token N on, at positions the model was sure of.

Registered as an aiohttp middleware (one line in the server's app), so the engine code stays as it
is; every request without `return_logprob`, and streamed ones, pass through untouched.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from moe_tui.records import SglangJson

TOKENIZER_FILE = Path(__file__).with_name("tokenizer") / "tokenizer.json"
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling default
MAX_GATE_TOKENS = 4096
NEAR_TIE_SHARE = 0.1
BACKEND_WOBBLE_NATS = 0.004


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts (stable across processes and starts)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class GreedyModel:
    """Token ids and logprobs of the emulated model's greedy continuation of a prompt."""

    def __init__(self, backend: str, drift_after: int | None = None) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
        specials = {"<unk>", "<s>", "</s>", "<pad>"}
        vocab = self.tokenizer.get_vocab()
        self.words = sorted((i, w) for w, i in vocab.items() if w not in specials)
        self.backend = backend
        self.drift_after = drift_after

    def _token(self, stream: str, key: str, i: int) -> tuple[int, float]:
        token_id = self.words[int(_unit(stream, key, i, "id") * len(self.words))][0]
        u = _unit(stream, key, i, "p")
        if stream == "faithful" and u < NEAR_TIE_SHARE:
            prob = 0.40 + 0.15 * u / NEAR_TIE_SHARE
        else:
            prob = 0.82 + 0.18 * _unit(stream, key, i, "q")  # the model is sure: p in [0.82, 1)
        return token_id, max(-50.0, _log(prob))

    def generate(self, prompt_key: str, max_new_tokens: int) -> list[tuple[float, int]]:
        out = []
        for i in range(max_new_tokens):
            drifted = self.drift_after is not None and i >= self.drift_after
            token_id, logprob = self._token("drift" if drifted else "faithful", prompt_key, i)
            wobble = (2 * _unit(self.backend, prompt_key, i, "wobble") - 1) * BACKEND_WOBBLE_NATS
            out.append((min(0.0, logprob + wobble), token_id))
        return out

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def prompt_tokens(self, body: SglangJson) -> tuple[str, int]:
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise ValueError("input_ids must be a list of integers")
            return "ids:" + ",".join(map(str, ids)), len(ids)
        text = body.get("text")
        if not isinstance(text, str):
            raise ValueError("text must be a string (batched return_logprob requests are not emulated)")
        return "text:" + text, len(self.tokenizer.encode(text).ids)


def _log(p: float) -> float:
    import math

    return math.log(p)


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def _max_new_tokens(body: SglangJson) -> int:
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise ValueError("sampling_params must be a JSON object")
    value = sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GATE_TOKENS:
        raise ValueError(f"sampling_params.max_new_tokens must be an integer in [0, {MAX_GATE_TOKENS}], got {value!r}")
    return value


def answer(model: GreedyModel, body: SglangJson) -> SglangJson:
    """The SGLang-shaped response body for one non-streamed request with return_logprob."""
    started = time.monotonic()
    key, prompt_len = model.prompt_tokens(body)
    n = _max_new_tokens(body)
    pairs = model.generate(key, n)
    ids = [t for _, t in pairs]
    with_text = bool(body.get("return_text_in_logprobs"))
    logprobs = [[lp, t, model.decode([t]) if with_text else None] for lp, t in pairs]
    return {
        "text": model.decode(ids),
        "output_ids": ids,
        "meta_info": {
            "id": body.get("rid") or uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": n},
            "prompt_tokens": prompt_len, "weight_version": "default", "completion_tokens": n,
            "cached_tokens": 0,
            "input_token_logprobs": [],  # logprob_start_len -1 (the default): no prompt logprobs
            "output_token_logprobs": logprobs,
            "output_token_logprobs_length": len(logprobs),
            "e2e_latency": time.monotonic() - started,
            "simulated": True,
        },
    }


def greedy_outputs_middleware(args: argparse.Namespace, not_ready: Callable[[], str | None]) -> Middleware:
    """aiohttp middleware answering `/generate` requests that ask for logprobs (not streamed)."""
    backend: str = args.sim_fallback_backend or args.moe_runner_backend
    model_box: list[GreedyModel] = []

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/generate" or request.method not in ("POST", "PUT"):
            return await handler(request)
        raw = await request.read()  # aiohttp caches the body for the handler
        if b"return_logprob" not in raw:  # the benchmark's requests: no second JSON parse
            return await handler(request)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return await handler(request)  # the handler reports bad JSON in SGLang's words
        if not isinstance(body, dict) or not body.get("return_logprob") or body.get("stream"):
            return await handler(request)
        reason = not_ready()
        if reason:
            return _error(reason, 503)
        if not model_box:
            drift_after: int | None = args.sim_fault_output_drift_after
            model_box.append(GreedyModel(backend, drift_after))
        try:
            return web.json_response(answer(model_box[0], body))
        except ValueError as exc:
            return _error(str(exc))

    return middleware
