"""InvestigateScreen: the follow-up the grid proposes for one cell, and the key that queues it.

Opened with `i` on the compare grid's highlighted cell. The plan comes from the core
(`adapter.investigation_plan`, i.e. `moe_tui.investigate.model`) in a worker; the screen lists its
proposals (space toggles one; all are selected at first) with their cost, shows the highlighted
one's reason and runs, and queues the selected ones with `y` / enter (`adapter.queue_investigation`).
All text comes from the plan; profile names are shown as plain Text, never parsed as markup.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, SelectionList, Static
from textual.widgets.selection_list import Selection

from moe_tui.records import CampaignAddedJson
from moe_tui.ui.room import Room, room
from moe_tui.ui.widgets.check_list import CheckList


def cost_text(starts: int, minutes: float | None) -> str:
    return f"{starts} server start{'s' if starts != 1 else ''}, " + (
        f"~{minutes:g} min" if minutes is not None else "minutes unknown")


def proposal_prompt(p: Any) -> Text:
    text = Text()
    text.append(f"{p.title:<20}", style="bold")
    text.append(f" {len(p.items):>2} run{'s' if len(p.items) != 1 else ' '}  {cost_text(p.server_starts, p.minutes)}")
    return text


def proposal_detail(p: Any) -> Text:
    text = Text()
    text.append("why: ", style="bold")
    text.append(p.reason)
    if p.expect:
        text.append("\ntells: ", style="bold")
        text.append(p.expect)
    for n, item in enumerate(p.items, start=1):
        extra = "".join([", fresh server start" if item.fresh_start else "",
                         ", no warmup pass" if not item.warmup else ""])
        text.append(f"\n  {n:>2}. ")
        text.append(item.profile)
        text.append(f"  conc={item.concurrency}  n={item.spec.get('num_prompts')}  {item.role}{extra}", style="dim")
    return text


class InvestigateScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("y,enter", "queue", "Queue", id="investigate.queue", tooltip="Queue the selected proposals"),
        Binding("escape,q", "close", "Back", id="investigate.back", tooltip="Back to the grid, queue nothing"),
    ]

    def __init__(self, baseline: str, candidate: str, concurrency: int, metric: str) -> None:
        super().__init__()
        self.cell = (baseline, candidate, int(concurrency), metric)
        self.plan: Any | None = None
        self.queued: CampaignAddedJson | None = None

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        baseline, candidate, conc, metric = self.cell
        with Vertical(id="investigate-dialog", classes="dialog"):
            yield Label(Text(f"Investigate {baseline} vs {candidate} at concurrency {conc}, {metric}"),
                        id="investigate-title", classes="dialog-title")
            yield Static("planning from the grid…", id="investigate-cell")
            yield CheckList(id="investigate-proposals")
            with VerticalScroll(id="investigate-detail-box"):
                yield Static("", id="investigate-detail")
            yield Static("", id="investigate-total")
            yield Static("", id="investigate-state")

    def on_mount(self) -> None:
        self.control.call_core("plan investigation", self.control.client.investigation_plan, *self.cell,
                               done=self.show_plan, group="investigate-plan")

    def show_plan(self, plan: Any) -> None:
        self.plan = plan
        cell = Text("cell now: ", style="bold")
        cell.append(plan.before_text)
        cell.append(f"; control: {plan.before.get('control', '?')}", style="dim")
        for caution in plan.cautions:
            cell.append("\n⚠ caution: ", style="bold yellow")
            cell.append(caution, style="yellow")
        self.query_one("#investigate-cell", Static).update(cell)
        options = self.query_one("#investigate-proposals", SelectionList)
        options.clear_options()
        options.add_options([Selection(proposal_prompt(p), p.kind, True) for p in plan.proposals])
        if plan.proposals:
            options.focus()
            options.highlighted = 0
        else:
            notes = Text("nothing to propose\n", style="bold")
            for note in plan.notes:
                notes.append(f"· {note}\n", style="dim")
            self.query_one("#investigate-detail", Static).update(notes)
        self._show_selection()

    def _selected(self) -> Any | None:
        if self.plan is None:
            return None
        kinds = list(self.query_one("#investigate-proposals", SelectionList).selected)
        return self.plan.only(kinds)

    def _show_selection(self) -> None:
        chosen = self._selected()
        if chosen is None:
            return
        total = Text("selected: ", style="bold")
        total.append(f"{len(chosen.items)} runs, {cost_text(chosen.server_starts, chosen.minutes)}")
        total.append("   space toggles · y queues · esc backs out", style="dim")
        self.query_one("#investigate-total", Static).update(total)

    def on_selection_list_selection_highlighted(self, event: SelectionList.SelectionHighlighted[str]) -> None:
        if self.plan is None:
            return
        kind = event.selection.value
        proposal = next((p for p in self.plan.proposals if p.kind == kind), None)
        if proposal is not None:
            self.query_one("#investigate-detail", Static).update(proposal_detail(proposal))

    def on_selection_list_selected_changed(self) -> None:
        self._show_selection()

    def action_queue(self) -> None:
        chosen = self._selected()
        if self.queued is not None:
            return
        if chosen is None or not chosen.proposals:
            self.notify("investigate: nothing selected to queue", severity="warning")
            return
        self.control.call_core(f"queue {chosen.name}", self.control.client.queue_investigation, chosen,
                               done=self._queued, group="investigate-queue")

    def _queued(self, result: CampaignAddedJson) -> None:
        self.queued = result.copy()
        ids = list(result.get("item_ids") or ())
        state = Text("queued: ", style="bold green")
        state.append(f"campaign {result.get('campaign_id')} ({self.plan.name if self.plan else ''}), "
                     f"{len(ids)} item(s); the grid marks the cell under investigation")
        self.query_one("#investigate-state", Static).update(state)
        self.notify(f"queued {len(ids)} run(s) to investigate concurrency {self.cell[2]}", title="Investigation")

    def action_close(self) -> None:
        self.dismiss(None)
