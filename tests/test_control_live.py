"""control.LiveState folds GPU telemetry from events and from a late attach's snapshot."""

from __future__ import annotations

from moe_tui.control import ControlSnapshot, LiveState
from moe_tui.events import GpuTelemetry, ServerStateChanged
from tests.ui.fakes import demo_servers, gpu_snapshot, no_driver_snapshot


def test_gpu_telemetry_event_fills_gpus_and_history():
    live = LiveState()
    assert live.apply(GpuTelemetry(snapshot=gpu_snapshot(util=40.0).to_dict())) == "gpus"
    assert live.apply(GpuTelemetry(snapshot=gpu_snapshot(util=60.0).to_dict())) == "gpus"
    assert live.telemetry is not None and len(live.telemetry.gpus) == 8
    assert list(live.gpu_util[0])[-2:] == [40.0, 60.0]


def test_snapshot_telemetry_is_drawn_when_no_event_came_yet():
    live = LiveState()
    live.load(ControlSnapshot(servers=demo_servers(), telemetry=no_driver_snapshot().to_dict()))
    assert live.telemetry is not None and not live.telemetry.available  # "no NVIDIA driver", not "waiting"
    # A newer event wins over an older snapshot read later.
    live2 = LiveState()
    live2.apply(GpuTelemetry(snapshot=gpu_snapshot(util=77.0).to_dict()))
    live2.load(ControlSnapshot(telemetry=no_driver_snapshot().to_dict()))
    assert live2.telemetry is not None and live2.telemetry.available


def test_running_servers_use_the_judgement_live_states():
    live = LiveState()
    live.load(ControlSnapshot(servers=demo_servers()))
    live.apply(ServerStateChanged(profile="sim-flashinfer-cutedsl", state="stopping"))
    assert sorted(live.running_servers()) == ["sim-flashinfer-cutedsl", "sim-flashinfer-cutlass"]


def test_log_total_keeps_counting_once_the_ring_is_full():
    from moe_tui.control.live import LOG_RING
    from moe_tui.events import ServerLogLine

    live = LiveState()
    live.load(ControlSnapshot(servers=demo_servers(), logs={"sim-flashinfer-cutlass": ("a", "b")}))
    for i in range(LOG_RING + 3):
        live.apply(ServerLogLine(profile="sim-flashinfer-cutlass", line=f"line {i}"))
    server = live.servers["sim-flashinfer-cutlass"]
    assert len(server.log) == LOG_RING  # the ring stopped growing ...
    assert server.log_total == 2 + LOG_RING + 3  # ... the count did not
    assert server.log[-1] == f"line {LOG_RING + 2}"
