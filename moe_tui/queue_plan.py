"""Campaign planning for the run queue: CampaignPlan, the ordering policies and their server-start costs.

A *campaign* adds many queue items in one step: profiles x concurrencies x repeats from one base
spec; each concurrency sets `spec.max_concurrency`, and `num_prompts` may scale with it
(`prompts_per_concurrency`, never below the base spec's `num_prompts`). The rule is recorded in
the campaign's definition so a result can always be traced to how it was asked for.

Ordering policies (`ORDER_POLICIES`), for a campaign of profiles P, concurrencies C, repeats R:
  grouped      for p: for r: for c   each profile's items together: one server start per profile
  interleaved  for r: for p: for c   A-sweep, B-sweep, A-sweep, ...: drift and warm-up effects fall
                                     on both profiles alike, at P x R server starts
  alternating  for r: for c: for p   A,B,A,B item by item: the strongest drift cancelling, at one
                                     server start per item
`server_starts()` counts what a sequence costs; `CampaignPlan.start_costs()` shows every policy's
cost before the user picks.

`warmup_spec()` is the warm-up pass that precedes a timed item. Pure code over BenchmarkSpec: the
persistent queue (`moe_tui.queue.RunQueue`) stores what a plan makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from moe_tui.spec import BenchmarkSpec, SpecError, check_feasible

ORDER_POLICIES = ("grouped", "interleaved", "alternating")

# Warmup pass size: enough requests to fill the concurrency once, and at least a few.
WARMUP_MIN_PROMPTS = 8
# The warmup pass draws different prompts than the timed run, so the server's prefix cache cannot
# hand the timed run free prefills; this offset is added to the seed (mod 2^32, the spec's range).
WARMUP_SEED_OFFSET = 1_000_003


class QueueError(ValueError):
    """An invalid queue operation; nothing was changed. The message names the item and the reason."""


@dataclass(frozen=True)
class PlannedItem:
    profile_name: str
    spec: BenchmarkSpec
    repeat_index: int
    warmup: bool
    fresh_start: bool = False


@dataclass(frozen=True)
class CampaignPlan:
    """profiles x concurrencies x repeats from one base spec. Validates on construction."""

    profiles: tuple[str, ...]
    concurrencies: tuple[int, ...]
    repeats: int = 1
    base_spec: BenchmarkSpec = field(default_factory=BenchmarkSpec)
    policy: str = "interleaved"  # repeats of A and B alternate, so drift falls on both sides alike
    prompts_per_concurrency: int | None = None
    warmup_pass: bool = True
    profiles_dir: str | None = None  # where the runner finds these profiles (recorded, not compared)

    def __post_init__(self) -> None:
        object.__setattr__(self, "profiles", tuple(self.profiles))
        object.__setattr__(self, "concurrencies", tuple(int(c) for c in self.concurrencies))
        if not self.profiles:
            raise QueueError("campaign: at least one profile is needed")
        if len(set(self.profiles)) != len(self.profiles):
            raise QueueError(f"campaign: a profile is listed twice: {', '.join(self.profiles)}")
        if not self.concurrencies:
            raise QueueError("campaign: at least one concurrency is needed")
        if len(set(self.concurrencies)) != len(self.concurrencies):
            raise QueueError(f"campaign: a concurrency is listed twice: {list(self.concurrencies)}")
        if not 1 <= self.repeats <= 1000:
            raise QueueError(f"campaign: repeats must be in [1, 1000], got {self.repeats}")
        if self.policy not in ORDER_POLICIES:
            raise QueueError(f"campaign: order policy must be one of {', '.join(ORDER_POLICIES)}, "
                             f"got {self.policy!r}")
        if self.prompts_per_concurrency is not None and self.prompts_per_concurrency < 1:
            raise QueueError("campaign: prompts_per_concurrency must be >= 1, "
                             f"got {self.prompts_per_concurrency}")
        for c in self.concurrencies:
            try:  # out of range, or more than this box's client could hold: refused before any work
                check_feasible(self.spec_for(c), "campaign")
            except SpecError as exc:
                raise QueueError(f"campaign: concurrency {c}: {exc}") from None

    @property
    def size(self) -> int:
        """How many items the plan makes (known before any is built)."""
        return len(self.profiles) * len(self.concurrencies) * self.repeats

    def num_prompts_for(self, concurrency: int) -> int:
        """The campaign's prompt-count rule: the base count, or ppc x concurrency if that is more."""
        if self.prompts_per_concurrency is None:
            return self.base_spec.num_prompts
        return max(self.base_spec.num_prompts, self.prompts_per_concurrency * concurrency)

    def spec_for(self, concurrency: int) -> BenchmarkSpec:
        try:
            return self.base_spec.replace(max_concurrency=concurrency,
                                          num_prompts=self.num_prompts_for(concurrency))
        except SpecError as exc:
            raise QueueError(f"campaign: concurrency {concurrency}: {exc}") from None

    def items(self, policy: str | None = None) -> list[PlannedItem]:
        policy = policy or self.policy
        specs = {c: self.spec_for(c) for c in self.concurrencies}
        order = order_keys(self.profiles, self.concurrencies, self.repeats, policy)
        return [PlannedItem(p, specs[c], r, self.warmup_pass) for p, c, r in order]

    def start_costs(self, running: str | None = None) -> dict[str, int]:
        """Server starts each policy needs for this campaign (given the server already up)."""
        return {
            policy: server_starts([p for p, _, _ in order_keys(self.profiles, self.concurrencies,
                                                                self.repeats, policy)], running)
            for policy in ORDER_POLICIES
        }

    def definition(self) -> dict[str, Any]:
        """What is stored with the campaign: enough to rebuild every item and to explain it."""
        return {
            "profiles": list(self.profiles),
            "concurrencies": list(self.concurrencies),
            "repeats": self.repeats,
            "policy": self.policy,
            "base_spec": self.base_spec.canonical_dict(),
            "num_prompts_rule": {
                "prompts_per_concurrency": self.prompts_per_concurrency,
                "min_prompts": self.base_spec.num_prompts,
                "rule": ("num_prompts = max(min_prompts, prompts_per_concurrency * concurrency)"
                         if self.prompts_per_concurrency is not None else "num_prompts = min_prompts"),
            },
            "warmup_pass": self.warmup_pass,
            "profiles_dir": self.profiles_dir,
            "warmup_rule": (f"same spec, num_prompts = max(concurrency, {WARMUP_MIN_PROMPTS}), "
                            f"seed + {WARMUP_SEED_OFFSET}; results discarded"),
            "server_starts": self.start_costs(),
        }

    def default_name(self) -> str:
        conc = ",".join(str(c) for c in self.concurrencies)
        return f"{' vs '.join(self.profiles)} @ conc {conc} x{self.repeats} ({self.policy})"


def order_keys(profiles: Sequence[str], concurrencies: Sequence[int], repeats: int,
               policy: str) -> list[tuple[str, int, int]]:
    """(profile, concurrency, repeat) triples in the order `policy` runs them."""
    if policy == "grouped":
        return [(p, c, r) for p in profiles for r in range(repeats) for c in concurrencies]
    if policy == "interleaved":
        return [(p, c, r) for r in range(repeats) for p in profiles for c in concurrencies]
    if policy == "alternating":
        return [(p, c, r) for r in range(repeats) for c in concurrencies for p in profiles]
    raise QueueError(f"order policy must be one of {', '.join(ORDER_POLICIES)}, got {policy!r}")


def server_starts(profile_sequence: Iterable[str], running: str | None = None) -> int:
    """How many server starts running items in this order costs (a start whenever the profile
    changes; none for the first item if `running` is already its server)."""
    starts, current = 0, running
    for profile in profile_sequence:
        if profile != current:
            starts += 1
            current = profile
    return starts


def warmup_spec(spec: BenchmarkSpec) -> BenchmarkSpec:
    """The warmup pass before a timed run: same shapes (concurrency, lengths, API), fewer prompts,
    other prompts (seed offset, so the prefix cache cannot help the timed run)."""
    return spec.replace(
        num_prompts=max(spec.max_concurrency, WARMUP_MIN_PROMPTS),
        seed=(spec.seed + WARMUP_SEED_OFFSET) % 2**32,
    )
