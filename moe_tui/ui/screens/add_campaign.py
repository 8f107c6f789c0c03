"""AddCampaignScreen: the form for a campaign (profiles x concurrencies x repeats from one spec).

It shows exactly what will be queued, as the core plans it (`ControlClient.campaign_preview`): the
items, the control concurrency's extra repeats among them (a toggle leaves them out, like the CLI's
--no-control), and the server starts each ordering policy would cost. The baseline is chosen, not
implied by the list's order (the queue's first profile is the comparison's baseline). Input is
checked field by field; a bad value gets an error toast naming the field and nothing is stored
(the core validates the spec again and refuses the whole campaign on any error).
"""

from __future__ import annotations

import functools
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList

from moe_tui.control import CampaignPreview, CampaignRequest
from moe_tui.control.launch import DEMO_CAMPAIGN, campaign_defaults
from moe_tui.records import SpecOverrides
from moe_tui.ui.prepare import KeepStyles, prerender_soon
from moe_tui.ui.room import Room, room
from moe_tui.ui.widgets.check_list import CheckList
from moe_tui.ui.widgets.select import ShutdownSafeSelect

# (spec field, label, default) for the fields a campaign usually varies. The form fills them from
# `control.launch.campaign_defaults`: the CLI's on real profiles, the demo's on simulated ones; these
# defaults (the demo campaign's) only stand in for a field that table leaves out.
SPEC_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("input_len", "Input tokens", str(DEMO_CAMPAIGN.spec["input_len"])),
    ("output_len", "Output tokens", str(DEMO_CAMPAIGN.spec["output_len"])),
    ("num_prompts", "Prompts (min)", str(DEMO_CAMPAIGN.spec["num_prompts"])),
    ("range_ratio", "Range ratio", str(DEMO_CAMPAIGN.spec["range_ratio"])),
    ("request_rate", "Request rate (inf)", "inf"),
    ("seed", "Seed", str(DEMO_CAMPAIGN.spec["seed"])),
)
DEFAULT_CONCURRENCIES = ",".join(map(str, DEMO_CAMPAIGN.concurrencies))
DEFAULT_REPEATS = str(DEMO_CAMPAIGN.repeats)
# Server starts are counted once typing pauses, not on every key (each count is a worker and a
# repaint; a burst of Backspace then typing must never lose a key to that work).
COSTS_DEBOUNCE_S = 0.3
INT_FIELDS = {"input_len", "output_len", "num_prompts", "seed"}


class FormError(ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"add campaign: field '{field}': {message}")


def parse_int_list(field: str, text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.replace(" ", ",").split(",") if p.strip()]
    if not parts:
        raise FormError(field, "give at least one value, e.g. 1,2,10,64")
    out = []
    for part in parts:
        try:
            value = int(part)
        except ValueError:
            raise FormError(field, f"{part!r} is not a whole number") from None
        if value < 1:
            raise FormError(field, f"{value} must be at least 1")
        out.append(value)
    return tuple(out)


def parse_form(name: str, profiles: list[str], concurrencies: str, repeats: str,
               spec_values: dict[str, str], policy: Any, prompts_per_concurrency: str = "",
               baseline: Any = None, control: bool = True) -> CampaignRequest:
    if not profiles:
        raise FormError("profiles", "select at least one profile")
    if isinstance(baseline, str) and baseline in profiles:  # the queue's first profile is the baseline
        profiles = [baseline, *(p for p in profiles if p != baseline)]
    conc = parse_int_list("concurrencies", concurrencies)
    try:
        reps = int(repeats.strip())
    except ValueError:
        raise FormError("repeats", f"{repeats!r} is not a whole number") from None
    if reps < 1:
        raise FormError("repeats", f"{reps} must be at least 1")
    spec: SpecOverrides = {}
    for field, _, _ in SPEC_FIELDS:
        text = spec_values.get(field, "").strip()
        if not text:
            continue
        try:
            spec[field] = int(text) if field in INT_FIELDS else float(text)
        except ValueError:
            kind = "a whole number" if field in INT_FIELDS else "a number"
            raise FormError(field, f"{text!r} is not {kind}") from None
    if not isinstance(policy, str):
        raise FormError("policy", "pick an ordering policy")
    ppc = None
    if prompts_per_concurrency.strip():
        try:
            ppc = int(prompts_per_concurrency.strip())
        except ValueError:
            raise FormError("prompts_per_concurrency", f"{prompts_per_concurrency!r} is not a whole number") from None
        if ppc < 1:
            raise FormError("prompts_per_concurrency", f"{ppc} must be at least 1")
    return CampaignRequest(name=name.strip(), profiles=tuple(profiles), concurrencies=conc,
                           repeats=reps, spec=spec, policy=policy, prompts_per_concurrency=ppc, control=control)


class AddCampaignScreen(KeepStyles, ModalScreen[CampaignRequest | None]):
    BINDINGS = [
        Binding("ctrl+s", "submit", "Add", id="campaign.submit", tooltip="Validate and add to the queue"),
        Binding("escape", "close", "Cancel", id="campaign.cancel", tooltip="Close without adding"),
    ]

    def __init__(self, defaults: CampaignRequest | None = None) -> None:
        super().__init__()
        self.defaults = defaults
        self._costs_timer: Any = None
        self._preview: tuple[CampaignRequest, CampaignPreview] | None = None

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        d = self.defaults
        servers = self.control.live.servers
        names = list(servers)
        chosen = set(d.profiles) if d else set(names)
        # Real profiles start from the CLI's defaults, simulated ones from the demo's (control.launch)
        spec_defaults, ppc_default = campaign_defaults(all(servers[n].row.simulated for n in names if n in chosen))
        with VerticalScroll(id="campaign-dialog", classes="dialog"):
            yield Label("Add a campaign", classes="dialog-title")
            yield Label("Profiles")
            yield CheckList(*[(n, n, n in chosen) for n in names], id="campaign-profiles")
            with Grid(id="campaign-grid"):
                yield Label("Baseline")
                yield ShutdownSafeSelect([(n, n) for n in names if n in chosen], id="campaign-baseline", allow_blank=True,
                             prompt="baseline profile", value=self._default_baseline([n for n in names if n in chosen]))
                yield Label("Name")
                yield Input(d.name if d else "", placeholder="(default: profiles @ concurrencies)", id="campaign-name")
                yield Label("Concurrencies")
                yield Input(",".join(map(str, d.concurrencies)) if d else DEFAULT_CONCURRENCIES,
                            id="campaign-concurrencies")
                yield Label("Repeats")
                yield Input(str(d.repeats) if d else DEFAULT_REPEATS, id="campaign-repeats")
                for field, label, default in SPEC_FIELDS:
                    value = str(d.spec.get(field, default)) if d else str(spec_defaults.get(field, default))
                    yield Label(label)
                    yield Input(value, id=f"spec-{field}")
                yield Label("Prompts / conc")
                yield Input(str(d.prompts_per_concurrency or "") if d else str(ppc_default or ""),
                            placeholder="(none)", id="campaign-ppc")
                yield Label("Ordering")
                yield ShutdownSafeSelect([], id="campaign-policy", allow_blank=True, prompt="ordering policy")
                yield Label("Control")
                yield Checkbox("repeats at conc 2", d.control if d else True, id="campaign-control",
                               tooltip="The control concurrency's extra repeats, which show the two "
                                       "environments agree; off, every verdict says uncontrolled (--no-control)")
            yield Label("", id="campaign-costs", classes="dialog-detail")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Add (ctrl+s)", variant="primary", id="campaign-add")
                yield Button("Cancel (esc)", id="campaign-cancel")

    def _default_baseline(self, chosen: list[str]) -> Any:
        """The defaults' baseline, else the demo campaign's when chosen, else the first chosen."""
        for wanted in ((self.defaults.profiles[0],) if self.defaults else ()) + DEMO_CAMPAIGN.profiles[:1]:
            if wanted in chosen:
                return wanted
        return chosen[0] if chosen else Select.BLANK

    def _refresh_baselines(self) -> None:
        """The baseline choices follow the chosen profiles; a choice still chosen stays."""
        try:
            chosen = list(self.query_one("#campaign-profiles", SelectionList).selected)
            select = self.query_one("#campaign-baseline", Select)
        except NoMatches:
            return
        current = select.value
        with select.prevent(Select.Changed):
            select.set_options([(n, n) for n in chosen])
            select.value = current if current in chosen else self._default_baseline(chosen)

    def on_mount(self) -> None:
        self.control.call_core("read ordering policies", self.control.client.policies, done=self._policies)

    def _policies(self, policies: dict[str, str]) -> None:
        # An answer for a form closed before it came never gets here (the App drops it).
        self._policy_text = dict(policies)
        try:
            select = self.query_one("#campaign-policy", Select)
            select.set_options([(name, name) for name in policies])
            wanted = self.defaults.policy if self.defaults else next(iter(policies), None)
            if wanted in policies:
                select.value = wanted
        except NoMatches:
            return  # still attached but taken apart (the App closing, a spare dropped): nothing to fill
        self._update_costs()

    def _request(self) -> CampaignRequest:
        return parse_form(
            self.query_one("#campaign-name", Input).value,
            list(self.query_one("#campaign-profiles", SelectionList).selected),
            self.query_one("#campaign-concurrencies", Input).value,
            self.query_one("#campaign-repeats", Input).value,
            {f: self.query_one(f"#spec-{f}", Input).value for f, _, _ in SPEC_FIELDS},
            self.query_one("#campaign-policy", Select).value,
            self.query_one("#campaign-ppc", Input).value,
            self.query_one("#campaign-baseline", Select).value,
            self.query_one("#campaign-control", Checkbox).value,
        )

    def _update_costs(self) -> None:
        try:
            request = self._request()
        except NoMatches:
            return  # the form is being closed (or a spare dropped): nothing to count for
        except FormError as exc:
            try:  # a select's first Changed can come before the whole form is mounted
                self.query_one("#campaign-costs", Label).update(Text(str(exc), style="yellow"))
            except NoMatches:
                pass
            return
        self.control.call_core("plan the campaign", self.control.client.campaign_preview, request,
                               done=functools.partial(self._show_costs, request), group="campaign-costs")

    def _show_costs(self, request: CampaignRequest, preview: CampaignPreview) -> None:
        self._preview = (request, preview)
        text = Text(f"Queues {preview.items} items: ", style="bold")
        text.append(f"{len(request.profiles)} profiles x {len(request.concurrencies)} concurrencies x "
                    f"{request.repeats} repeats = {preview.grid_items}")
        if preview.control_items:
            text.append(f" + {preview.control_items} control runs at conc {preview.control_concurrency} (one per sweep)",
                        style="bold")
        elif request.control and len(request.profiles) > 1:
            text.append(f" (conc {preview.control_concurrency or 2} in every sweep is the control)")
        elif not request.control:
            text.append(" (no control: verdicts uncontrolled)", style="yellow")
        if preview.short_cells:
            cells = ", ".join(f"conc {c} with {n} prompts" for c, n in preview.short_cells)
            text.append(f"\n{cells}: fewer prompts than the concurrency, never reached (raise Prompts / conc)",
                        style="yellow")
        text.append(f"\nBaseline {request.profiles[0]}. Server starts: ")
        for k, (policy, count) in enumerate(preview.server_starts.items()):
            if k:
                text.append(" · ")
            text.append(f"{policy} {count}", style="bold" if policy == request.policy else "dim")
        text.append(f"\n{request.policy}: {getattr(self, '_policy_text', {}).get(request.policy, '')}", style="dim")
        try:
            self.query_one("#campaign-costs", Label).update(text)
        except NoMatches:
            return  # taken apart while the count was on its way (the App closing, a spare dropped)
        prerender_soon(self)  # a spare answered before its key: laid out again off screen

    def on_input_changed(self) -> None:
        if self._costs_timer is not None:
            self._costs_timer.stop()
        self._costs_timer = self.set_timer(COSTS_DEBOUNCE_S, self._update_costs)

    def on_select_changed(self) -> None:
        self._update_costs()

    def on_selection_list_selected_changed(self) -> None:
        self._refresh_baselines()
        self._update_costs()

    def on_checkbox_changed(self) -> None:
        self._update_costs()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "campaign-add":
            self.action_submit()
        else:
            self.action_close()

    def action_submit(self) -> None:
        try:
            request = self._request()
        except FormError as exc:
            self.notify(str(exc), title="Not added", severity="error", markup=False)
            return
        preview = self._preview[1] if self._preview and self._preview[0] == request else None
        self.control.add_campaign(request, done=lambda _: self.dismiss(request), preview=preview)

    def action_close(self) -> None:
        self.dismiss(None)
