"""User key remapping: the `[keys]` table of the config file, binding id -> key.

    [keys]
    "queue.pause" = "P"
    "screen.compare" = "f3"

Read with tomllib. Unknown ids and non-string keys are reported (file, id, reason) and skipped;
the rest is applied with `App.set_keymap`. A broken file never stops the app from starting.
"""

from __future__ import annotations

import tomllib
from pathlib import Path


def known_binding_ids() -> dict[str, str]:
    """Every binding id in the app -> its description (for validation and the docs)."""
    from textual.binding import Binding

    from moe_tui.ui.app import MoeTuiApp
    from moe_tui.ui.screens.add_campaign import AddCampaignScreen
    from moe_tui.ui.screens.cell_runs import CellRunsScreen
    from moe_tui.ui.screens.compare import CompareScreen
    from moe_tui.ui.screens.confirm import ConfirmScreen
    from moe_tui.ui.screens.dashboard import DashboardScreen
    from moe_tui.ui.screens.help import HelpScreen
    from moe_tui.ui.screens.log_viewer import LogScreen
    from moe_tui.ui.screens.queue import QueueScreen
    from moe_tui.ui.screens.quit import QuitScreen
    from moe_tui.ui.screens.run_detail import RunDetailScreen

    ids: dict[str, str] = {}
    for cls in (MoeTuiApp, DashboardScreen, QueueScreen, CompareScreen, LogScreen, RunDetailScreen,
                AddCampaignScreen, ConfirmScreen, QuitScreen, HelpScreen, CellRunsScreen):
        for binding in cls.BINDINGS:
            if isinstance(binding, Binding) and binding.id:
                ids[binding.id] = binding.description
    return ids


def load_keymap(path: Path) -> tuple[dict[str, str], list[str]]:
    """(keymap, problems). A missing file is an empty keymap with no problems."""
    if not path.exists():
        return {}, []
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return {}, [f"{path}: cannot read: {exc}"]
    except tomllib.TOMLDecodeError as exc:
        return {}, [f"{path}: not valid TOML: {exc}; key remapping skipped"]
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        return {}, [f"{path}: [keys] must be a table of binding id = \"key\""]
    known = known_binding_ids()
    keymap: dict[str, str] = {}
    problems: list[str] = []
    for binding_id, key in keys.items():
        if binding_id not in known:
            import difflib

            hint = difflib.get_close_matches(binding_id, list(known), n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else ""
            problems.append(f"{path}: [keys] '{binding_id}': no such binding id{extra}")
        elif not isinstance(key, str) or not key.strip():
            problems.append(f"{path}: [keys] '{binding_id}': the key must be a non-empty string, got {key!r}")
        else:
            keymap[binding_id] = key.strip()
    return keymap, problems
