"""`WedgeWatch` (pure): what counts as a wedged server and what never does."""

from __future__ import annotations

from moe_tui.events import BenchProgress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _ev(completed: int, errors: int, in_flight: int = 1, phase: str = "timed") -> BenchProgress:
    return BenchProgress(run_id=1, completed=completed, total=10, errors=errors, elapsed_s=0.0,
                         output_tok_s=0.0, in_flight=in_flight, phase=phase)


def _feed(watch, clock, steps):
    fired = []
    for t, ev in steps:
        clock.t = t
        if watch(ev):
            fired.append(t)
    return fired


def test_a_failed_request_and_no_completion_for_the_stall_timeout_is_a_wedge():
    from moe_tui.run.wedge import WedgeWatch

    clock = Clock()
    watch = WedgeWatch(120.0, clock)
    fired = _feed(watch, clock, [(0, _ev(0, 0)), (60, _ev(0, 0)), (121, _ev(0, 1)), (122, _ev(0, 1))])
    assert fired == [121] and "server wedged" in (watch.reason or "")


def test_a_long_healthy_request_or_errors_between_completions_are_no_wedge():
    from moe_tui.run.wedge import WedgeWatch

    clock = Clock()
    long_request = WedgeWatch(120.0, clock)  # one 8k-token answer at 30 tok/s: 270 s, no failure
    assert _feed(long_request, clock, [(t, _ev(0, 0)) for t in range(0, 300, 10)]) == []
    clock = Clock()
    flaky = WedgeWatch(2.0, clock)  # HTTP 500s, but requests keep completing
    steps = [(t, _ev(t, t)) for t in range(0, 10)]
    assert _feed(flaky, clock, steps) == []
    clock = Clock()
    idle = WedgeWatch(2.0, clock)  # the last request failed and nothing is in flight any more
    assert _feed(idle, clock, [(0, _ev(0, 0)), (5, _ev(0, 1, in_flight=0))]) == []
