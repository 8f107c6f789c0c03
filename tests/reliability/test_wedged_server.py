"""A wedged server (issue 36): `/health` answers, generate serves nothing. The emulator's
`--sim-hang-after-tokens 0` is that server: its health check is a one-token generate that completes
(as SGLang 0.5.23's /health does while the scheduler runs), while every /generate stream stays
open and silent. Before: each request was cut after the stall timeout, one after the other (a stall
timeout per request per item), and the same server served the next item. Now: the item fails
after one stall timeout naming the wedge, and the next item gets a fresh server start.
"""

from __future__ import annotations

import time

import pytest
from runner_support import wait_gone

from moe_tui.events import BenchProgress


def progress(completed: int, tok_s: float, in_flight: int) -> BenchProgress:
    return BenchProgress(run_id=1, completed=completed, total=16, errors=0, elapsed_s=0.0,
                         output_tok_s=tok_s, in_flight=in_flight)


def test_the_wedge_watch_fires_after_the_stall_timeout_of_silence_with_requests_in_flight():
    """Tokens keep it quiet; silence while idle is no wedge; stall_s of silence in flight is, once."""
    from moe_tui.run.wedge import WedgeWatch

    now = [0.0]
    watch = WedgeWatch(2.0, clock=lambda: now[0])
    for t, tok_s in ((0.5, 100.0), (1.5, 80.0), (3.0, 50.0)):
        now[0] = t
        assert watch.saw(progress(1, tok_s, 2)) is None
    now[0] = 4.9
    assert watch.saw(progress(1, 0.0, 2)) is None  # 1.9 s silent
    now[0] = 6.0
    assert watch.saw(progress(1, 0.0, 0)) is None  # silent but nothing asked of the server
    now[0] = 6.5
    reason = watch.saw(progress(1, 0.0, 1))
    assert reason is not None and "server wedged" in reason and "stall timeout 2 s" in reason
    assert watch.saw(progress(5, 10.0, 1)) == reason  # said once, kept


SMALL = ["--num-prompts", "12", "--input-len", "32", "--output-len", "8", "--warmup-requests", "0",
         "--no-warmup-pass", "--concurrency", "1"]


@pytest.mark.integration
def test_a_wedged_server_fails_its_item_after_one_stall_timeout_and_is_restarted(env):
    hang = env.profile("sim-wedged", "flashinfer_cutlass", hang_after_tokens=0)
    ok = env.profile("sim-fine", "flashinfer_cutlass")
    pdir = ["--profiles-dir", str(env.profiles)]
    for profiles in (hang, hang, ok):  # two items of the wedged profile: the second gets a fresh start
        added = env.run("queue", "add", "--no-control", "--profiles", profiles, *pdir, *SMALL)
        assert added.returncode == 0, added.stdout
    started = time.monotonic()
    ran = env.run("run", *pdir, "--stall-timeout", "2", timeout=120)
    elapsed = time.monotonic() - started
    assert ran.returncode == 0, ran.stdout
    states = env.query("SELECT profile_name, state, error FROM queue_items ORDER BY id")
    assert [(p, s) for p, s, _ in states] == [("sim-wedged", "failed"), ("sim-wedged", "failed"),
                                              ("sim-fine", "done")], states
    assert all("server wedged: no output token for" in (e or "") for _, s, e in states if s == "failed"), states
    # one stall timeout an item, not one a request: at most the request in flight and the next were cut
    # (before: all 12, one after the other)
    for (run_id,) in env.query("SELECT id FROM runs WHERE profile_name = 'sim-wedged'"):
        errors = [e for (e,) in env.query("SELECT error FROM requests WHERE run_id = ? AND ok = 0", (run_id,))]
        cut = [e for e in errors if "(stall timeout)" in e]
        assert len(errors) == 12 and len(cut) <= 2, (run_id, errors)
        assert all("run stopped" in e for e in errors if e not in cut), errors
    starts = env.query("SELECT COUNT(*) FROM server_starts WHERE profile_name = 'sim-wedged'")[0][0]
    assert starts == 2, starts  # restarted for the second item (before: one start served both)
    assert "server wedged" in ran.stdout
    print(f"run of two wedged items and one fine: {elapsed:.1f} s")
    wait_gone(env)
