"""The emulator's clock per cell: a concurrency the client cannot keep up with runs slower.

`judgement.sim_cell_time_scale(profile scale, concurrency)` says how fast the emulator's clock may
run for one cell (the profile's scale, or slower at a high concurrency); it depends on nothing
else, so both sides of a comparison run a cell at the same scale. The runner sets it on the
emulator before every benchmark of a cell (`set_cell_clock`: `POST /sim/time_scale`, refused by
the emulator while requests run), on the same server start: the start's noise stays the start's,
only the clock changes. The run records it as a property of the run, not of its launch: its
provenance's `sim_clock` (`cell_clock`: the cell's time scale beside the launch's), the same on
both sides of a cell; the profile snapshot stays the launch settings, so the grid sees neither a
confounder nor an edited profile. The figures stay labelled simulated; readers that turn emulator
figures back into the modelled box's use `judgement.run_time_scale(profile, provenance)`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from moe_tui.judgement import (
    CELL_CLOCK_BUDGET,
    CELL_CLOCK_FREE_STREAMS,
    SIM_ENGINE,
    sim_cell_time_scale,
    sim_time_scale,
)
from moe_tui.profiles import ProfileSettings
from moe_tui.records import SimClockJson

if TYPE_CHECKING:
    from moe_tui.servers.managed import ManagedServer

SET_ATTEMPTS = 20  # 0.25 s apart: requests of a stopped run may still be draining
SET_RETRY_S = 0.25


class ClockError(RuntimeError):
    """The emulator would not take the cell's time scale."""


def cell_scale(profile: ProfileSettings, concurrency: int) -> float | None:
    """The time scale a profile (snapshot or `to_dict()`) runs a cell at; None for a real server."""
    if profile.get("engine") != SIM_ENGINE:
        return None
    return sim_cell_time_scale(sim_time_scale(profile), concurrency, stream_interval(profile))


def stream_interval(profile: ProfileSettings) -> int:
    """The profile's `--stream-interval` (SGLang's: one chunk every N tokens), 1 when not given."""
    from moe_tui.profiles import _flag_map

    value = _flag_map(tuple(str(a) for a in profile.get("extra_args") or ())).get("--stream-interval")
    try:
        return max(1, int(str(value)))
    except (TypeError, ValueError):
        return 1


def cell_clock(profile: ProfileSettings, concurrency: int) -> SimClockJson | None:
    """The run's `sim_clock` provenance: the cell's time scale beside the launch's, and why; None
    for a real server or a cell at the launch's scale (such runs read as before)."""
    scale = cell_scale(profile, concurrency)
    launch = sim_time_scale(profile)
    if scale is None or scale == launch:
        return None
    return {"time_scale": scale, "launch_time_scale": launch, "concurrency": concurrency,
            "rule": f"judgement.sim_cell_time_scale: above {CELL_CLOCK_FREE_STREAMS} streams at most "
                    f"{CELL_CLOCK_BUDGET:g}/sqrt(concurrency) times real time, so one client keeps up"}


async def set_cell_clock(server: ManagedServer, concurrency: int) -> float | None:
    """Set the emulator's clock for a cell at `concurrency`; the scale in force (None: a real
    server, nothing sent). Raises ClockError when the emulator refuses it."""
    scale = cell_scale(server.profile.snapshot(), concurrency)
    if scale is None:
        return None
    # A start runs at its launch's scale until a cell asks for another: nothing to send then (a
    # server that is no full emulator, a test's stand-in, need not know the endpoint).
    # The scale set is kept on the server, with the start's pid (a restart runs at its launch's scale again).
    in_force = getattr(server, "sim_clock", None)
    current = in_force[1] if in_force is not None and in_force[0] == server.pid else sim_time_scale(server.profile.snapshot())
    if current == scale:
        return scale
    import httpx

    from moe_tui.servers.keys import server_client

    last = ""
    async with server_client(server.base_url, 10.0) as http:
        for _ in range(SET_ATTEMPTS):
            try:
                resp = await http.post("/sim/time_scale", json={"time_scale": scale})
            except httpx.HTTPError as exc:
                raise ClockError(f"'{server.name}': could not set the emulator's time scale to {scale:g}: "
                                 f"{type(exc).__name__}: {exc}") from None
            if resp.status_code == 200 or (resp.status_code == 404 and scale == sim_time_scale(server.profile.snapshot())):
                server.sim_clock = (server.pid, scale)
                return scale  # 404: an emulator without a settable clock, which the launch's scale suits
            last = f"HTTP {resp.status_code}: {resp.text.strip()[:200]}"
            if resp.status_code != 409:
                break
            await asyncio.sleep(SET_RETRY_S)
    raise ClockError(f"'{server.name}': the emulator refused time scale {scale:g} for concurrency "
                     f"{concurrency} ({last})")
