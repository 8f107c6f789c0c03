"""Small text renderers shared by the widgets: bars, sparklines, sizes, durations, state badges.

Formatting only (numbers in, Rich `Text` out); no figure is computed here that the core would
also compute. Rich, not Textual, so the functions are trivially testable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.text import Text

SPARK_CHARS = "▁▂▃▄▅▆▇█"


def plain(value: object, style: str = "") -> Text:
    """User data (profile, backend and imported names, errors, descriptions) as plain text: a
    `Text` is never parsed as markup, so `[/]` or `[bold]` in a name shows as written."""
    return value if isinstance(value, Text) else Text(str(value), style=style)


def middle_truncate(name: str, width: int) -> str:
    """`name` cut to `width` cells in the middle, keeping its head and its tail:
    "glm5-nvfp4-flashinfer-cutedsl" at 20 is "glm5-nvfp4-…-cutedsl". Profile names share their
    heads ("glm5-nvfp4-flashinfer-cutlass" / "…-cutedsl"); the tail is what tells them apart, so
    the tail keeps the larger share and, where it holds a "-", "_" or ".", starts there."""
    if width <= 0:
        return ""
    if cell_len(name) <= width:
        return name
    if width == 1:
        return "…"
    room = width - 1
    tail_n = (room + 1) // 2 + room // 4  # the tail gets about three quarters
    tail_n = min(tail_n, room)
    tail = name[len(name) - tail_n:]
    # Start the tail at a word boundary ("-cutedsl", not "lashinfer-cutedsl"), giving the
    # spare cells to the head, unless that leaves too short a tail to tell names apart.
    for k, ch in enumerate(tail):
        if ch in "-_." and tail_n - k >= 4:
            tail = tail[k:]
            break
    head = name[: room - len(tail)]
    return f"{head}…{tail}"


def home_path(path: object) -> str:
    """A path as a user would type it: the home folder as `~`."""
    import os

    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home):] if home not in ("", "/") and (text == home or text.startswith(home + os.sep)) else text


def data_dir_label(path: object, width: int = 28) -> str:
    """A data dir for the header: `~` for the home, and when longer than `width` the head elided,
    never the tail (`…/moe-tui/demo-home/data`): the tail is what tells two data dirs apart."""

    text = home_path(path)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def header_subtitle(subtitle: str, mode: str, data_dir: object | None) -> str:
    """The header's subtitle: which data dir (and so which runner and queue) this is, before the
    mode, its head elided, so that an 80-column header (cut at its end) keeps the tail."""
    if data_dir is None:
        return subtitle
    where = f"{data_dir_label(data_dir)}  ·  {mode}"
    return subtitle.replace(mode, where, 1) if mode in subtitle else f"{subtitle}  ·  {data_dir_label(data_dir)}"


def plain_cells(cells: Iterable[object]) -> tuple[object, ...]:
    """Table cells with every str made plain `Text` (Textual's DataTable parses str as markup)."""
    return tuple(Text(c) if isinstance(c, str) else c for c in cells)
NA = "n/a"

STATE_STYLES = {
    "ready": "bold green",
    "starting": "yellow",
    "stopping": "yellow",
    "stopped": "dim",
    "failed": "bold red",
    "pending": "",
    "running": "bold cyan",
    "done": "green",
    "skipped": "dim",
    "cancelled": "dim",
    "interrupted": "yellow",
    "complete": "green",
    "incomplete": "yellow",
}


def sparkline(values: Sequence[float], width: int, *, lo: float | None = 0.0, hi: float | None = None) -> str:
    """The last `width` values as block characters, scaled to [lo, hi] (defaults: 0..max)."""
    if width <= 0:
        return ""
    tail = list(values)[-width:]
    if not tail:
        return " " * width
    low = min(tail) if lo is None else lo
    high = max(tail) if hi is None else hi
    span = high - low
    out = []
    for v in tail:
        if span <= 0 or not math.isfinite(v):
            out.append(SPARK_CHARS[0])
            continue
        k = int((min(max(v, low), high) - low) / span * (len(SPARK_CHARS) - 1) + 0.5)
        out.append(SPARK_CHARS[k])
    return "".join(out).rjust(width)


def bar(pct: float | None, width: int, *, warn: float = 80.0, crit: float = 95.0) -> Text:
    """A horizontal percent bar with its number, e.g. `█████░░░  63%`."""
    if pct is None:
        return Text(f"{'·' * width} {NA:>4}", style="dim")
    pct = min(max(pct, 0.0), 100.0)
    filled = int(round(pct / 100.0 * width))
    style = "red" if pct >= crit else "yellow" if pct >= warn else "green"
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (width - filled), style="dim")
    text.append(f" {pct:3.0f}%")
    return text


def gib(n_bytes: int | None) -> str:
    return NA if n_bytes is None else f"{n_bytes / 2**30:.1f}"


def num(value: float | None, fmt: str = "{:.1f}", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NA
    return fmt.format(value) + unit


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def state_text(state: str, detail: str = "") -> Text:
    text = Text(state, style=STATE_STYLES.get(state, ""))
    if detail:
        text.append(f" {detail}", style="dim")
    return text


def badge(label: str, style: str) -> Text:
    return Text(f" {label} ", style=style)


def join(parts: Iterable[Text | str], sep: str = "  ") -> Text:
    out = Text()
    first = True
    for part in parts:
        if not part:
            continue
        if not first:
            out.append(sep)
        out.append(part if isinstance(part, Text) else Text(part))
        first = False
    return out


def downsample(values: Sequence[float], buckets: int) -> list[float]:
    """Mean of `buckets` equal slices (oldest first), so a narrow sparkline spans minutes."""
    vals = list(values)
    if buckets <= 0 or len(vals) <= buckets:
        return vals
    out = []
    for k in range(buckets):
        lo = k * len(vals) // buckets
        hi = max(lo + 1, (k + 1) * len(vals) // buckets)
        chunk = vals[lo:hi]
        out.append(sum(chunk) / len(chunk))
    return out
