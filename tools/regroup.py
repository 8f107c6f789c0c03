"""The package regrouping of wave 4: where each flat root module went, and a rewrite of old names.

`MOVES` maps every old module (dotted, under `moe_tui`) to its new home. `--apply` rewrites, in every
tracked text file (or the files given), dotted names (`moe_tui.store.Store`), `from moe_tui import old`
lines and source paths (`moe_tui/store.py`) to the new ones. The rewrite is idempotent: a name that is
already new is left alone, so a branch merged after the move can run it again over its own files.
`--move` does the `git mv` itself (run once, on main).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

MOVES: dict[str, str] = {
    # store/: the one database and what lives in it (runs, records, queue)
    "store": "store.db",
    "store_records": "store.records",
    "store_schema": "store.schema",
    "store_integrity": "store.integrity",
    "store_retention": "store.retention",
    "queue": "store.queue",
    "queue_plan": "store.queue_plan",
    "queue_spec": "store.queue_spec",
    # run/: the runner process, its controller (typed parts), recording, orphans
    "controller": "run.controller",
    "controller_items": "run.items",
    "controller_ops": "run.ops",
    "controller_telemetry": "run.telemetry",
    "runner": "run.runner",
    "runner_client": "run.client",
    "runner_watchdog": "run.watchdog",
    "recording": "run.recording",
    "orphans": "run.orphans",
    "bounds": "run.bounds",
    "explain_run": "run.profiled",
    # investigate/: planner, proposals, report, store reads
    "investigate": "investigate.model",
    "investigate_proposals": "investigate.planner",
    "investigate_report": "investigate.report",
    "investigate_store": "investigate.store",
    # grids/: the comparison grid read from the store, with its extras
    "grids": "grids.pair",
    "grid_extras": "grids.extras",
    # export/: renderers, Markdown, plots, the tidy results frame
    "export": "export.formats",
    "export_markdown": "export.markdown",
    "export_plot": "export.plot",
    "results": "export.results",
    # roofline/: the decode roofline and what it is computed from
    "roofline": "roofline.decode",
    "roofline_inputs": "roofline.inputs",
    "model_shape": "roofline.model_shape",
    "gpu_specs": "roofline.gpu_specs",
    # gate/: the correctness gate (probe a server, judge the answers)
    "gate": "gate.probe",
    "correctness": "gate.correctness",
    # explain/ gains its store reads; servers/ the API keys of the servers it started
    "explain_store": "explain.store",
    "server_keys": "servers.keys",
}

PACKAGES = sorted({new.split(".")[0] for new in MOVES.values()})
# Submodules each new package holds (already-new names are not rewritten again).
_SUBS: dict[str, set[str]] = {}
for _new in MOVES.values():
    _pkg, _sub = _new.split(".")
    _SUBS.setdefault(_pkg, set()).add(_sub)
# ... and every module a package holds now (modules added after the move, e.g. store/errors.py).
_ROOT = Path(__file__).resolve().parents[1] / "moe_tui"
for _pkg in list(_SUBS):
    _SUBS[_pkg] |= {p.stem for p in (_ROOT / _pkg).glob("*.py") if p.stem != "__init__"}

# Files that name the new packages themselves (`moe_tui.store` = the package): rewritten by hand.
SKIP = {"tools/regroup.py", "pyproject.toml", "docs/architecture.md"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".txt", ".sh", ".json", ".yml", ".yaml", ""}


def _dotted(old: str) -> re.Pattern[str]:
    pkg = old.split(".")[0]
    subs = _SUBS.get(old, set()) if old in _SUBS else set()
    alts = "|".join(sorted(subs))
    # already new: `moe_tui.store.db...` or `from moe_tui.store import db`
    guard = f"(?!\\.(?:{alts})\\b)(?!\\s+import\\s+(?:{alts})\\b)" if subs else ""
    return re.compile(rf"\bmoe_tui\.{re.escape(old)}{guard}(?![\w])" if pkg else "")


_DOTTED = [(_dotted(old), f"moe_tui.{new}") for old, new in MOVES.items()]
_PATHS = [(re.compile(rf"\bmoe_tui/{re.escape(old)}\.py\b"), f"moe_tui/{new.replace('.', '/')}.py")
          for old, new in MOVES.items()]
_FROM = re.compile(r"^(?P<indent>\s*)from moe_tui import (?P<names>[\w ,]+?)(?P<tail>\s*(#.*)?)$", re.M)


def _from_line(match: re.Match[str]) -> str:
    indent, tail = match["indent"], match["tail"]
    names = [n.strip() for n in match["names"].split(",")]
    moved = [n for n in names if n.split(" as ")[0].strip() in MOVES]
    if not moved:
        return match[0]
    lines = []
    kept = [n for n in names if n not in moved]
    if kept:
        lines.append(f"{indent}from moe_tui import {', '.join(kept)}")
    for n in moved:
        old, _, alias = (p.strip() for p in n.partition(" as "))
        pkg, sub = MOVES[old].rsplit(".", 1)
        lines.append(f"{indent}from moe_tui.{pkg} import {sub} as {alias or old}")
    lines[-1] += tail
    return "\n".join(lines)


def rewrite(text: str) -> str:
    for pattern, new in _DOTTED:
        text = pattern.sub(new, text)
    text = _FROM.sub(_from_line, text)
    for pattern, new in _PATHS:
        text = pattern.sub(new, text)
    return text


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True).stdout
    return [Path(p) for p in out.splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apply", action="store_true", help="rewrite old module names in place")
    ap.add_argument("--move", action="store_true", help="git mv the old modules (once, on main)")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    if args.move:
        for old, new in MOVES.items():
            src, dst = Path("moe_tui", f"{old}.py"), Path("moe_tui", *new.split(".")).with_suffix(".py")
            if src.exists():
                dst.parent.mkdir(exist_ok=True)
                subprocess.run(["git", "mv", str(src), str(dst)], check=True)
    changed = 0
    for path in args.files or _tracked():
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or str(path) in SKIP:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            changed += 1
            if args.apply:
                path.write_text(new)
            else:
                print(path)
    print(f"{changed} file(s) {'rewritten' if args.apply else 'would change'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
