"""The kernel-name corpus: real kernel names as builds emit them, each with the class an expert
gives it and where it comes from (`explain/kernel_corpus.csv`; columns class, name, project,
source). The classifier (`moe_tui.explain.rules`) is held to it by the tests, and the emulator's
traces (`moe_tui.sim.traces`) draw their kernel names from it, so the emulator never launches a
name made up to fit the rules. A module of its own, importing nothing of moe-tui: the emulator
may not import explain's package (that would close an import circle).

Pure: the packaged file in, records out.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CORPUS_FILE = Path(__file__).parent / "explain" / "kernel_corpus.csv"


class CorpusError(ValueError):
    """The corpus file is malformed; names the row."""


@dataclass(frozen=True)
class CorpusKernel:
    kernel_class: str
    name: str
    project: str
    source: str


@cache
def load_corpus(path: str | Path = CORPUS_FILE) -> tuple[CorpusKernel, ...]:
    out: list[CorpusKernel] = []
    seen: set[str] = set()
    with open(path, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            cls, name = (row.get("class") or "").strip(), row.get("name") or ""
            if not cls.isidentifier() or not name or not row.get("project") or not row.get("source"):
                raise CorpusError(f"{path}:{i}: needs a class, a name, a project and a source")
            if name in seen:
                raise CorpusError(f"{path}:{i}: {name[:60]!r} is listed twice")
            seen.add(name)
            out.append(CorpusKernel(cls, name, row["project"], row["source"]))
    return tuple(out)


def corpus_name(fragment: str, kernel_class: str | None = None) -> str:
    """The one corpus name containing `fragment` (and of `kernel_class`, when given); KeyError
    when none or several do (a caller names exactly one real kernel)."""
    found = [k.name for k in load_corpus() if fragment in k.name
             and (kernel_class is None or k.kernel_class == kernel_class)]
    if len(found) != 1:
        raise KeyError(f"{len(found)} corpus names contain {fragment!r}")
    return found[0]
