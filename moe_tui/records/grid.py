"""The comparison's JSON as typed records: `moe-tui compare --format json` (the grid, its control check
and extras), `moe-tui investigate --format json` (a plan, and earlier investigations' reports) and
`moe-tui roofline --format json`. Part of the published contract with `moe_tui.export.records`
(which holds the other exports and the shared parts); docs/schemas holds their schemas. They live
here, below the grid, compare, explain, investigate and roofline code, so the code that builds each
value returns its record (`moe_tui.export.grid_records` re-exports them under their published name).
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from moe_tui.records.base import FreeForm, SpecJson

# -- compare --format json (export: the same) --------------------------------------------------------
ControlState = Literal["agrees", "differs", "inconclusive", "absent"]  # judgement.CONTROL_STATES


class ControlJson(TypedDict):
    state: ControlState
    concurrency: int | None
    delta_pct: float | None
    ci_pct: list[float] | None
    margin_pct: float
    n_baseline: int
    n_candidate: int
    text: str
    environment_differences: list[str]
    overlapping: bool


class CellJson(TypedDict):
    concurrency: int
    metric: str
    verdict: str
    n_baseline: int
    n_candidate: int
    starts_baseline: int
    starts_candidate: int
    baseline_mean: float | None
    candidate_mean: float | None
    delta_pct: float | None
    ci_pct: list[float] | None
    ci_confidence: float | None
    ci_too_wide: bool  # the interval reaches past halving and doubling: it bounds nothing (no delta shown)
    uncontrolled: str | None
    provisional: bool  # a verdict from the runs so far while more are queued for the cell: it may change
    provisional_reason: str | None
    control_relative_pct: float | None
    control_relative_ci_pct: list[float] | None
    control_starts: list[int]
    reasons: list[str]
    # the emulator clock the cell ran at (x real time; simulated tok/s read x it); null when real or
    # real-time (written by `compare --format json`, not by the control socket's grid)
    sim_time_scale: NotRequired[float | None]


class RooflineRowJson(TypedDict):
    """One decode ceiling and its terms (`moe_tui.roofline.decode.Roofline.to_dict`)."""

    batch: int
    context: int
    gpu: str
    gpu_count: int
    hbm_gbps_total: float
    weight_bytes: dict[str, float]
    distinct_experts: float
    kv_bytes: float
    kv_replication: int
    total_bytes: float
    flops: float
    attention_flops: float
    t_mem_s: float
    t_compute_s: float
    bound: Literal["memory", "compute"]
    ceiling_tok_s: float
    notes: list[str]
    per_stream_tok_s: float
    step_ms: float


class RooflineCellJson(TypedDict):
    ceiling: RooflineRowJson | None
    measured_tok_s: float | None
    n: int
    pct_of_roofline: float | None
    why_not: str | None


class RooflineSidesJson(TypedDict):
    baseline: dict[str, RooflineCellJson]  # by concurrency (a JSON key is a string)
    candidate: dict[str, RooflineCellJson]


class GatePromptJson(TypedDict):
    prompt_id: str
    first_divergence: int | None
    identical: int
    compared: int
    mean_abs_logprob_diff: float | None
    baseline_prob_at_divergence: float | None
    accepted: bool
    why: str


class GateJson(TypedDict):
    """The correctness gate beside the grid (`moe_tui.gate.correctness.GateVerdict.to_dict`)."""

    status: str
    words: str
    identical_share: float | None
    mean_abs_logprob_diff: float | None
    first_divergence: int | None
    prompts: list[GatePromptJson]


class GridExtrasJson(TypedDict):
    gate: GateJson
    roofline: RooflineSidesJson


class CellInvestigationJson(TypedDict):
    concurrency: int
    metric: str
    state: str


class GridJson(TypedDict):
    """`moe-tui compare --format json`."""

    control: ControlJson
    cells: list[CellJson]
    extras: NotRequired[GridExtrasJson | None]  # the correctness gate and roofline beside the grid
    investigations: NotRequired[list[CellInvestigationJson]]
    sim_clock: NotRequired[str | None]  # the emulator clock in words, as the text export says it; null when real


# -- investigate --format json ---------------------------------------------------------------------
class SideSnapshotJson(TypedDict):
    n: int
    mean: float | None
    std: float | None
    run_ids: list[int]


class CellSnapshotJson(TypedDict):
    verdict: str
    delta_pct: NotRequired[float | None]
    ci_pct: NotRequired[list[float] | None]
    fingerprint: NotRequired[str | None]
    baseline: NotRequired[SideSnapshotJson]
    candidate: NotRequired[SideSnapshotJson]
    control: NotRequired[str]
    control_concurrency: NotRequired[int | None]


class ProposedItemJson(TypedDict):
    side: str
    profile: str
    concurrency: int
    spec: SpecJson
    role: str
    warmup: bool
    fresh_start: bool
    repeat_index: int


class ProposalJson(TypedDict):
    kind: str
    reason: str
    items: list[ProposedItemJson]
    minutes: float | None
    server_starts: int
    expect: str


class InvestigationPlanJson(TypedDict):
    """`moe-tui investigate --format json` (the plan, queued or with --dry-run)."""

    name: str
    baseline: str
    candidate: str
    concurrency: int
    metric: str
    cap: int
    min_effect_pct: float
    spread_pct: float | None
    before: CellSnapshotJson
    proposals: list[ProposalJson]
    notes: list[str]
    cautions: list[str]
    minutes: float | None
    server_starts: int


class InvestigationReportJson(TypedDict):
    """One earlier investigation of the cell (`moe-tui investigate --report --format json`: a list)."""

    name: str
    state: str
    before: CellSnapshotJson
    after: CellSnapshotJson
    settled: str  # "settled: better", "not settled ...", or "" when no repeats were planned
    flags: list[str]
    lines: list[str]


# -- roofline --format json ------------------------------------------------------------------------
class RooflineJson(TypedDict):
    """`moe-tui roofline PROFILE --format json`."""

    profile: str
    setup: str
    config: str
    gpu_source: str
    total_params: int
    active_params: int
    precision: dict[str, str]
    rows: list[RooflineRowJson]


# -- explain --format json ----------------------------------------------------------------------------
class ClassTimeJson(TypedDict):
    ms: float | None  # per step; None where the figure was not finite (JSON has no NaN)
    se: float | None


# A field named "class" cannot be written in the class syntax: these use the functional one.
KernelJson = TypedDict("KernelJson", {"name": str, "class": str, "ms_per_step": float | None,
                                      "calls_per_step": float | None})


class SideJson(TypedDict):
    label: str
    ranks: list[int]
    steps: int
    stage: str | None
    step_ms: float | None
    step_se: float | None
    classes: dict[str, ClassTimeJson]  # by kernel class
    other_top: list[str]
    top_kernels: list[KernelJson]


ClassDeltaJson = TypedDict("ClassDeltaJson", {
    "class": str, "words": str, "a_ms": float | None, "b_ms": float | None, "delta_ms": float | None,
    "noise_ms": float | None, "beyond_noise": bool, "share": float | None})


MovedKernelJson = TypedDict("MovedKernelJson", {"name": str, "class": str, "a_ms": float | None,
                                                "b_ms": float | None, "delta_ms": float | None})


class ExplanationJson(TypedDict):
    """`moe-tui explain A B -c N --format json` (and the `.json` an export writes beside it)."""

    a: SideJson
    b: SideJson
    classes: list[ClassDeltaJson]
    total: ClassDeltaJson
    moved: list[MovedKernelJson]
    summary: list[str]
    notes: list[str]
    extras: NotRequired[list[str]]
    simulated: NotRequired[bool]
    roofline: NotRequired[dict[str, FreeForm]]  # by side label: the decode ceiling beside the breakdown
    expert_load: NotRequired[dict[str, FreeForm]]  # by side label: the recorder's per-expert counts
    run_ids: NotRequired[dict[str, int]]  # the profiled run of each side ("baseline", "candidate")
    run_cv: NotRequired[float | None]  # the grid's run-to-run spread the noise bars assume



class MoeGemmJson(TypedDict):
    """A side's MoE GEMM time per step beside the time its GPU needs to read the expert weights the step
    touches (`explain.breakdown.moe_gemm_roofline`; x_roofline None where no floor is known)."""

    label: str
    moe_gemm_ms: float
    roofline_ms: float
    x_roofline: float | None


class ExpertLayerJson(TypedDict):
    """One model layer of an expert-load dump: its routed tokens, the busiest expert's and the mean."""

    layer: int
    tokens: int
    max: int
    mean: float
    imbalance: float | None


class ExpertLoadJson(TypedDict):
    """`explain.expert_load.ExpertLoad.to_dict()`: a side's per-layer expert load from its recorder dump."""

    source: str
    steps: int
    experts: int
    mean_imbalance: float | None
    worst_layer: int | None
    worst_imbalance: float | None
    layers: list[ExpertLayerJson]


class ExplainExtrasJson(TypedDict):
    """What explain adds beside a breakdown, by side label (`explain.store`; ExplanationJson's extras)."""

    roofline: dict[str, MoeGemmJson]
    expert_load: dict[str, ExpertLoadJson]
    run_ids: NotRequired[dict[str, int]]  # the profiled run of each side ("baseline", "candidate")
    run_cv: NotRequired[float | None]  # the grid's run-to-run spread the noise used (None: assumed)
