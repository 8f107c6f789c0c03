"""The queue's records and the controller's answers about it (the control socket's plan, add, skip and
state), the campaign and store rows beside it, explain's plan and definition. See `moe_tui.records`."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from moe_tui.records.base import FreeForm, SpecJson, SpecOverrides
from moe_tui.records.run import GpuSnapshotJson


# -- the queue ------------------------------------------------------------------------------------
class QueueItemJson(TypedDict):
    id: int
    position: float
    campaign_id: int | None
    profile_name: str
    spec: SpecJson
    fingerprint: str
    repeat_index: int
    warmup: bool
    state: str
    attempts: int
    run_id: int | None
    error: str
    created_at: float
    updated_at: float
    concurrency: int
    num_prompts: int
    fresh_start: bool
    job: NotRequired[ExecutorJobJson]  # `queue list` only, for an item an executor ran as a batch job


class ExecutorJobJson(TypedDict):
    """The newest batch job a queue item became (`moe_tui.store.jobs.JobRow.to_dict`)."""

    executor: str
    job_id: str | None
    state: str
    node: str
    reason: str
    attempt: int
    outcome: str


# -- the controller's answers (moe_tui.run.ops, over the control socket) ------------------------------
class ItemStateJson(TypedDict):
    """skip/cancel of the running item: which item (None when it finished meanwhile) and its new state."""

    item_id: int | None
    state: str


class CampaignAddedJson(TypedDict):
    """A campaign (or an investigation's or explain's plan) added to the queue."""

    campaign_id: int
    item_ids: list[int]
    server_starts: NotRequired[dict[str, int]]  # server starts by queue policy (plain campaigns only)


class CampaignArgsJson(TypedDict):
    """The add_campaign/plan_campaign op's arguments from the TUI's form (`control.reads.campaign_args`)."""

    profiles: list[str]
    concurrencies: list[int]
    repeats: int
    spec: SpecOverrides
    policy: str
    prompts_per_concurrency: NotRequired[int]
    name: NotRequired[str]
    control: NotRequired[bool]


class ExplainCellJson(TypedDict):
    """A cell's breakdown as the explain screen shows it (`control.reads.StoreReads.explain_cell`)."""

    state: str  # none | pending | failed | ready
    message: str
    lines: list[str]
    simulated: bool


class DeletedJson(TypedDict):
    deleted: int


class PlannedItemJson(TypedDict):
    profile_name: str
    concurrency: int
    num_prompts: int
    repeat_index: int
    fingerprint: str


class ControlPlanJson(TypedDict):
    """A campaign's control concurrency (`store.queue_plan.CampaignPlan.control_plan`)."""

    concurrency: int | None  # None: no control planned
    starts_per_side: int
    extra_per_profile: int
    why: str


class CampaignRowJson(TypedDict):
    """One `campaigns` row, its definition decoded (`store.queue.RunQueue.campaign`, `.campaigns`)."""

    id: int
    name: str
    policy: str
    created_at: float
    # Each kind of campaign stores its own definition (a plan's CampaignPlan.definition(), explain's
    # ExplainDefinitionJson, an investigation's), and a store keeps those of older moe-tui versions:
    # a reader checks the kind it wants (`kind`) before it reads the rest.
    definition: FreeForm


class PlanAnswerJson(TypedDict):
    """The plan_campaign op's answer (`moe_tui.run.ops.plan_answer`); `items` capped for the socket."""

    name: str
    definition: FreeForm  # CampaignPlan.definition(): the campaign's stored definition (store.queue_plan)
    control: ControlPlanJson
    server_starts: dict[str, int]  # server starts by queue policy (CampaignPlan.start_costs)
    items: list[PlannedItemJson]


class CappedPlanJson(PlanAnswerJson):
    """The plan as the control socket sends it (`moe_tui.run.facade.capped_plan`): `items` cut to the
    first ones shown, their full count and the cells whose prompts are fewer than their concurrency."""

    item_count: int
    items_truncated: bool
    short_cells: list[list[int]]  # [concurrency, num_prompts] of each such cell
    planner_pid: NotRequired[int]  # the process that built it (a thread's is the controller's own)


class PausedJson(TypedDict):
    paused: bool


# -- rows the store reads back beside the runs (moe_tui.store.records) ------------------------------------
class ServerStartRow(TypedDict):
    """One `server_starts` row, its JSON columns decoded (`Store.server_start`, `Store.server_starts`)."""

    id: int
    profile_name: str
    profile: FreeForm  # ServerProfile.snapshot(): the user's profile table, secrets redacted
    argv: list[str]
    env: dict[str, str]
    log_path: str
    pid: int | None
    started_at: float
    ready_at: float | None
    stopped_at: float | None
    state: str
    reason: str
    resolved_backend: str | None
    backend_mismatch: bool
    sglang_version: str | None
    server_info: FreeForm | None  # SGLang's /server_info as it answered
    model_info: FreeForm | None  # SGLang's /model_info as it answered
    exit_code: int | None
    exit_signal: int | None
    log_tail: str | None


class GateSamplesRow(TypedDict):
    """One `gate_samples` row, its samples decoded (`Store.gate_samples`; moe_tui.gate.probe writes them)."""

    id: int
    created_at: float
    profile_name: str
    campaign_id: int | None
    server_start_id: int | None
    prompt_set: str
    resolved_backend: str | None
    samples: list[GateSampleJson]  # per prompt: token ids and logprobs as SGLang's /generate answered


class GateSampleJson(TypedDict):
    """One gate prompt's answer (`gate.correctness.GateSample.to_dict`): token ids and their logprobs."""

    prompt_id: str
    token_ids: list[int]
    logprobs: list[float | None]
    finish_reason: str | None


# -- explain (moe_tui.explain.store): the plan the control socket carries, the campaign definition stored ---------
class ExplainPlanItemJson(TypedDict):
    side: str  # "baseline" or "candidate"
    profile: str
    spec: SpecJson  # the cell's spec as profiled (explain.store.profiled_spec)


class ExplainPlanJson(TypedDict):
    """What `explain.store.plan_explain` proposes for a cell: one profiled item a side."""

    name: str
    kind: str  # explain.store.KIND
    baseline: str
    candidate: str
    concurrency: int
    cell_fingerprint: str
    steps: int  # decode steps SGLang's profiler captures
    items: list[ExplainPlanItemJson]
    stages: list[str]  # "DECODE", and "EXTEND" when the prefill is profiled too


class ExplainDefinitionJson(TypedDict):
    """An explain campaign's stored definition (`campaigns.definition_json`; explain.store.enqueue_explain)."""

    name: str
    kind: str
    baseline: str
    candidate: str
    concurrency: int
    cell_fingerprint: str
    steps: int
    stages: list[str]
    sides: list[str]
    profiles_dir: str | None


# -- the runner's state (`moe-tui run --status`, the control socket's snapshot op) ------------------------
class QueueSummaryJson(TypedDict):
    paused: bool
    counts: dict[str, int]
    total: int
    next_item_id: int | None
    pending_profiles: list[str]
    pending_profiles_shown: int


class RunnerStatusJson(TypedDict):
    """`moe-tui run --status --format json`: the runner's snapshot."""

    pid: int
    data_dir: str
    working: bool
    activity: str
    detail: str
    current_item: QueueItemJson | None
    current_run_id: int | None
    last_progress: FreeForm | None  # the last BenchProgress event (moe_tui.events), as the runner saw it
    last_finished: FreeForm | None  # the last RunFinished event
    queue: QueueSummaryJson
    session: dict[str, int]  # items this runner closed, by state
    servers: list[ManagedServerJson]  # each managed server's own description (servers.managed)
    telemetry: GpuSnapshotJson | None


class RunnerInfoJson(TypedDict, total=False):
    """`runner.json` in the data dir: who serves the control socket (`run.runner` writes it; a reader
    trusts it only when the file is ours and private, `run.rendezvous.read_runner_info`)."""

    pid: int
    socket: str
    started_at: float
    data_dir: str
    until_empty: bool
    log: str | None


# -- the servers the runner manages (moe_tui.servers.managed, the controller's server ops) -----------------
class ManagedServerJson(TypedDict):
    """`ManagedServer.describe()`: one managed server's state for status displays and the control socket."""

    profile: str
    state: str
    phase: str
    reason: str
    pid: int | None
    port: int | None
    base_url: str | None
    start_id: int | None
    log_path: str | None
    resolved_backend: str | None
    backend_mismatch: bool
    server_info_error: str | None
    sglang_version: str | None
    keep_running: bool
    exit_code: int | None
    exit_signal: int | None


class ServerStoppedJson(TypedDict):
    """The controller's answer to stopping a server (`stop`: the teardown's report, None: nothing ran)."""

    profile: str
    state: NotRequired[str]
    stop: str | None


class GateRanJson(TypedDict):
    """The correctness gate run on demand (`gate.probe.gate_server`): its stored gate id."""

    gate_id: int | None
    profile: str


# -- a batch job per queue item (moe_tui.executors: the job file in, the result file out) -----------------
class ExecutorJobFileJson(TypedDict):
    """The job file an executor hands its job (`executors.job.job_payload`)."""

    format: str
    version: int
    item: QueueItemJson
    attempt: int
    profiles_dir: str
    result_path: str
    executor: str


class JobResultJson(TypedDict):
    """The result file a job writes (`executors.job`; `executors.results.read_result` checks each field
    before `import_result` stores it: the file comes from another node)."""

    job_id: str
    item_id: int
    attempt: int
    node: str
    item_state: str
    item_error: str
    run: FreeForm | None  # the run's store columns as the job's private store held them (checked by key)
    server_start: FreeForm | None  # the server start's store row, less its id and pid
