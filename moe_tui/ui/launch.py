"""Building the control room: profiles, store, the adapter (in-process or attached) and the App.

`open_control_room` is what `moe-tui` and `moe-tui demo` run, and what the screenshot script and
the end-to-end test use, so all of them exercise the same startup. `prepare_demo` points the data
dir at a separate demo home (demo runs never mix with real ones) and queues the demo campaign,
paused, so `r` starts it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui import paths
from moe_tui.ui.adapter import CampaignRequest

DEMO_CAMPAIGN = CampaignRequest(
    name="demo: sim cutlass vs cutedsl",
    profiles=("sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"),
    concurrencies=(1, 2, 10, 64),
    repeats=2,
    spec={"input_len": 128, "output_len": 32, "num_prompts": 16, "range_ratio": 1.0, "seed": 42},
    policy="interleaved",
    prompts_per_concurrency=2,
)


@dataclass
class ControlRoom:
    app: Any
    adapter: Any
    notes: list[str] = field(default_factory=list)


def demo_home() -> Path:
    """MOE_TUI_HOME for the demo: beside the real data, never inside it."""
    override = paths.home_override()
    if override is not None and override.name == "demo-home":
        return override
    base = override if override is not None else Path(paths.data_dir())
    return base / "demo-home"


def open_control_room(profiles_dir: Path, *, attach: bool | None = None, demo: bool = False,
                      sample_gpus: bool = True, controller_options: dict[str, Any] | None = None) -> ControlRoom:
    """Load profiles, open the store, connect the adapter (attach to a runner if one holds this
    data dir, unless told otherwise), and build the App. Raises SystemExit with a message."""
    from moe_tui.profiles import load_profiles
    from moe_tui.runner import RunnerBusy, runner_is_running
    from moe_tui.store import Store
    from moe_tui.ui.adapters import InProcessAdapter, RunnerAdapter
    from moe_tui.ui.app import MoeTuiApp
    from moe_tui.ui.keymap import load_keymap

    profile_set = load_profiles(profiles_dir)
    notes = list(profile_set.problems)
    if not profile_set.profiles:
        raise SystemExit(f"moe-tui: no usable server profiles in {profiles_dir}"
                         + (f": {'; '.join(profile_set.problems)}" if profile_set.problems else
                            " (put *.toml profiles there, pass --profiles-dir, or try `moe-tui demo`)"))
    data_dir = paths.data_dir()
    store = Store(paths.store_path())
    runner_pid = runner_is_running(data_dir)
    use_runner = runner_pid is not None if attach is None else attach
    if use_runner:
        adapter: Any = RunnerAdapter(store, profile_set.profiles, data_dir)
    else:
        adapter = InProcessAdapter(store, profile_set.profiles, profiles_dir, data_dir,
                                   controller_options=controller_options)
    if demo and not use_runner:
        _pause_before_start(store)
    try:
        adapter.start()
    except RunnerBusy as exc:
        raise SystemExit(f"moe-tui: {exc} (attach to it with `moe-tui --attach`)") from None
    except Exception as exc:
        raise SystemExit(f"moe-tui: cannot start the control room: {exc}") from None
    if demo:
        notes += _queue_demo_campaign(adapter, store)
    keymap, problems = load_keymap(paths.config_file())
    notes += problems
    subtitle = adapter.mode + ("  ·  DEMO: simulated servers, no GPU needed" if demo else "")
    app = MoeTuiApp(adapter, keymap=keymap, sample_gpus=sample_gpus, subtitle=subtitle,
                    startup_notes=tuple(notes))
    if demo:
        app.compare_pair = DEMO_CAMPAIGN.profiles[:2]  # baseline cutlass, candidate cutedsl
    return ControlRoom(app, adapter, notes)


def _pause_before_start(store: Any) -> None:
    # The controller starts working pending items as soon as it starts; the demo waits for `r`.
    from moe_tui.queue import RunQueue

    RunQueue(store).pause()


def _queue_demo_campaign(adapter: Any, store: Any) -> list[str]:
    from moe_tui.queue import RunQueue

    queue = RunQueue(store)
    counts = queue.counts()
    if counts.get("pending") or counts.get("running"):
        return ["demo: the queue already holds pending items; press r to resume"]
    adapter.add_campaign(DEMO_CAMPAIGN)
    return ["demo campaign queued (sim cutlass vs cutedsl, conc 1/2/10/64 x 2, interleaved): press r to start"]


def use_demo_home() -> Path:
    home = demo_home()
    os.environ["MOE_TUI_HOME"] = str(home)
    return home
