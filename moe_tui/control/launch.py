"""Connecting a control client: profiles, store, and the client (attached or in-process).

`connect` is what `moe-tui` and `moe-tui demo` run (through `ui.launch.open_control_room`, which
adds the App), and what the screenshot script and the end-to-end tests use, so all of them
exercise the same startup. No Textual here.

Runner mode is the default: the campaign must survive the terminal (a dropped SSH session sends
SIGHUP; a killed TUI gets no say at all), so the controller lives in a detached runner process
(`moe-tui run --detach --stay` for this data dir) and the TUI only attaches to it over its Unix
socket. If a runner already holds the data dir the TUI attaches to it; otherwise it starts one and
waits for its socket. `--in-process` keeps the old mode (the controller inside the TUI, stopped
with it) for tests and for people who want nothing left behind.

`use_demo_home` points the data dir at a separate demo home (demo runs never mix with real ones);
a demo that starts its controller (runner or in-process) queues the demo campaign, paused, so `r`
starts it, unless that campaign is already queued or its profiles already hold runs (so `make demo`
twice never queues it twice); a demo that attaches to a runner already at work leaves its queue alone.

Every startup problem (corrupt store, no usable profile, a runner that will not start) raises
SystemExit with one line naming what and where; problems found among otherwise usable profiles
become warning toasts instead.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui import paths
from moe_tui.control.api import CampaignRequest, ControlClient
from moe_tui.records import Options, SpecOverrides

DEMO_CAMPAIGN = CampaignRequest(
    name="demo: sim cutlass vs cutedsl",
    profiles=("sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"),
    concurrencies=(1, 2, 10, 64, 256, 1024),  # the seed's question; 256 and 1024 run on a slower clock
    repeats=2,
    spec={"input_len": 128, "output_len": 32, "num_prompts": 16, "range_ratio": 1.0, "seed": 42},
    policy="abba",
    prompts_per_concurrency=2,
)


def campaign_defaults(simulated: bool) -> tuple[SpecOverrides, int | None]:
    """The spec fields and prompts per concurrency a new campaign starts from in the add form. On
    real profiles they are the spec's own defaults, which `moe-tui queue add` uses too (a campaign
    queued from the form and one from the CLI then share a fingerprint and compare); on simulated
    profiles, the demo's (what a new user has just seen run, fast on the emulator)."""
    if simulated:
        return dict(DEMO_CAMPAIGN.spec), DEMO_CAMPAIGN.prompts_per_concurrency
    from moe_tui.spec import BenchmarkSpec

    base = BenchmarkSpec()
    return {k: getattr(base, k) for k in ("input_len", "output_len", "num_prompts", "range_ratio", "seed")}, None


# Where the TUI's own settings (key remaps) live; the UI asks here rather than importing paths.
config_file = paths.config_file

# A runner's first answer on its socket: imports, store open, controller start.
RUNNER_START_WAIT_S = 30.0


@dataclass
class Connection:
    """A started control client and what its startup found worth telling."""

    client: ControlClient
    notes: list[str] = field(default_factory=list)
    started_runner: int | None = None  # pid of the runner this startup spawned, if any


def demo_home() -> Path:
    """MOE_TUI_HOME for the demo: beside the real data, never inside it."""
    override = paths.home_override()
    if override is not None and override.name == "demo-home":
        return override
    base = override if override is not None else Path(paths.data_dir())
    return base / "demo-home"


def connect(profiles_dir: Path, *, attach: bool | None = None, demo: bool = False,
            controller_options: Options | None = None) -> Connection:
    """Load profiles, open the store, and start a control client.

    attach=None (default): attach to this data dir's runner, starting a detached one if none runs;
    attach=True: attach only (refused when no runner runs); attach=False: host the controller in
    this process (refused when a runner holds the data dir). Raises SystemExit with a message."""
    from moe_tui.control.clients import AttachedClient, InProcessClient
    from moe_tui.profiles import load_profiles
    from moe_tui.run.rendezvous import RunnerBusy, RunnerUnavailable, runner_is_running
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    profiles_dir = Path(profiles_dir).expanduser().resolve()
    profile_set = load_profiles(profiles_dir)
    notes = list(profile_set.problems)
    if profile_set.duplicates:  # which file is meant cannot be guessed: refuse to open
        raise SystemExit("moe-tui: " + "; ".join(profile_set.duplicate_message(n) for n in sorted(profile_set.duplicates)))
    if not profile_set.profiles:
        raise SystemExit(f"moe-tui: no usable server profiles in {profiles_dir}"
                         + (f": {'; '.join(profile_set.problems)}" if profile_set.problems else
                            " (put *.toml profiles there, pass --profiles-dir, or try `moe-tui demo`)"))
    data_dir = paths.data_dir()
    try:
        store = Store(paths.store_path(), writer=attach is False)  # in-process: this process is the runner
    except StoreError as exc:
        raise SystemExit(f"moe-tui: {exc}") from None
    started_runner: int | None = None
    try:
        runner_pid = runner_is_running(data_dir)
        if attach is False:
            client: ControlClient = InProcessClient(store, profile_set.profiles, profiles_dir, data_dir,
                                             controller_options=controller_options)
            if demo:
                _pause_before_start(store)
        else:
            if runner_pid is None:
                if attach:
                    raise SystemExit(f"moe-tui: no runner holds {data_dir} (start one with "
                                     f"`{moe_tui_command('run', '--detach')}`, or run moe-tui without --attach)")
                if demo:
                    _pause_before_start(store)  # the runner works pending items the moment it starts
                started_runner = start_detached_runner(profiles_dir, data_dir, options=controller_options)
            client = AttachedClient(store, profile_set.profiles, data_dir)
        try:
            client.start()
        except RunnerBusy as exc:
            raise SystemExit(f"moe-tui: {exc} (attach to it: run `moe-tui` without --in-process)") from None
        except RunnerUnavailable as exc:
            raise SystemExit(f"moe-tui: cannot attach to the runner of {data_dir}: {exc}") from None
        except Exception as exc:
            raise SystemExit(f"moe-tui: cannot start the control room: {exc}") from None
        if demo and (attach is False or started_runner is not None):
            notes += _queue_demo_campaign(client, store)
        elif demo:
            notes.append("demo: attached to the runner already working this demo's queue")
    except StoreError as exc:
        raise SystemExit(f"moe-tui: {exc}") from None
    client.attach_command = attach_command(profiles_dir, demo=demo)
    if started_runner is not None:
        notes.append(f"started a detached runner (pid {started_runner}) for {data_dir}: campaigns keep running "
                     f"if this terminal goes away; `{client.attach_command}` attaches again")
    return Connection(client, notes, started_runner)


def moe_tui_command(*args: str, env: bool = True) -> str:
    """A `moe-tui` command line a user can paste from any folder: this data home's MOE_TUI_HOME when
    it is not the default one (`env`), and this install's own `moe-tui` by its absolute path (a venv's
    bin folder is rarely on PATH after `make demo`), else this interpreter with `-m moe_tui`. Paths
    under the home folder are written `~/...` (every shell expands a word's leading `~`): the line
    stays short enough to sit on one row of an 80-column dialog, where a terminal copies it whole."""
    override = paths.home_override() if env else None
    prefix = f"MOE_TUI_HOME={shlex.quote(str(override))} " if override is not None else ""
    script = Path(sys.executable).parent / "moe-tui"
    program = shell_path(script) if script.is_file() and os.access(script, os.X_OK) \
        else f"{shell_path(Path(sys.executable))} -m moe_tui"
    return " ".join([f"{prefix}{program}", *(shlex.quote(a) for a in args)])


def shell_path(path: Path) -> str:
    """`path` as one shell word: `~/rest` when it lies under the home folder and the rest needs no
    quoting (a quoted `~` is not expanded), else the path quoted as needed."""
    home = os.path.expanduser("~")
    text = str(path)
    if home not in ("", "/") and text.startswith(home + os.sep):
        rest = text[len(home) + 1:]
        if rest and shlex.quote(rest) == rest:
            return "~/" + rest
    return shlex.quote(text)


def attach_command(profiles_dir: Path, *, demo: bool = False) -> str:
    """The exact command that attaches to this data dir's runner again, from any folder: the data
    home when it is not the default one, the demo subcommand or the profiles folder. The demo's
    default home (`<default data dir>/demo-home`) is what `moe-tui demo` finds by itself, so its
    line names no MOE_TUI_HOME."""
    if demo:
        return moe_tui_command("demo", "--attach", env=not _is_default_demo_home())
    return f"{moe_tui_command('--attach')} --profiles-dir {shell_path(profiles_dir)}"


def _is_default_demo_home() -> bool:
    override = paths.home_override()
    return override is not None and override.resolve() == (paths.default_data_dir() / "demo-home").resolve()


def is_demo_home() -> bool:
    """Whether this process's data home is a demo's (`moe-tui demo` sets MOE_TUI_HOME to it)."""
    override = paths.home_override()
    return override is not None and override.name == "demo-home"


def start_detached_runner(profiles_dir: Path, data_dir: Path, wait_s: float = RUNNER_START_WAIT_S,
                          options: Options | None = None) -> int:
    """`moe-tui run --stay` in a new session for this data dir (what `moe-tui run --detach` does),
    waiting until it answers on its socket. Returns its pid. A runner that another TUI started in
    the meantime wins the lock; then this one exits and we attach to the winner."""
    from moe_tui.run.client import spawn_detached
    from moe_tui.run.rendezvous import lock_holder_pid, runner_is_running

    argv = [sys.executable, "-m", "moe_tui", "run", "--profiles-dir", str(profiles_dir), "--stay"]
    opts = options or {}
    for key, flag in (("request_timeout_s", "--request-timeout"), ("stall_timeout_s", "--stall-timeout")):
        if opts.get(key) is not None:
            argv += [flag, repr(float(opts[key]))]
    argv += [str(a) for a in opts.get("runner_args") or ()]  # `--executor slurm` and its options, as given
    log_path = paths.logs_dir() / f"runner-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        return spawn_detached(argv, data_dir, log_path, wait_s=wait_s)
    except RuntimeError as exc:
        if runner_is_running(data_dir):
            return lock_holder_pid(data_dir) or -1
        raise SystemExit(f"moe-tui: could not start a runner for {data_dir}: {exc}") from None


def _pause_before_start(store: Any) -> None:
    # The controller starts working pending items as soon as it starts; the demo waits for `r`.
    from moe_tui.store.queue import RunQueue

    RunQueue(store).pause()


def _queue_demo_campaign(client: ControlClient, store: Any) -> list[str]:
    from moe_tui.store.queue import RunQueue

    queue = RunQueue(store)
    counts = queue.counts()
    if counts.get("pending") or counts.get("running"):
        return ["demo: the queue already holds pending items; press r to resume"]
    # Idempotent: queued again into cells that hold its runs, the demo would turn every verdict
    # interim and double the work. A campaign already queued (any item not cancelled) or profiles
    # that already have runs mean: show them, queue nothing.
    if set(DEMO_CAMPAIGN.profiles) <= set(store.profile_names_with_runs()):
        return ["demo: the demo profiles already hold runs (Compare: 3); nothing queued again"]
    for camp in queue.campaigns():
        if camp["name"] == DEMO_CAMPAIGN.name and any(
                i.state != "cancelled" for i in queue.items(campaign_id=camp["id"])):
            return ["demo: the demo campaign is already in the queue (Queue: 2); nothing queued again"]
    client.add_campaign(DEMO_CAMPAIGN)
    return ["demo campaign queued (sim cutlass vs cutedsl, conc 1/2/10/64 x 2, interleaved): press r to start"]


def use_demo_home() -> Path:
    home = demo_home()
    os.environ["MOE_TUI_HOME"] = str(home)
    return home
