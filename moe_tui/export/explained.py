"""Explanations exported beside a grid: each cell with a ready kernel breakdown as Markdown, CSV, JSON and
stacked bars (`moe-tui export`). Here, not in `moe_tui.explain`, so the explain package never imports the
exporters (the emulator draws its kernel names from explain's corpus, and the exporters reach the emulator
through the grid's extras: an import the other way would close a circle)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.explain.store import explain_cell
from moe_tui.export.formats import write_atomic

if TYPE_CHECKING:
    from moe_tui.compare.model import ComparisonGrid
    from moe_tui.store.db import Store


def export_explanations(store: Store, grid: ComparisonGrid, directory: str | Path) -> list[Path]:
    """For each cell with a ready explanation: `<A>-vs-<B>-explain-c<C>` .md, .csv, .json and the
    stacked bars as .png and .svg, written atomically into `directory`; the paths written."""
    from moe_tui.explain.render import stacked_bars, to_csv, to_json, to_markdown

    out: list[Path] = []
    stem = f"{grid.baseline_name}-vs-{grid.candidate_name}".replace("/", "_")
    for conc in grid.concurrencies:
        view = explain_cell(store, grid, conc)
        if view.state != "ready":
            continue
        base = Path(directory) / f"{stem}-explain-c{conc}"
        png, svg = stacked_bars(view.explanation)
        files: dict[str, bytes | str] = {".md": to_markdown(view.explanation, view.extras), ".csv": to_csv(view.explanation),
                 ".json": to_json(view.explanation, dict(view.data or {}) | {"extras": list(view.extras)}),
                 ".png": png, ".svg": svg}
        out += [write_atomic(base.with_suffix(ext), data) for ext, data in files.items()]
    return out
