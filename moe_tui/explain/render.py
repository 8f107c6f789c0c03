"""An explanation as people and files read it: a text table, Markdown, CSV, JSON, and a stacked bar
per side (PNG and SVG through matplotlib's object API on Agg, imported only when drawn).

Kernel names come from trace files (untrusted): CSV cells that a spreadsheet would run as a
formula get a leading quote, Markdown pipes and backticks are escaped, control characters are
dropped (`rules.short_name`), matplotlib's mathtext never sees a `$`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from moe_tui.explain.breakdown import Explanation, class_table
from moe_tui.explain.rules import CLASS_WORDS, CLASSES, short_name

COLORS = {"moe_gemm": "#d62728", "moe_routing": "#ff9896", "attention": "#1f77b4", "collective": "#9467bd",
          "dense_gemm": "#2ca02c", "quantization": "#bcbd22", "norm_elementwise": "#17becf", "idle": "#c7c7c7",
          "other": "#7f7f7f"}


def _ms(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _delta(row: Mapping[str, Any]) -> str:
    if math.isinf(row["noise_ms"]):
        return f"{row['delta_ms']:+.3f} (noise unknown)"
    mark = "" if row["beyond_noise"] else " ~"
    return f"{row['delta_ms']:+.3f}{mark}"


def _share(row: Mapping[str, Any]) -> str:
    return "" if row["share"] is None or not row["beyond_noise"] else f"{row['share'] * 100:.0f}%"


def column_heads(a: str, b: str, limit: int) -> tuple[str, str]:
    """Two column heads of at most `limit` characters that tell the sides apart: where the names
    would be cut alike (`sim-flashinfer-c…` twice), their shared start, up to its last `-`, `_`, `.`
    or `/`, gives way to `…` (`…cutlass`, `…cutedsl`)."""
    a, b = short_name(a, 1000), short_name(b, 1000)
    if short_name(a, limit) != short_name(b, limit) or a == b:
        return short_name(a, limit), short_name(b, limit)
    shared = os.path.commonprefix([a, b])
    cut = max(shared.rfind(ch) for ch in "-_./") + 1 or len(shared)
    return short_name("…" + a[cut:], limit), short_name("…" + b[cut:], limit)


def text_lines(expl: Explanation, extras: Sequence[str] = ()) -> list[str]:
    """The breakdown side by side, for the terminal (and the TUI's panel)."""
    a, b = expl.a, expl.b
    heads = column_heads(a.label, b.label, 17)
    out = [f"ms per {_step_word(expl)} step ({a.label}: {a.steps} steps x {len(a.ranks)} ranks; "
           f"{b.label}: {b.steps} steps x {len(b.ranks)} ranks)",
           f"{'class':<24}{heads[0]:>18}{heads[1]:>18}"
           f"{'B-A':>22}{'noise ±':>10}{'gap':>6}"]
    for row in class_table(expl):
        out.append(f"{row['words']:<24}{_ms(row['a_ms']):>18}{_ms(row['b_ms']):>18}{_delta(row):>22}"
                   f"{_ms(row['noise_ms']):>10}{_share(row):>6}")
    out.append("(~ : within its noise; gap: share of the step-time difference, shown when that is beyond its noise)")
    out += [""] + expl.summary_lines()
    if expl.moved:
        out += ["", "kernels that moved most (ms/step, B-A):"]
        out += [f"  {m.delta_ms:+9.3f}  {CLASS_WORDS.get(m.kernel_class, m.kernel_class):<22} {short_name(m.name)}"
                for m in expl.moved]
    others = sorted(set(a.other_names()) | set(b.other_names()))
    if others:
        out += ["", "unclassified ('other') kernels: " + ", ".join(others)]
    out += list(extras)
    out += [f"note: {n}" for n in expl.notes]
    return out


def _step_word(expl: Explanation) -> str:
    return "prefill" if expl.a.stage == "EXTEND" else "decode"


def _csv_safe(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def to_csv(expl: Explanation) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["class", "words", "a_ms_per_step", "b_ms_per_step", "delta_ms", "noise_ms", "beyond_noise",
                "share_of_gap"])
    for row in class_table(expl):
        w.writerow([_csv_safe(x) for x in (row["class"], row["words"], row["a_ms"], row["b_ms"], row["delta_ms"],
                                           row["noise_ms"], row["beyond_noise"], row["share"])])
    w.writerow([])
    w.writerow(["kernel", "class", "a_ms_per_step", "b_ms_per_step", "delta_ms"])
    for m in expl.moved:
        w.writerow([_csv_safe(short_name(m.name, 200)), m.kernel_class, m.a_ms, m.b_ms, m.delta_ms])
    return buf.getvalue()


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("\n", " ")


def to_markdown(expl: Explanation, extras: Sequence[str] = ()) -> str:
    a, b = expl.a, expl.b
    lines = [f"| class | {_md(a.label)} ms/step | {_md(b.label)} ms/step | B-A | noise ± | share of gap |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in class_table(expl):
        lines.append(f"| {row['words']} | {_ms(row['a_ms'])} | {_ms(row['b_ms'])} | {_delta(row)} | "
                     f"{_ms(row['noise_ms'])} | {_share(row)} |")
    lines += ["", *[f"- {_md(s)}" for s in expl.summary_lines()]]
    if expl.moved:
        lines += ["", "| kernel | class | B-A ms/step |", "|---|---|---:|"]
        lines += [f"| `{_md(short_name(m.name))}` | {CLASS_WORDS.get(m.kernel_class, m.kernel_class)} | "
                  f"{m.delta_ms:+.3f} |" for m in expl.moved]
    lines += ["", *[f"- {_md(x)}" for x in (*extras, *expl.notes)]]
    return "\n".join(lines) + "\n"


def to_json(expl: Explanation, extra: Mapping[str, Any] | None = None) -> str:
    data = expl.to_dict() | dict(extra or {})
    return json.dumps(_finite(data), sort_keys=True, default=str, allow_nan=False)


def _finite(value: Any) -> Any:
    """NaN/inf become None: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def stacked_bars(expl: Explanation) -> tuple[bytes, bytes]:
    """One stacked bar per side (ms per decode step by class), as (PNG bytes, SVG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    sides = (expl.a, expl.b)
    bottoms = [0.0, 0.0]
    for cls in CLASSES:
        vals = [s.ms(cls) for s in sides]
        if not any(v > 0 for v in vals):
            continue
        ax.bar([0, 1], vals, bottom=bottoms, color=COLORS.get(cls, "#333333"), width=0.55,
               label=CLASS_WORDS.get(cls, cls))
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    ax.set_xticks([0, 1])
    ax.set_xticklabels([_plain(short_name(s.label, 30)) for s in sides])
    ax.set_ylabel(f"GPU ms per {_step_word(expl)} step")
    ax.set_title(f"where the {_step_word(expl)} step goes")
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], labels[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png")
    fig.savefig(svg, format="svg")
    return png.getvalue(), svg.getvalue()


def _plain(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("$", r"\$")
