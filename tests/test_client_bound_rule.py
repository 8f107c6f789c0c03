"""The client-bound rule on the event loop's lag (moe_tui.bench.live.selfcheck_flags), on plain data:
a run long enough for a p99 is judged by it; a run too short for one (its "p99" is its largest
sample) needs more than one late wake-up, or one far too late."""

from __future__ import annotations

import asyncio

from moe_tui.bench.live import (
    LAG_P99_LIMIT_MS,
    LAG_P99_MIN_SAMPLES,
    LAG_SINGLE_LIMIT_MS,
    LoopLagProbe,
    selfcheck_flags,
)


def lag_check(lags_ms: list[float]) -> dict:
    probe = LoopLagProbe()
    probe.lags = [ms / 1000 for ms in lags_ms]
    return probe.summary()


def test_a_long_run_is_judged_by_its_p99():
    quiet = [2.0] * (LAG_P99_MIN_SAMPLES * 2)
    assert selfcheck_flags(lag_check(quiet)) == []
    tail = [2.0] * 180 + [15.0] * 20  # 10% of wake-ups 15 ms late: p99 15 ms
    (reason,) = selfcheck_flags(lag_check(tail))
    assert reason.startswith("event-loop lag p99 15.0 ms > 10 ms"), reason
    one = [2.0] * 199 + [12.0]  # 0.5% late: the p99 stays under the limit
    assert selfcheck_flags(lag_check(one)) == []


def test_one_late_wake_up_in_a_short_run_is_one_event_not_a_tail():
    short = [2.0] * 16 + [12.0]  # as measured: a 0.85 s timed phase, "p99" 10.4 ms from one late wake-up
    check = lag_check(short)
    assert check["loop_lag_p99_ms"] > LAG_P99_LIMIT_MS and check["loop_lag_late"] == 1
    assert selfcheck_flags(check) == []


def test_a_short_run_with_two_late_wake_ups_or_one_far_too_late_is_client_bound():
    (two,) = selfcheck_flags(lag_check([2.0] * 15 + [11.0, 14.0]))
    assert "2 of 17 wake-ups later than 10 ms" in two and "latest 14.0 ms" in two, two
    (far,) = selfcheck_flags(lag_check([2.0] * 16 + [LAG_SINGLE_LIMIT_MS + 1]))
    assert "1 of 17 wake-ups" in far, far


def test_a_check_stored_before_the_late_count_keeps_the_p99_rule():
    old = {"loop_lag_p99_ms": 10.4, "loop_lag_samples": 17, "loop_lag_max_ms": 10.4}
    assert selfcheck_flags(old) == ["event-loop lag p99 10.4 ms > 10 ms"]


def test_the_probe_counts_its_late_wake_ups():
    async def probe_a_blocked_loop() -> dict:
        probe = LoopLagProbe(interval=0.01)
        probe.start()
        await asyncio.sleep(0.05)
        import time

        time.sleep(0.03)  # the loop is held: the probe's next wake-up is ~20 ms late
        await asyncio.sleep(0.03)
        await probe.stop()
        return probe.summary()

    check = asyncio.run(probe_a_blocked_loop())
    assert check["loop_lag_late"] >= 1 and check["loop_lag_max_ms"] > LAG_P99_LIMIT_MS, check
