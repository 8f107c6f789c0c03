"""The emulator's request grammar: what SGLang 0.5.23's `/generate` (GenerateReqInput) and
`/v1/completions` (CompletionRequest) accept, and the error bodies each answers a bad one with
(400 unless said). The routes (`moe_tui.sim.routes`) parse through `RequestGrammar`; a `BadRequest`
carries the message SGLang would send.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from moe_tui.records import SglangJson

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's sampling default


class BadRequest(Exception):
    """A client error to answer with HTTP 400."""


def native_error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def openai_error(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return web.json_response({"object": "error", "message": message, "type": kind,
                              "param": None, "code": status}, status=status)


async def json_body(request: web.Request) -> SglangJson:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("Request body must be a JSON object")
    return body


class RequestGrammar:
    """A generate or completions body into (prompt ids, max new tokens, stream, ...), checked
    against the engine's tokenizer and context length."""

    def __init__(self, engine: SimEngine) -> None:
        self.e = engine

    def prompt_ids_from_text(self, text: object, where: str) -> list[int]:
        if not isinstance(text, str):
            raise BadRequest(f"{where} must be a string (batched requests are not emulated)")
        return self.e.tokenizer.encode(text, add_special_tokens=False).ids

    @staticmethod
    def prompt_ids_from_ids(ids: object, where: str) -> list[int]:
        # type() is exact (rejects bool); min() after it keeps this cheap for long prompts.
        if (not isinstance(ids, list) or not all(type(i) is int for i in ids)
                or (ids and min(ids) < 0)):
            raise BadRequest(f"{where} must be a list of non-negative integer token ids "
                             "(batched requests are not emulated)")
        return ids

    def check_lengths(self, prompt_len: int, max_new: int) -> None:
        if prompt_len == 0:
            raise BadRequest("The input is empty: prompt has 0 tokens.")
        if prompt_len + max_new > self.e.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of "
                f"{self.e.context_length} tokens. You requested a total of {prompt_len + max_new} "
                f"tokens: {prompt_len} tokens from the input messages and {max_new} tokens for "
                f"the completion. Please reduce the number of tokens in the input messages or "
                f"the completion to fit within the limit.")

    @staticmethod
    def int_param(value: object, name: str, default: int) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"{name} must be a non-negative integer, got {value!r}")
        return value

    @staticmethod
    def check_temperature(value: object, name: str) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadRequest(f"{name} must be a non-negative number, got {value!r}")

    def parse_generate(self, body: SglangJson) -> tuple[list[int], int, bool, str]:
        has_text = body.get("text") is not None
        has_ids = body.get("input_ids") is not None
        if has_text == has_ids:
            raise BadRequest("Either text or input_ids should be provided (exactly one).")
        prompt_ids = (self.prompt_ids_from_text(body["text"], "text") if has_text
                      else self.prompt_ids_from_ids(body["input_ids"], "input_ids"))
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("sampling_params must be a JSON object")
        max_new = self.int_param(sp.get("max_new_tokens"), "sampling_params.max_new_tokens",
                                  DEFAULT_MAX_NEW_TOKENS)
        self.check_temperature(sp.get("temperature"), "sampling_params.temperature")
        if "ignore_eos" in sp and not isinstance(sp["ignore_eos"], bool):
            raise BadRequest("sampling_params.ignore_eos must be a boolean")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean")
        rid = body.get("rid") or uuid.uuid4().hex
        if not isinstance(rid, str):
            raise BadRequest("rid must be a string")
        self.check_lengths(len(prompt_ids), max_new)
        return prompt_ids, max_new, stream, rid

    def parse_completions(self, body: SglangJson) -> tuple[list[int], int, bool, tuple[bool, bool]]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = self.prompt_ids_from_text(prompt, "prompt")
        elif isinstance(prompt, list):
            prompt_ids = self.prompt_ids_from_ids(prompt, "prompt")
        else:
            raise BadRequest("prompt must be a string or a list of token ids")
        max_new = self.int_param(body.get("max_tokens"), "max_tokens", 16)
        self.check_temperature(body.get("temperature"), "temperature")
        if body.get("n", 1) != 1:
            raise BadRequest("n > 1 is not emulated")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            raise BadRequest("stream_options must be a JSON object")
        self.check_lengths(len(prompt_ids), max_new)
        return prompt_ids, max_new, stream, (bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")))
