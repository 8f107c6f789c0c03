"""Tests for moe_tui.telemetry and `moe-tui gpus`.

The no-driver path runs against the real pynvml on a machine without the NVIDIA driver (CI, this
dev box); where a driver is present those tests skip and the live-sampler test runs instead. The
summary and thread tests use hand-made `GpuSample`s and injected sample functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from moe_tui.telemetry import (
    GpuProcess,
    GpuSample,
    NvmlSampler,
    SnapshotCollector,
    TelemetrySnapshot,
    TelemetryThread,
    decode_clock_events,
    foreign_processes,
    summarize_run,
    suspect_reasons,
)


def _driver_present() -> bool:
    return NvmlSampler().sample().available


no_driver_only = pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present here")
driver_only = pytest.mark.skipif(not _driver_present(), reason="no NVIDIA driver here")

GIB = 2**30


def gpu(index, t, *, util=100.0, clock=1980, bits=0, power=600.0, mem=10 * GIB, procs=()):
    return GpuSample(
        index=index, t=t, wall=1_800_000_000.0 + t, name="NVIDIA H200", uuid=f"GPU-{index}",
        util_gpu_pct=util, util_mem_pct=util / 4, mem_used_bytes=mem, mem_total_bytes=141 * GIB,
        power_w=power, power_limit_w=700.0, temperature_c=40.0 + t, sm_clock_mhz=clock,
        sm_clock_max_mhz=1980, mem_clock_mhz=3201, clock_event_bits=bits,
        processes=tuple(GpuProcess(pid, m, name) for pid, m, name in procs),
    )


def snap(t, *gpus):
    return TelemetrySnapshot(t=t, wall=1_800_000_000.0 + t, gpus=tuple(gpus), driver_version="580",
                             cuda_driver_version="13.0", nvml_version="13.580")


# ---- no driver ----------------------------------------------------------------------------


@no_driver_only
def test_sampler_without_driver_reports_unavailable_and_never_raises():
    sampler = NvmlSampler()
    first, second = sampler.sample(), sampler.sample()
    for s in (first, second):
        assert s.available is False
        assert s.reason == "no NVIDIA driver: NVML Shared Library Not Found"
        assert s.gpus == ()
    assert sampler.available is False
    summary = summarize_run([first, second], our_pids=[])
    assert summary["available"] is False and summary["reason"].startswith("no NVIDIA driver")
    assert summary["gpus"] == {} and summary["foreign_processes"] == []
    assert suspect_reasons(summary) == []
    json.dumps(summary)


@pytest.mark.integration
@no_driver_only
def test_gpus_command_without_driver_exits_one_with_reason():
    """No driver is a failure a script must see (issue 33), with the reason in words, and the JSON
    document still printed."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    text = subprocess.run([sys.executable, "-m", "moe_tui", "gpus"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert text.returncode == 1, text.stderr
    assert text.stdout.strip() == "no NVIDIA driver: NVML Shared Library Not Found"
    js = subprocess.run([sys.executable, "-m", "moe_tui", "gpus", "--json"], capture_output=True,
                        text=True, timeout=60, env=env)
    assert js.returncode == 1, js.stderr
    data = json.loads(js.stdout)
    assert data["available"] is False and data["gpus"] == []


@driver_only
def test_live_sampler_reads_every_gpu():
    s = NvmlSampler().sample()
    assert s.available and s.gpus
    assert all(g.name and g.mem_total_bytes for g in s.gpus)
    assert s.cuda_driver_version and "." in s.cuda_driver_version
    out = subprocess.run([sys.executable, "-m", "moe_tui", "gpus"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "driver" in out.stdout


@pytest.mark.integration
def test_gpus_command_rejects_bad_gpu_list():
    out = subprocess.run([sys.executable, "-m", "moe_tui", "gpus", "--gpus", "0,x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--gpus" in out.stderr


@pytest.mark.integration
def test_core_does_not_import_textual():
    code = "import sys, moe_tui.telemetry, moe_tui.commands.gpus; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- decoding and data --------------------------------------------------------------------


def test_decode_clock_events_names_known_bits_and_keeps_unknown_ones():
    assert decode_clock_events(None) == ()
    assert decode_clock_events(0) == ()
    assert decode_clock_events(0x1 | 0x4) == ("gpu_idle", "sw_power_cap")
    assert decode_clock_events(0x8 | 0x20 | 0x40 | 0x80) == (
        "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
    assert decode_clock_events(0x2 | 0x10 | 0x100) == (
        "applications_clocks", "sync_boost", "display_clocks")
    assert decode_clock_events(0x4 | 0x1000) == ("sw_power_cap", "0x1000")


def test_snapshot_round_trips_through_json():
    s = snap(1.0, gpu(0, 1.0, bits=5, procs=[(42, GIB, "python")]),
             GpuSample(index=1, t=1.0, wall=2.0))  # a GPU that reports nothing
    data = json.loads(json.dumps(s.to_dict()))
    assert data["gpus"][0]["clock_events"] == ["gpu_idle", "sw_power_cap"]
    assert TelemetrySnapshot.from_dict(data) == s


def test_render_shows_na_for_unsupported_metrics():
    from moe_tui.commands.gpus import render_snapshot

    s = snap(1.0, gpu(0, 1.0, bits=4, procs=[(42, GIB, "python")]),
             GpuSample(index=1, t=1.0, wall=2.0, name="NVIDIA H200"))
    text = render_snapshot(s)
    assert "sw_power_cap" in text and "1980" in text
    row1 = next(line for line in text.splitlines() if line.startswith("1 "))
    assert "n/a" in row1
    assert "42" in text and "python" in text


# ---- summary ------------------------------------------------------------------------------


def _run():
    """GPU 0: idle, then busy and power-capped at 1470 MHz. GPU 1: busy at full clock, with our
    server (pid 100) and a stranger (pid 4242)."""
    procs = [(100, 20 * GIB, "sglang::scheduler"), (4242, 3 * GIB, "python")]
    return [
        snap(0.0, gpu(0, 0.0, util=0.0, clock=345, bits=0x1, power=90.0, mem=1 * GIB),
             gpu(1, 0.0, util=100.0, procs=procs)),
        snap(1.0, gpu(0, 1.0, util=100.0, clock=1470, bits=0x4, power=695.0, mem=30 * GIB),
             gpu(1, 1.0, util=90.0, procs=procs)),
        snap(2.0, gpu(0, 2.0, util=98.0, clock=1600, bits=0x4 | 0x10, power=690.0, mem=32 * GIB),
             gpu(1, 2.0, util=80.0, procs=procs[:1])),
        snap(3.0, gpu(0, 3.0, util=96.0, clock=1980, bits=0x0, power=500.0, mem=31 * GIB),
             gpu(1, 3.0, util=100.0, procs=procs[:1])),
    ]


def test_summary_per_gpu_and_overall():
    summary = summarize_run(_run(), our_pids={100})
    json.dumps(summary)  # it is stored as the run's telemetry summary
    g0, g1 = summary["gpus"]["0"], summary["gpus"]["1"]
    assert summary["snapshots"] == 4 and summary["duration_s"] == 3.0
    assert g0["util_gpu_mean"] == pytest.approx(73.5) and g0["util_gpu_min"] == 0.0
    # The idle 345 MHz is no drop (nor the run's minimum clock); the busy 1470 MHz is: (1980 - 1470) / 1980.
    assert g0["sm_clock_min_mhz"] == 1470 and g0["sm_clock_min_busy_mhz"] == 1470
    assert g0["sm_clock_drop_pct"] == pytest.approx(25.8)
    assert g0["clock_events_seen"] == ["gpu_idle", "sw_power_cap", "sync_boost"]
    assert g0["suspect_clock_events"] == ["sw_power_cap"]
    assert g0["clock_event_fraction"]["sw_power_cap"] == 0.5
    assert g0["power_mean_w"] == pytest.approx((90 + 695 + 690 + 500) / 4, abs=0.01)
    assert g0["mem_used_peak_bytes"] == 32 * GIB
    assert g1["sm_clock_drop_pct"] == 0.0 and g1["suspect_clock_events"] == []
    overall = summary["overall"]
    assert overall["gpu_count"] == 2 and overall["sm_clock_drop_pct"] == pytest.approx(25.8)
    assert overall["suspect_clock_events"] == ["sw_power_cap"]
    assert overall["mem_used_peak_bytes"] == 32 * GIB
    assert overall["util_gpu_max"] == 100.0 and overall["util_gpu_min"] == 0.0
    assert summary["foreign_processes"] == [
        {"gpu": 1, "pid": 4242, "name": "python", "samples": 2, "max_used_memory_bytes": 3 * GIB}
    ]


def test_suspect_reasons_name_throttle_clock_drop_and_foreign_process():
    reasons = suspect_reasons(summarize_run(_run(), our_pids={100}))
    assert reasons == [
        "GPU 0 throttled: sw_power_cap in 50% of samples",
        "GPU 0 SM clock dropped 26% under load (1470 of 1980 MHz)",
        "foreign GPU process on GPU 1: pid 4242 (python, 3.0 GiB)",
    ]


def test_summary_without_pids_does_not_judge_processes():
    summary = summarize_run(_run())
    assert summary["foreign_processes"] is None
    assert not any("foreign" in r for r in suspect_reasons(summary))


def test_clean_run_and_idle_only_run_raise_no_suspicion():
    clean = [snap(t, gpu(0, t, util=100.0, clock=1980, bits=0x10)) for t in range(3)]
    assert suspect_reasons(summarize_run(clean, our_pids=set())) == []
    idle = [snap(t, gpu(0, t, util=0.0, clock=345, bits=0x1)) for t in range(3)]
    summary = summarize_run(idle, our_pids=set())
    assert summary["gpus"]["0"]["sm_clock_drop_pct"] is None
    assert suspect_reasons(summary) == []


@pytest.mark.integration
def test_foreign_processes_counts_descendants_of_our_pids_as_ours():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             start_new_session=True)
    try:
        s = snap(0.0, gpu(0, 0.0, procs=[(child.pid, GIB, None), (999_999_999, GIB, None)]))
        assert [f.pid for f in foreign_processes(s, {os.getpid()})] == [999_999_999]
        without = foreign_processes(s, {os.getpid()}, include_descendants=False)
        assert sorted(f.pid for f in without) == sorted([child.pid, 999_999_999])
    finally:
        os.killpg(child.pid, 9)
        child.wait()


# ---- the sampling thread ------------------------------------------------------------------


def test_thread_never_overlaps_a_slow_sampler_and_stops_cleanly():
    in_flight = 0
    max_in_flight = 0
    starts: list[float] = []
    lock = threading.Lock()

    def slow_sample():
        nonlocal in_flight, max_in_flight
        with lock:
            in_flight += 1
            max_in_flight = max(max_in_flight, in_flight)
            starts.append(time.monotonic())
        time.sleep(0.12)  # four times the interval
        with lock:
            in_flight -= 1
        t = time.monotonic()
        return snap(t, gpu(0, t))

    collector = SnapshotCollector()
    thread = TelemetryThread(slow_sample, interval_s=0.03, history=2, on_snapshot=collector)
    thread.start()
    time.sleep(0.6)
    assert thread.stop(timeout=2.0) is True
    assert not thread.running
    calls = len(starts)
    time.sleep(0.2)
    assert len(starts) == calls  # nothing after stop
    assert max_in_flight == 1
    assert calls >= 3
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 0.115  # each sample started only after the previous one finished
    assert len(collector.snapshots) == thread.samples_taken == calls
    assert len(thread.history(0)) == 2 and len(thread.snapshots()) == 2  # bounded rings
    assert thread.latest is collector.snapshots[-1]


def test_thread_survives_a_failing_sampler_and_unsubscribe_works():
    errors: list[BaseException] = []
    count = 0

    def flaky():
        nonlocal count
        count += 1
        if count % 2:
            raise RuntimeError("boom")
        return snap(time.monotonic())

    got: list[TelemetrySnapshot] = []
    thread = TelemetryThread(flaky, interval_s=0.01, on_error=errors.append)
    unsubscribe = thread.subscribe(got.append)
    with thread:
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        unsubscribe()
        frozen = len(got)
        time.sleep(0.1)
    assert frozen >= 2 and len(got) == frozen
    assert errors and str(errors[0]) == "boom"
    assert thread.samples_taken > frozen


def test_thread_rejects_bad_settings():
    with pytest.raises(ValueError, match="interval_s"):
        TelemetryThread(lambda: snap(0.0), interval_s=0)
    with pytest.raises(ValueError, match="history"):
        TelemetryThread(lambda: snap(0.0), history=0)


# ---- simulated GPUs, the control room's source, ownership ---------------------------------


def test_lost_gpu_is_summarised_and_named_a_reason():
    lost = GpuSample(index=5, t=1.0, wall=1.0, name="NVIDIA H200", lost=True)
    s = summarize_run([snap(0.0, gpu(0, 0.0)), snap(1.0, gpu(0, 1.0), lost)], our_pids=[])
    assert s["overall"]["gpus_lost"] == [5] and s["gpus"]["5"]["lost_samples"] == 1
    assert any("GPU 5 was lost" in r for r in suspect_reasons(s))
    assert GpuSample.from_dict(lost.to_dict()) == lost


@pytest.mark.integration
def test_simulated_sampler_merges_live_servers_and_fills_idle_gpus():
    from moe_tui.sim.launch import start_sim
    from moe_tui.telemetry import SimSource, SimulatedGpuSampler

    with start_sim(["--tp-size", "2"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "2,3"}) as sim:
        sources = [SimSource(sim.base_url, (2, 3), live=True),
                   SimSource("http://127.0.0.1:9", (0, 1, 2, 3, 4, 5, 6, 7), live=False)]  # stopped
        shot = SimulatedGpuSampler(lambda: sources).sample()
        children = {p.pid: p.name() for p in psutil.Process(sim.proc.pid).children()}
    assert shot.available and shot.simulated and [g.index for g in shot.gpus] == list(range(8))
    held = {g.index: [(p.pid, p.name) for p in g.processes] for g in shot.gpus if g.processes}
    assert set(held) == {2, 3}
    for index, procs in held.items():
        (pid, name), = procs
        assert children[pid] == name == f"sglang::scheduler_TP{index - 2}"
    idle = shot.gpu(0)
    assert idle.util_gpu_pct == 0 and idle.mem_used_bytes == 0 and "gpu_idle" in idle.clock_events


def test_control_room_sampler_prefers_nvml_and_falls_back_to_simulated():
    from moe_tui.telemetry import ControlRoomSampler, SimSource, SimulatedGpuSampler

    class Fixed:
        def __init__(self, shot):
            self.shot = shot

        def sample(self):
            return self.shot

    real = snap(1.0, gpu(0, 1.0))
    none = TelemetrySnapshot(t=1.0, wall=1.0, available=False, reason="no NVIDIA driver: not found")
    sim_shot = SimulatedGpuSampler(lambda: [SimSource("http://127.0.0.1:9", (0, 1))]).sample()
    assert sim_shot.simulated and len(sim_shot.gpus) == 2  # nothing running: idle simulated GPUs
    assert ControlRoomSampler(lambda: [], nvml=Fixed(real), simulated=Fixed(sim_shot)).sample() is real
    assert ControlRoomSampler(lambda: [], nvml=Fixed(none), simulated=Fixed(sim_shot)).sample() is sim_shot
    nothing = ControlRoomSampler(lambda: [], nvml=Fixed(none)).sample()
    assert not nothing.available and "no NVIDIA driver" in nothing.reason and "simulated" in nothing.reason


def test_sim_sources_from_dashboard_rows_and_managed_servers():
    from types import SimpleNamespace

    from moe_tui.telemetry import sim_sources

    row = SimpleNamespace(profile="sim-a", engine="sim", state="ready", port=31000, gpus=(0, 1))
    real = SimpleNamespace(profile="glm", engine="sglang", state="ready", port=30000, gpus=(0,))
    managed = SimpleNamespace(profile=SimpleNamespace(engine="sim", host="0.0.0.0", port=31001, gpus=(2,)),
                              state="stopped")
    got = sim_sources([row, real, managed])
    assert [(s.url, s.gpus, s.live) for s in got] == [
        ("http://127.0.0.1:31000", (0, 1), True), ("http://127.0.0.1:31001", (2,), False)]


def test_ownership_rule_on_plain_data():
    from moe_tui.judgement import owner_of, server_family

    # launcher 100 -> schedulers 101..108 + detokenizer 109; 108 has a child 200; 300 is a stranger;
    # 400 is a scheduler of server B reparented to init (1) after its leader 399 died.
    parents = {101 + r: 100 for r in range(9)} | {200: 108, 300: 1, 400: 1, 100: 1}
    fam_a = server_family(100, parents)
    assert fam_a == {100, *range(101, 110), 200}
    fam_b = server_family(399, parents, marked=[400])  # found by its MOE_TUI_SERVER_ID marker
    assert fam_b == {399, 400}
    families = {"a": fam_a, "b": fam_b}
    assert owner_of(105, families) == "a" and owner_of(400, families) == "b" and owner_of(300, families) is None


@pytest.mark.integration
def test_gpu_owners_follow_the_live_tree():
    from moe_tui.telemetry import gpu_owners

    code = ("import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(c.pid, flush=True); time.sleep(60)")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        child = int(leader.stdout.readline())
        owners = gpu_owners([child, stranger.pid], {"srv": leader.pid})
        assert owners == {child: "srv"}
    finally:
        for p in psutil.Process(leader.pid).children(recursive=True):
            p.kill()
        leader.kill()
        stranger.kill()
        leader.wait()
        stranger.wait()


def test_the_minimum_clock_leaves_out_samples_nvml_reported_idle():
    """Walk 2026-12-05 finding 8: a run's ramp and tail idle the GPU at 345 MHz (NVML's GpuIdle event), and
    the run's `sm_clock_min_mhz` said 345: the Compare screen then listed '2617 | 345 vs 2617' beside a clean
    grid. The minimum is of the samples not reported idle; a run seen only idle keeps its idle clock."""
    run = [snap(0.0, gpu(0, 0.0, util=0.0, clock=345, bits=0x001)),
           snap(1.0, gpu(0, 1.0, clock=1980)), snap(2.0, gpu(0, 2.0, clock=1755, bits=0x004)),
           snap(3.0, gpu(0, 3.0, util=0.0, clock=345, bits=0x001))]
    summary = summarize_run(run)
    assert summary["gpus"]["0"]["sm_clock_min_mhz"] == 1755  # a power-capped sample still counts
    assert summary["overall"]["sm_clock_min_mhz"] == 1755
    assert summary["gpus"]["0"]["clock_event_fraction"]["gpu_idle"] == 0.5  # the idle samples are still told
    idle_only = summarize_run([run[0], run[3]])
    assert idle_only["overall"]["sm_clock_min_mhz"] == 345
