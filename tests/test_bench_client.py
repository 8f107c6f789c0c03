"""The native client's SSE line parsing: the lean /generate path agrees with decoding each line whole.

`_StreamState.line` reads SGLang-shaped /generate lines by decoding only their trailing meta_info;
every other shape goes through the full decode. These tests feed the same streams through the
lean path and through the full decode (lines reshaped so the lean path cannot apply) and compare
what each recorded. End-to-end runs against the emulator are in test_bench_engine.py.
"""

from __future__ import annotations

import json

import pytest

from moe_tui.bench.client import RequestOutcome, _generate_fields_fast, _StreamFailure, _StreamState


def _chunk(text: str, tokens: int, finish=None, separators=(",", ":"), meta_last=True) -> bytes:
    meta = {"id": "r1", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": tokens,
            "cached_tokens": 0}
    body = {"text": text, "output_ids": list(range(tokens)), "meta_info": meta}
    if not meta_last:
        body = {"text": text, "meta_info": meta, "output_ids": list(range(tokens))}
    return b"data: " + json.dumps(body, separators=separators).encode()


def _feed(lines: list[bytes]) -> RequestOutcome:
    outcome = RequestOutcome(0, 3, 8)
    outcome.sent_at = 100.0
    state = _StreamState(outcome, "generate", None)
    for i, raw in enumerate(lines):
        buf = b"xx\n" + raw + b"\nyy"  # a line inside a larger read, as the client hands them on
        state.line(buf, 3, 3 + len(raw), 100.0 + 0.01 * (i + 1))
    return outcome


STREAM = [("", 0), ("He", 1), ('He said "meta_info": {', 3), ('He said "meta_info": {x}', 4),
          ("He said \\u00e9", 6)]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_lean_and_full_decoding_record_the_same_stream(separators):
    lean = [_chunk(t, n, separators=separators) for t, n in STREAM]
    lean.append(_chunk("He said done", 8, finish={"type": "length", "length": 8}, separators=separators))
    # meta_info not last: the lean path must refuse these and the full decode takes over
    full = [_chunk(t, n, separators=separators, meta_last=False) for t, n in STREAM]
    full.append(_chunk("He said done", 8, finish={"type": "length", "length": 8}, separators=separators,
                       meta_last=False))
    assert all(_generate_fields_fast(raw) is not None for raw in lean)
    assert all(_generate_fields_fast(raw) is None for raw in full)
    a, b = _feed(lean + [b"data: [DONE]"]), _feed(full + [b"data: [DONE]"])
    for o in (a, b):
        assert o.ttft == pytest.approx(0.02)  # the empty-text first chunk is not the first token
        assert [n for _, n in o.chunks] == [1, 2, 1, 2, 2]
        assert o.output_len == 8 and o.finish_reason == "length"
        assert o.latency == pytest.approx(0.07)
    assert a.chunks == b.chunks


def test_escaped_meta_info_inside_text_is_not_taken_for_the_key():
    raw = _chunk('a "meta_info": {"completion_tokens": 99}', 2)
    assert _generate_fields_fast(raw) == (True, 2, None)


def test_carriage_returns_and_error_lines_take_the_full_decode():
    o = _feed([_chunk("a", 1) + b"\r", _chunk("ab", 2) + b"\r"])
    assert o.output_len == 2 and [n for _, n in o.chunks] == [1, 1]
    with pytest.raises(_StreamFailure, match="server error in stream"):
        _feed([b'data: {"error": {"message": "boom"}}'])
    with pytest.raises(_StreamFailure, match="unparseable"):
        _feed([b'data: {"text": "a", "meta_info": {"completion_tokens": 1}'])  # cut line
