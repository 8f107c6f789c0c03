"""Campaign planning for the run queue: CampaignPlan, the ordering policies and their server-start costs.

A *campaign* adds many queue items in one step: profiles x concurrencies x repeats from one base
spec; each concurrency sets `spec.max_concurrency`, and `num_prompts` may scale with it
(`prompts_per_concurrency`, never below the base spec's `num_prompts`). The rule is recorded in
the campaign's definition so a result can always be traced to how it was asked for.

Ordering policies (`ORDER_POLICIES`), for a campaign of profiles P, concurrencies C, repeats R:
  abba         for r: for p (reversed on odd r): for c
                                     A-sweep, B-sweep, B-sweep, A-sweep, ...: each sweep its own server
                                     start (P x R); counterbalanced, so neither linear drift nor a
                                     disturbance that alternates with the sweeps can fall on one side
                                     (the default)
  grouped      for p: for r: for c   each profile's items together: one server start per profile
  interleaved  for r: for p: for c   A-sweep, B-sweep, A-sweep, ...: drift and warm-up effects fall
                                     on both profiles alike, at P x R server starts; a disturbance
                                     in step with the fixed A-then-B order falls on one side
  alternating  for r: for c: for p   A,B,A,B item by item: the strongest drift cancelling, at one
                                     server start per item
`server_starts()` counts what a sequence costs; `CampaignPlan.start_costs()` shows every policy's
cost before the user picks.

The control concurrency (`judgement.CONTROL_CONCURRENCY`, 2, never "the lowest of the sweep") is part
of every sweep of a comparison campaign a user queues (two or more profiles; `moe-tui queue add
--no-control` leaves it out): each cell is judged against it measured on the same server start, so an
environment shift cancels there. Its runs are cheap, and no control-only starts are needed (every start
carries its own). `CampaignPlan.control_plan()` says so.

`warmup_spec()` is the warm-up pass that precedes a timed item. Pure code over BenchmarkSpec: the
persistent queue (`moe_tui.store.queue.RunQueue`) stores what a plan makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from moe_tui import judgement as J
from moe_tui.records import ControlPlanJson
from moe_tui.spec import BenchmarkSpec, SpecError, check_feasible

ORDER_POLICIES = ("abba", "interleaved", "grouped", "alternating")
DEFAULT_POLICY = "abba"

# Warmup pass size: enough requests to fill the concurrency once, and at least a few.
WARMUP_MIN_PROMPTS = 8
# The warmup pass draws different prompts than the timed run, so the server's prefix cache cannot
# hand the timed run free prefills; this offset is added to the seed (mod 2^32, the spec's range).
WARMUP_SEED_OFFSET = 1_000_003


class QueueError(ValueError):
    """An invalid queue operation; nothing was changed. The message names the item and the reason."""


class QueueNotFound(QueueError, LookupError):
    """No such queue item or campaign: the CLI exits 4 (not found) for it."""


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
    policy: str = DEFAULT_POLICY  # A B B A: counterbalanced, drift and periodic disturbances fall on both sides
    prompts_per_concurrency: int | None = None
    warmup_pass: bool = True
    profiles_dir: str | None = None  # where the runner finds these profiles (recorded, not compared)
    # Add the control concurrency and its extra starts (comparisons only). Off for a bare plan; the
    # user's ways in (`moe-tui queue add`, the controller's add/plan_campaign: the TUI, the demo) turn it on.
    control: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "profiles", tuple(self.profiles))
        concs = tuple(int(c) for c in self.concurrencies)
        if self.control and len(self.profiles) >= 2 and J.CONTROL_CONCURRENCY not in concs:
            concs = (J.CONTROL_CONCURRENCY, *concs)
        object.__setattr__(self, "concurrencies", concs)
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
        extra: int = self.control_plan()["extra_per_profile"]
        return len(self.profiles) * (len(self.concurrencies) * self.repeats + extra)

    def control_plan(self) -> ControlPlanJson:
        """The control concurrency, starts per side that carry it, the extra items per profile (none), and why."""
        conc = J.CONTROL_CONCURRENCY if J.CONTROL_CONCURRENCY in self.concurrencies else None
        if not self.control or len(self.profiles) < 2 or conc is None:
            return {"concurrency": conc, "starts_per_side": self.repeats, "extra_per_profile": 0,
                    "why": "no control planned (a single profile, or control=False)"}
        return {"concurrency": conc, "starts_per_side": self.repeats, "extra_per_profile": 0,
                "why": (f"concurrency {conc} runs in every sweep: each cell is judged against it on the same "
                        f"server start, so an environment shift cancels; {self.repeats} start(s) a side carry it, "
                        "no control-only starts")}

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
        items = []
        last: tuple[str, int] | None = None
        for p, c, r in order_keys(self.profiles, self.concurrencies, self.repeats, policy):
            # ABBA puts one profile's two sweeps side by side: each sweep is still its own server start.
            fresh = (policy == "abba" and len(self.profiles) > 1 and last is not None and last != (p, r)
                     and last[0] == p)
            items.append(PlannedItem(p, specs[c], r, self.warmup_pass, fresh_start=fresh))
            last = (p, r)
        return items

    def start_costs(self, running: str | None = None) -> dict[str, int]:
        """Server starts each policy needs for this campaign (given the server already up)."""
        sweeps = len(self.profiles) > 1  # ABBA restarts between one profile's two sweeps (comparisons only)
        return {policy: server_starts([(p, r) if policy == "abba" and sweeps else p for p, _, r in order_keys(
            self.profiles, self.concurrencies, self.repeats, policy)], running) for policy in ORDER_POLICIES}

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
            "control": self.control_plan(),
            # What the plan asked for, per (profile, requested fingerprint): the grid counts items
            # cleared from the queue against it (a plan cut short, not a finished one).
            "planned_items": self.planned_counts(),
        }

    def planned_counts(self) -> list[list[Any]]:
        """[profile, fingerprint, items] as the queue stores them (the spec as it will run, its client's
        version filled in), so a cleared item is counted against the same key as the queued ones."""
        from moe_tui.store.queue_spec import spec_as_queued

        counts: dict[tuple[str, str], int] = {}
        versions: dict[str, str] = {}
        for item in self.items():
            key = (item.profile_name, spec_as_queued(item.spec, versions).fingerprint)
            counts[key] = counts.get(key, 0) + 1
        return [[p, fp, n] for (p, fp), n in sorted(counts.items())]

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
    if policy == "abba":
        return [(p, c, r) for r in range(repeats) for p in (profiles if r % 2 == 0 else profiles[::-1])
                for c in concurrencies]
    if policy == "alternating":
        return [(p, c, r) for r in range(repeats) for c in concurrencies for p in profiles]
    raise QueueError(f"order policy must be one of {', '.join(ORDER_POLICIES)}, got {policy!r}")


def server_starts(profile_sequence: Iterable[Any], running: str | None = None) -> int:
    """How many server starts running items in this order costs (a start whenever the profile changes,
    or the (profile, repeat) key for a policy that restarts between sweeps; none for the first item if
    `running` is already its server)."""
    starts: int = 0
    current: Any = running
    for key in profile_sequence:
        same = key == current or (isinstance(key, tuple) and key[0] == current and starts == 0)
        if not same:
            starts += 1
        current = key
    return starts


def warmup_spec(spec: BenchmarkSpec) -> BenchmarkSpec:
    """The warmup pass before a timed run: same shapes (concurrency, lengths, API), fewer prompts,
    other prompts (seed offset, so the prefix cache cannot help the timed run)."""
    return spec.replace(
        num_prompts=max(spec.max_concurrency, WARMUP_MIN_PROMPTS),
        seed=(spec.seed + WARMUP_SEED_OFFSET) % 2**32,
    )
