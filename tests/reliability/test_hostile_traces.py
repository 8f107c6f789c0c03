"""A trace where explain expects one is read as untrusted input (issue 36).

The profiler's folder is written by the server: an entry named like a trace may be a named pipe,
a device, JSON of 100,000 brackets or events at 1e308 µs. Each is a TraceError naming the file
(which `explain` prints as "the traces cannot be read"), at once, never a hang, a traceback or an
infinite number.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from moe_tui.explain import TraceError, read_rank

TRACE = "moe-tui-run1-TP-0-DECODE.trace.json"


def _read_within(path, seconds: float = 10.0, **kw):
    """read_rank in a daemon thread: (finished, result or exception). A hang is a failed test, not a hung suite."""
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_call(path, **kw)), daemon=True)
    thread.start()
    thread.join(seconds)
    return (not thread.is_alive()), (out[0] if out else None)


def _call(path, **kw):
    try:
        return read_rank(path, **kw)
    except BaseException as exc:  # noqa: BLE001 - the test asserts which one
        return exc


def test_a_named_pipe_where_a_trace_should_be_is_refused_at_once(tmp_path):
    """A FIFO named like a trace (nobody writes to it): TraceError naming it within seconds, no hang."""
    fifo = tmp_path / TRACE
    os.mkfifo(fifo)
    finished, result = _read_within(fifo)
    assert finished, "read_rank hung on a named pipe"
    assert isinstance(result, TraceError) and str(fifo) in str(result) and "named pipe" in str(result), result


def test_a_device_where_a_trace_should_be_is_refused(tmp_path):
    """A link named like a trace pointing at /dev/zero: refused as a device, not read until the size bound."""
    link = tmp_path / TRACE
    link.symlink_to("/dev/zero")
    finished, result = _read_within(link)
    assert finished and isinstance(result, TraceError) and "a device, not a regular file" in str(result), result


def test_a_deeply_nested_trace_is_a_clear_error(tmp_path):
    """100,000 nested brackets: TraceError 'nested too deeply' naming the file, not a RecursionError."""
    deep = tmp_path / TRACE
    deep.write_text("[" * 100_000 + "]" * 100_000)
    finished, result = _read_within(deep)
    assert finished and isinstance(result, TraceError), repr(result)
    assert f"{deep}: JSON nested too deeply to be a Chrome trace" == str(result)


def test_absurd_times_in_a_trace_are_malformed_events_not_numbers(tmp_path):
    """A kernel at ts=dur=1e308 µs beside a sound one: counted as skipped; the step sums stay the sound one's."""
    events = [{"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "ts": 1e308, "dur": 1e308, "pid": 0},
              {"ph": "X", "cat": "kernel", "name": "fused_moe_kernel", "ts": 1.0, "dur": 2.0, "pid": 0}]
    path = tmp_path / TRACE
    path.write_text(json.dumps({"traceEvents": events}))
    profile = read_rank(path, steps=1)
    assert profile.skipped_events == 1
    assert profile.steps[0]["moe_gemm"] == pytest.approx(0.002)
