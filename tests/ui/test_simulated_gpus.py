"""The dashboard on the emulator's simulated GPUs: a real TP8 emulator with the power-cap,
foreign-process and lost-GPU faults, sampled by the control room's own sampler (no NVIDIA driver
here), shown by the real App: the panel says SIMULATED, the throttled GPUs carry PWR CAP, the lost
one GPU LOST, the foreign process is named, the schedulers are owned by the profile.

Snapshot tests: the dashboard at 120x40 and 80x24 with eight simulated GPUs from the emulator's
own GPU model (`moe_tui.sim.gpus`, fixed seed and fixed load: the SVG only changes with the UI)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from textual.widgets import DataTable

from moe_tui.sim.gpus import SimGpuBoard
from moe_tui.sim.launch import start_sim
from moe_tui.telemetry import ControlRoomSampler, GpuSample, TelemetrySnapshot, gpu_owners, sim_sources
from moe_tui.ui.widgets.gpu_panel import GpuPanel
from tests.sim_helpers import Loaded
from tests.support import loopback
from tests.ui.fakes import T0, RecordingAdapter, telemetry_message
from tests.ui.test_snapshots import build_app, feed
from tests.ui.waiting import workers_finished

FAULTS = ["--tp-size", "8", "--ep-size", "8", "--sim-time-scale", "20", "--sim-gpu-power-limit-w", "250",
          "--sim-gpu-foreign-process", "3", "--sim-gpu-lost", "5"]


def _sample_faulty_emulator(sim, adapter: RecordingAdapter) -> TelemetrySnapshot:
    rows = tuple(dataclasses.replace(r, pid=sim.proc.pid, port=sim.port) if r.profile == "sim-flashinfer-cutlass"
                 else r for r in adapter.servers)
    adapter.servers = rows
    deadline = time.monotonic() + 10
    while loopback.get(sim.base_url + "/server_info").json()["sim"]["foreign_gpu_pid"] is None:
        assert time.monotonic() < deadline, "the foreign process never appeared"
        time.sleep(0.1)
    with Loaded(sim.base_url, 8, input_len=32, output_len=32):
        time.sleep(1.8)
        return ControlRoomSampler(lambda: sim_sources(rows)).sample()


@pytest.mark.integration
async def test_dashboard_shows_simulated_gpus_owners_and_fault_badges(make_app):
    with start_sim(FAULTS) as sim:  # alive while the dashboard reads the process tree for owners
        await _check_dashboard(make_app, sim)


async def _check_dashboard(make_app, sim) -> None:
    adapter = RecordingAdapter()
    snapshot = _sample_faulty_emulator(sim, adapter)
    assert snapshot.simulated and len(snapshot.gpus) == 8
    app, _ = make_app(adapter=adapter)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        await workers_finished(app)
        # What the controller sends with each snapshot: the owners by judgement's one rule (the
        # emulator's schedulers are its parent's children), decided while the tree is alive.
        pids = {p.pid for g in snapshot.gpus for p in (g.processes or ())}
        app.post_message(telemetry_message(snapshot, gpu_owners(pids, {"sim-flashinfer-cutlass": sim.proc.pid})))
        await pilot.pause(0.3)
        panel = app.screen.query_one(GpuPanel)
        assert "SIMULATED" in str(panel.border_title)
        table = panel.query_one(DataTable)
        rows = {i: " ".join(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)}
        assert len(rows) == 8
        assert "GPU LOST" in rows[5] and "PWR CAP" not in rows[5]
        for i in (0, 1, 2, 3, 4, 6, 7):
            assert "PWR CAP" in rows[i], rows[i]
            if i != 3:  # GPU 3 lists the foreign process first (it must not be cut off)
                assert "sim-fl…-cutlass" in rows[i] or "sim-flashinfer-cutlass" in rows[i], rows[i]
        assert "sglang" not in " ".join(rows.values())  # no scheduler shown as a stranger
        foreign = next(p for p in snapshot.gpus[3].processes if p.name == "foreign-burn")
        assert "foreign-burn" not in rows[0] and "foreign-b" in rows[3], rows[3]
        owners = app.gpu_owners()
        assert owners.get(foreign.pid) is None  # foreign: nobody's
        schedulers = [p.pid for g in snapshot.gpus if not g.lost for p in g.processes if p.pid != foreign.pid]
        assert len(schedulers) == 7 and all(owners[pid] == "sim-flashinfer-cutlass" for pid in schedulers)


def _board_snapshot() -> TelemetrySnapshot:
    board = SimGpuBoard(list(range(8)), weights_gib=56.3, mem_fraction=0.85, seed=7)
    board.mem_phase = "graphs"
    board.set_holders([4242] * 8)  # the fake adapter's server pid: its own process on every GPU
    for k in range(40):  # 4 s of a busy engine at concurrency 10
        board.update(k * 0.1, 0.97, 10 / 1024)
    gpus = tuple(GpuSample.from_dict(d) for d in board.sample(T0, T0))
    return TelemetrySnapshot(t=T0, wall=T0, gpus=gpus, driver_version="simulated", simulated=True)


async def feed_simulated(pilot) -> None:
    await feed(pilot)
    snap = _board_snapshot()
    for _ in range(3):
        pilot.app.live.add_telemetry(snap)
    pilot.app.mark_dirty("gpus")
    await pilot.pause(0.3)


def test_dashboard_simulated(snap_compare):
    assert snap_compare(build_app(), terminal_size=(120, 40), run_before=feed_simulated)


def test_dashboard_simulated_80x24(snap_compare):
    assert snap_compare(build_app(), terminal_size=(80, 24), run_before=feed_simulated)
