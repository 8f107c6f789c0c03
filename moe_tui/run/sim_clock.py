"""The emulator's clock per cell: a concurrency the client cannot keep up with runs slower.

`judgement.sim_cell_time_scale(profile scale, concurrency)` says how fast the emulator's clock may
run for one cell (the profile's scale, or slower at a high concurrency); it depends on nothing
else, so both sides of a comparison run a cell at the same scale. The runner sets it on the
emulator before every benchmark of a cell (`set_cell_clock`: `POST /sim/time_scale`, refused by
the emulator while requests run), on the same server start: the start's noise stays the start's,
only the clock changes. The run records it where every reader looks: its profile snapshot's
`sim.time_scale` is the scale the run ran at, with `sim.launch_time_scale` beside it when that
differs from the launch (`cell_snapshot`); the figures stay labelled simulated, and readers that
turn emulator figures back into the modelled box's (explain, roofline) use the run's scale.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from moe_tui.judgement import SIM_ENGINE, sim_cell_time_scale, sim_time_scale

if TYPE_CHECKING:
    from moe_tui.servers.managed import ManagedServer

SET_ATTEMPTS = 20  # 0.25 s apart: requests of a stopped run may still be draining
SET_RETRY_S = 0.25


class ClockError(RuntimeError):
    """The emulator would not take the cell's time scale."""


def cell_scale(profile: dict[str, Any], concurrency: int) -> float | None:
    """The time scale a profile (snapshot or `to_dict()`) runs a cell at; None for a real server."""
    if profile.get("engine") != SIM_ENGINE:
        return None
    return sim_cell_time_scale(sim_time_scale(profile), concurrency)


def cell_snapshot(snapshot: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """The profile snapshot as the cell ran: `sim.time_scale` the cell's scale, and the launch's
    kept as `sim.launch_time_scale` when they differ. Unchanged for a real server or the launch
    scale (a snapshot stored before per-cell clocks reads alike)."""
    scale = cell_scale(snapshot, concurrency)
    launch = sim_time_scale(snapshot)
    if scale is None or scale == launch:
        return snapshot
    sim = dict(snapshot.get("sim") or {})
    sim.update(time_scale=scale, launch_time_scale=launch)
    return {**snapshot, "sim": sim}


async def set_cell_clock(server: ManagedServer, concurrency: int) -> float | None:
    """Set the emulator's clock for a cell at `concurrency`; the scale in force (None: a real
    server, nothing sent). Raises ClockError when the emulator refuses it."""
    scale = cell_scale(server.profile.snapshot(), concurrency)
    if scale is None:
        return None
    import httpx

    from moe_tui.servers.keys import auth_headers

    last = ""
    async with httpx.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10.0,
                                 headers=auth_headers(server.base_url)) as http:
        for _ in range(SET_ATTEMPTS):
            try:
                resp = await http.post("/sim/time_scale", json={"time_scale": scale})
            except httpx.HTTPError as exc:
                raise ClockError(f"'{server.name}': could not set the emulator's time scale to {scale:g}: "
                                 f"{type(exc).__name__}: {exc}") from None
            if resp.status_code == 200:
                return scale
            last = f"HTTP {resp.status_code}: {resp.text.strip()[:200]}"
            if resp.status_code != 409:
                break
            await asyncio.sleep(SET_RETRY_S)
    raise ClockError(f"'{server.name}': the emulator refused time scale {scale:g} for concurrency "
                     f"{concurrency} ({last})")
