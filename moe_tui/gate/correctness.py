"""Is the faster backend still right? Compare a candidate's greedy outputs with the baseline's.

Both sides answered the same fixed prompts at temperature 0 with logprobs. Per prompt: the first
position where the token ids differ, the share of identical tokens (position by position), and the
mean |logprob difference| over the shared prefix (where both chose the same token, so the two
logprobs measure the same event). Reduced-precision kernels legitimately reorder sums, so
logprobs wobble and a near-tie can flip greedy decoding; after a flip the continuations differ
wholesale, which says nothing about the kernel. The tolerance therefore
- accepts a mean |logprob difference| up to `max_mean_abs_logprob_diff` nats over shared prefixes;
- accepts a divergence at a near tie: where the baseline's chosen token had probability below
  `near_tie_prob` (another token may have been within noise of it);
- rejects a divergence where the baseline was sure (p >= near_tie_prob): a kernel that changes a
  confident greedy choice computes something else.
Result: passed / output_differs / not_comparable, with the reason in words. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from moe_tui.records import GateSampleJson
from moe_tui.records.grid import GateJson, GatePromptJson

PASSED = "passed"
OUTPUT_DIFFERS = "output_differs"
NOT_COMPARABLE = "not_comparable"


@dataclass(frozen=True)
class Tolerance:
    # FP4/FP8 MoE kernels with different accumulation orders move logprobs by ~1e-3..1e-2 nats;
    # 0.1 leaves an order of magnitude of room and still catches a wrong kernel (>0.3 typical).
    max_mean_abs_logprob_diff: float = 0.10
    # A greedy flip where the baseline's token had p < 0.6 can be a near tie under noise.
    near_tie_prob: float = 0.6


@dataclass(frozen=True)
class GateSample:
    """One prompt's greedy answer: output token ids and their logprobs (None where unknown)."""

    prompt_id: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    finish_reason: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateSample:
        return cls(str(data["prompt_id"]), tuple(int(t) for t in data["token_ids"]),
                   tuple(None if v is None else float(v) for v in data["logprobs"]),
                   data.get("finish_reason"))

    def to_dict(self) -> GateSampleJson:
        return {"prompt_id": self.prompt_id, "token_ids": list(self.token_ids),
                "logprobs": list(self.logprobs), "finish_reason": self.finish_reason}


@dataclass(frozen=True)
class PromptComparison:
    prompt_id: str
    first_divergence: int | None  # None: identical token ids
    identical: int
    compared: int  # positions compared: the longer of the two outputs
    mean_abs_logprob_diff: float | None  # over the shared prefix; None without logprobs
    baseline_prob_at_divergence: float | None
    accepted: bool
    why: str

    def to_dict(self) -> GatePromptJson:
        return GatePromptJson(prompt_id=self.prompt_id, first_divergence=self.first_divergence, identical=self.identical,
                              compared=self.compared, mean_abs_logprob_diff=self.mean_abs_logprob_diff,
                              baseline_prob_at_divergence=self.baseline_prob_at_divergence, accepted=self.accepted,
                              why=self.why)


@dataclass(frozen=True)
class GateVerdict:
    status: str  # passed / output_differs / not_comparable
    words: str
    prompts: tuple[PromptComparison, ...] = field(default_factory=tuple)
    identical_share: float | None = None
    mean_abs_logprob_diff: float | None = None
    first_divergence: int | None = None  # earliest over all prompts

    @property
    def output_differs(self) -> bool:
        return self.status == OUTPUT_DIFFERS

    def to_dict(self) -> GateJson:
        return {"status": self.status, "words": self.words, "identical_share": self.identical_share,
                "mean_abs_logprob_diff": self.mean_abs_logprob_diff, "first_divergence": self.first_divergence,
                "prompts": [p.to_dict() for p in self.prompts]}


def _prefix_logprob_diffs(base: GateSample, cand: GateSample, upto: int) -> list[float]:
    diffs = []
    for i in range(upto):
        a = base.logprobs[i] if i < len(base.logprobs) else None
        b = cand.logprobs[i] if i < len(cand.logprobs) else None
        if a is not None and b is not None:
            diffs.append(abs(a - b))
    return diffs


def compare_prompt(base: GateSample, cand: GateSample, tol: Tolerance = Tolerance()) -> PromptComparison:
    a, b = base.token_ids, cand.token_ids
    common = min(len(a), len(b))
    first = next((i for i in range(common) if a[i] != b[i]), None)
    if first is None and len(a) != len(b):
        first = common  # one stopped earlier: diverges where the shorter ends
    compared = max(len(a), len(b))
    identical = sum(1 for i in range(common) if a[i] == b[i])
    diffs = _prefix_logprob_diffs(base, cand, common if first is None else first)
    mean_diff = sum(diffs) / len(diffs) if diffs else None
    p_div = None
    lp_first = base.logprobs[first] if first is not None and first < len(base.logprobs) else None
    if lp_first is not None:
        p_div = math.exp(lp_first)
    noisy = mean_diff is not None and mean_diff > tol.max_mean_abs_logprob_diff
    if first is None:
        accepted, why = not noisy, "identical tokens"
    elif p_div is None:
        accepted, why = False, f"diverges at token {first} and the baseline has no logprob there to show a near tie"
    elif p_div < tol.near_tie_prob:
        accepted, why = not noisy, (f"diverges at token {first}, a near tie (baseline token p={p_div:.2f} "
                                    f"< {tol.near_tie_prob:g}): reduced-precision noise can flip it")
    else:
        accepted, why = False, (f"diverges at token {first} where the baseline was sure "
                                f"(p={p_div:.2f} for id {a[first] if first < len(a) else 'end'}, "
                                f"candidate chose {b[first] if first < len(b) else 'to stop'})")
    if noisy:
        why += (f"; mean |logprob diff| {mean_diff:.3f} nats over the shared prefix exceeds "
                f"{tol.max_mean_abs_logprob_diff:g}")
    return PromptComparison(base.prompt_id, first, identical, compared, mean_diff, p_div, accepted, why)


def compare_gate(baseline: Sequence[GateSample], candidate: Sequence[GateSample],
                 tol: Tolerance = Tolerance(), *, baseline_set: str = "", candidate_set: str = "") -> GateVerdict:
    """The gate verdict of a candidate against the baseline (same prompt set on both sides)."""
    if baseline_set and candidate_set and baseline_set != candidate_set:
        return GateVerdict(NOT_COMPARABLE, f"not comparable: prompt sets differ ({baseline_set} vs {candidate_set})")
    if not baseline or not candidate:
        side = "baseline" if not baseline else "candidate"
        return GateVerdict(NOT_COMPARABLE, f"not comparable: no gate samples for the {side}")
    by_id = {s.prompt_id: s for s in candidate}
    missing = [s.prompt_id for s in baseline if s.prompt_id not in by_id]
    if missing:
        return GateVerdict(NOT_COMPARABLE, f"not comparable: the candidate lacks prompt(s) {', '.join(missing[:5])}")
    rows = tuple(compare_prompt(s, by_id[s.prompt_id], tol) for s in baseline)
    identical = sum(r.identical for r in rows)
    compared = sum(r.compared for r in rows)
    share = identical / compared if compared else 1.0
    diffs = [d for s in baseline for d in _prefix_logprob_diffs(
        s, by_id[s.prompt_id], _first_or_len(rows, s.prompt_id, s))]
    mean_diff = sum(diffs) / len(diffs) if diffs else None
    divergences = [r.first_divergence for r in rows if r.first_divergence is not None]
    first = min(divergences) if divergences else None
    stats = (f"{share:.1%} identical tokens over {len(rows)} prompts"
             + (f", first divergence at token {first}" if first is not None else "")
             + (f", mean |logprob diff| {mean_diff:.4f} nats" if mean_diff is not None else ""))
    bad = [r for r in rows if not r.accepted]
    if bad:
        worst = bad[0]
        words = f"output differs: prompt {worst.prompt_id} {worst.why}; {len(bad)} of {len(rows)} prompts beyond tolerance; {stats}"
        return GateVerdict(OUTPUT_DIFFERS, words, rows, share, mean_diff, first)
    return GateVerdict(PASSED, f"same output within tolerance: {stats}", rows, share, mean_diff, first)


def _first_or_len(rows: Sequence[PromptComparison], prompt_id: str, sample: GateSample) -> int:
    for r in rows:
        if r.prompt_id == prompt_id:
            return r.first_divergence if r.first_divergence is not None else len(sample.token_ids)
    return 0
