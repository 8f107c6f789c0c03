"""The one typed control API: `ControlClient`, and the small frozen view rows it returns.

The TUI either hosts a controller in its own process or attaches to a detached runner over its
Unix socket. Both look the same to every screen, to scripts and to tests: a client that

- streams core events (`moe_tui.events`) to one callback, from any thread;
- forwards commands (start/stop a server, pause/resume/skip, queue edits, add a campaign);
- reads what the core recorded (queue rows, runs, the comparison grid, exports) from the store.

Every method may block (a socket round trip, a SQLite read): the App only ever calls them from
thread workers. The view rows below are small, frozen shapes, so a change in a core class touches
the control package and nothing else. No Textual here. Implementations: `clients.InProcessClient`,
`clients.AttachedClient` (and tests' `RecordingClient`).
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moe_tui.events import Event
from moe_tui.executors.nodes import NodeRow
from moe_tui.judgement import is_simulated
from moe_tui.records import (
    BenchSummary,
    CampaignAddedJson,
    ExplainCellJson,
    FreeForm,
    GpuSnapshotJson,
    SpecOverrides,
    StoredProvenance,
)


@dataclass(frozen=True)
class ServerRow:
    """One profile's server as the dashboard shows it."""

    profile: str
    engine: str  # "sglang" or "sim"
    backend: str  # the backend the profile asks for
    port: int
    gpus: tuple[int, ...] = ()
    state: str = "stopped"
    phase: str = ""
    pid: int | None = None
    resolved_backend: str | None = None
    backend_mismatch: bool = False
    ready_since: float | None = None  # wall clock; uptime counts from here

    @property
    def simulated(self) -> bool:
        return is_simulated(profile={"engine": self.engine})


@dataclass(frozen=True)
class QueueRow:
    """One queue item."""

    id: int
    position: float
    profile: str
    concurrency: int
    repeat_index: int
    fingerprint: str
    state: str  # pending, running, done, failed, skipped, cancelled, interrupted
    attempts: int = 0
    run_id: int | None = None
    error: str = ""
    campaign: str = ""
    # The item's newest batch job (an executor's: `store.jobs`), "" when no executor worked it.
    job_id: str = ""
    job_node: str = ""
    job_state: str = ""  # the scheduler's word: PENDING, RUNNING, COMPLETING, FAILED, NODE_FAIL, ...

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]

    @property
    def text(self) -> str:
        """What the Queue screen's `/` filter matches (`store.queue_page` builds the same in SQL)."""
        return f"{self.id} {self.profile} conc {self.concurrency} {self.state} {self.campaign} {self.error} {self.fingerprint}"


QUEUE_PAGE = 100  # items a view reads at once (a tall terminal shows about 60)


@dataclass(frozen=True)
class QueueWindow:
    """One page of the queue, as the Queue screen shows it: `rows` start at `offset` among the
    `total` items the filter `words` keeps; `counts` are every item's states; `current` is the
    row of the item the controller runs, wherever it is."""

    offset: int = 0
    total: int = 0
    rows: tuple[QueueRow, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    current: QueueRow | None = None
    words: tuple[str, ...] = ()

    def row(self, item_id: int | None) -> QueueRow | None:
        if self.current is not None and self.current.id == item_id:
            return self.current
        return next((r for r in self.rows if r.id == item_id), None)

    @classmethod
    def of(cls, rows: Sequence[QueueRow], *, offset: int = 0, limit: int = QUEUE_PAGE, words: Sequence[str] = (),
           around: int | None = None, current: int | None = None) -> QueueWindow:
        """The page `store.queue_page.read_page` answers, cut from rows in memory (fakes, tests)."""
        lowered = [w.lower() for w in words if w]
        kept = [r for r in rows if all(w in r.text.lower() for w in lowered)] if lowered else list(rows)
        offset = max(0, offset)
        at = next((n for n, r in enumerate(kept) if r.id == around), None) if around is not None else None
        if at is not None and not offset <= at < offset + limit:
            offset = at - limit // 2
        offset = max(0, min(offset, len(kept) - limit))
        counts = dict(collections.Counter(r.state for r in rows))
        return cls(offset=offset, total=len(kept), rows=tuple(kept[offset:offset + limit]), counts=counts,
                   current=next((r for r in rows if r.id == current), None) if current is not None else None,
                   words=tuple(words))


@dataclass(frozen=True)
class ControlSnapshot:
    """Everything the UI needs to paint itself before the first event arrives."""

    servers: tuple[ServerRow, ...] = ()
    queue: QueueWindow = field(default_factory=QueueWindow)  # the queue's first page
    activity: str = "idle"
    detail: str = ""
    paused: bool = False
    current_item: int | None = None
    logs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # profile -> recent log lines
    telemetry: GpuSnapshotJson | None = None  # the controller's latest GPU snapshot (TelemetrySnapshot.to_dict())
    notices: tuple[str, ...] = ()  # said once when the UI opens (e.g. the store has grown past its threshold)


@dataclass(frozen=True)
class CampaignRequest:
    """What the add-campaign form collects; the core expands it into queue items."""

    name: str
    profiles: tuple[str, ...]
    concurrencies: tuple[int, ...]
    repeats: int
    spec: SpecOverrides  # BenchmarkSpec fields except max_concurrency
    policy: str
    prompts_per_concurrency: int | None = None  # num_prompts = max(spec num_prompts, this x concurrency)
    control: bool = True  # the control concurrency's extra repeats (the CLI's --no-control turns them off)


@dataclass(frozen=True)
class CampaignPreview:
    """What adding a CampaignRequest would queue, as the core plans it (op plan_campaign)."""

    name: str  # the request's, or the default the queue gives an unnamed campaign
    items: int  # every item queued, the control's repeats included
    grid_items: int  # profiles x concurrencies x repeats, what the form's fields multiply to
    control_items: int  # the control concurrency's extra repeats (items - grid_items)
    control_concurrency: int | None
    control_why: str
    server_starts: dict[str, int]
    short_cells: tuple[tuple[int, int], ...] = ()  # (concurrency, num_prompts) that can never reach it


@dataclass(frozen=True)
class RunView:
    """One recorded run, for the run detail screen."""

    id: int
    profile: str
    status: str
    fingerprint: str
    spec: FreeForm  # the run's stored spec: canonical for moe-tui's runs, an imported file's own otherwise
    provenance: StoredProvenance
    summary: BenchSummary
    flags: tuple[str, ...]
    error: str = ""
    simulated: bool = False
    latencies_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)  # ttft, latency, itl
    roofline: tuple[tuple[str, str], ...] = ()  # issue 15: (term, value) of the decode ceiling


class ControlClient(abc.ABC):
    """What the control room needs from the core: events in, commands out, recorded data read."""

    #: shown in the header: "in-process" or "attached to runner <socket>"
    mode: str = "in-process"
    #: the controller may live on after the TUI exits (a detached runner)
    can_detach: bool = False
    #: the data dir this client's store and runner live in (shown in the header); None in fakes
    data_dir: Path | None = None
    #: the exact shell command that attaches to this data dir's runner again (set by `connect`)
    attach_command: str = "moe-tui"

    def start(self) -> None:  # noqa: B027 (optional hook: the fakes have nothing to start)
        """Start the controller or connect to the runner (raises runner.RunnerBusy/RunnerUnavailable)."""

    # -- events ------------------------------------------------------------------------------
    @abc.abstractmethod
    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback(event)` for every core event, from any thread; returns unsubscribe."""

    # -- reads -------------------------------------------------------------------------------
    @abc.abstractmethod
    def snapshot(self) -> ControlSnapshot: ...

    @abc.abstractmethod
    def queue_rows(self) -> tuple[QueueRow, ...]:
        """Every item in queue order (a full read: commands and tests, not screens)."""

    def queue_window(self, offset: int = 0, limit: int = QUEUE_PAGE, words: Sequence[str] = (),
                     around: int | None = None, current: int | None = None) -> QueueWindow:
        """One page of the queue (`QueueWindow`): `limit` items from `offset` among those holding
        every filter word; centred on item `around` if it is kept but outside that page; with the
        row of item `current`. Store-backed clients read only that page."""
        return QueueWindow.of(self.queue_rows(), offset=offset, limit=limit, words=words, around=around,
                              current=current)

    def node_rows(self) -> tuple[NodeRow, ...]:
        """The batch jobs' nodes with their relayed GPUs and which job owns each (`executors.nodes`):
        the dashboard's node panel. None for a client that reads no store."""
        return ()

    @abc.abstractmethod
    def profile_names(self) -> list[str]: ...

    @abc.abstractmethod
    def policies(self) -> dict[str, str]:
        """Ordering policy name -> one-line description."""

    @abc.abstractmethod
    def restart_counts(self, request: CampaignRequest) -> dict[str, int]:
        """Server starts `request` would cost under each ordering policy (raises ValueError on bad input)."""

    def campaign_preview(self, request: CampaignRequest) -> CampaignPreview:
        """Exactly what `add_campaign(request)` would queue (raises ValueError on bad input)."""
        raise NotImplementedError("this client cannot preview campaigns")

    @abc.abstractmethod
    def compared_profiles(self) -> list[str]:
        """Profiles with recorded runs, and the newest campaign's before their first runs (the
        comparison pickers' choices)."""

    def compare_direction(self) -> tuple[str, str] | None:
        """(baseline, candidate) the Compare screen opens with (`control.direction`): the user's
        last pick for this data dir, else the latest campaign's order, else the first two."""
        from moe_tui.control.direction import choose

        return choose(self.compared_profiles(), None, None)

    def remember_direction(self, baseline: str, candidate: str) -> None:  # noqa: B027 (optional)
        """Keep the user's pick for the next session on this data dir."""

    @abc.abstractmethod
    def comparison(self, baseline: str, candidate: str, include_flagged: bool = False,
                   accept_uncontrolled: bool = False) -> Any:
        """The core's comparison grid model (`moe_tui.compare`); `include_flagged` averages
        suspect runs in (those cells then never carry a verdict); `accept_uncontrolled` shows verdicts
        the control check did not back, labelled "uncontrolled"."""

    @abc.abstractmethod
    def run_view(self, run_id: int) -> RunView | None: ...

    @abc.abstractmethod
    def log_lines(self, profile: str, limit: int = 2000) -> list[str]: ...

    # -- commands ----------------------------------------------------------------------------
    @abc.abstractmethod
    def start_server(self, profile: str) -> None: ...

    @abc.abstractmethod
    def stop_server(self, profile: str) -> None: ...

    @abc.abstractmethod
    def pause(self) -> None: ...

    @abc.abstractmethod
    def resume(self) -> None: ...

    @abc.abstractmethod
    def skip(self) -> None: ...

    @abc.abstractmethod
    def retry(self, item_id: int) -> None: ...

    @abc.abstractmethod
    def cancel(self, item_id: int) -> None: ...

    @abc.abstractmethod
    def delete(self, item_id: int) -> None: ...

    @abc.abstractmethod
    def move(self, item_id: int, direction: str) -> None:
        """Move a pending item "up" or "down" among the pending items."""

    @abc.abstractmethod
    def add_campaign(self, request: CampaignRequest) -> int:
        """Validate and enqueue; raises ValueError naming the bad field, storing nothing."""

    @abc.abstractmethod
    def export(self, baseline: str, candidate: str, fmt: str) -> Path:
        """Write the comparison as `fmt` ("markdown" or "csv"); returns the file written."""

    # -- investigations (issue 17): concrete so an adapter without them still builds ------------
    def investigation_plan(self, baseline: str, candidate: str, concurrency: int, metric: str) -> Any:
        """The follow-up the grid proposes for one cell (`moe_tui.investigate.model.InvestigationPlan`)."""
        raise NotImplementedError("this adapter cannot plan investigations")

    def queue_investigation(self, plan: Any) -> CampaignAddedJson:
        """Queue a plan as one campaign; returns {"campaign_id", "item_ids"}."""
        raise NotImplementedError("this adapter cannot queue investigations")

    # -- explain (issue 25) -------------------------------------------------------------------
    def explain_cell(self, baseline: str, candidate: str, concurrency: int) -> ExplainCellJson:
        """The cell's breakdown: {"state": none|pending|failed|ready, "message", "lines"}."""
        raise NotImplementedError("this adapter cannot explain cells")

    def queue_explain(self, baseline: str, candidate: str, concurrency: int) -> CampaignAddedJson:
        """Queue one profiled run a side at the cell; returns {"campaign_id", "item_ids"}."""
        raise NotImplementedError("this adapter cannot queue profiled runs")

    @abc.abstractmethod
    def shutdown(self, stop_servers: bool) -> None:
        """The TUI is leaving: stop the servers, or leave them to a detached runner."""
