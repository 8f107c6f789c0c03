"""The files of one by-stage profile, sorted as SGLang 0.5.23 writes them (profiler_manager.py).

With `profile_by_stage` each rank writes `<prefix>-<id>-TP-<r>[-EP-<r>]-<STAGE>.trace.json.gz`:
- a prefill capture is flushed under EXTEND when the first decode batch comes;
- the decode capture is written under DECODE after `num_steps` decode batches, unless a prefill
  batch past `num_steps` comes first (decodes interleaved with a slow-filling batch): then it is
  written under EXTEND, over the prefill capture's name;
- the configuration stays armed after the DECODE export: the next prefill starts a capture again.
So `CaptureCollector` moves each complete set of ranks out of the output folder as soon as it is
whole and no longer growing (torch writes the gzip in place), the first EXTEND set as the prefill,
a second EXTEND set as the decode capture under its real content's name, MIXED (decode steps with
prefill batches between them), and stops waiting then, not after `PROFILE_TIMEOUT_S`. Whatever is
left in the folder afterwards (a capture the armed profiler began, a set missing ranks) is discarded
and said so.
"""

from __future__ import annotations

from pathlib import Path

from moe_tui.explain.trace import parse_trace_name


class CaptureCollector:
    def __init__(self, raw: Path, prefix: str, world: int) -> None:
        self.raw, self.prefix, self.world = raw, prefix, world
        self.kept = raw / "kept"
        self.kept.mkdir(mode=0o700, exist_ok=True)
        self.decode_stage: str | None = None  # "DECODE", or "MIXED" when SGLang named it EXTEND
        self.extend_kept = False
        self._sizes: dict[str, int] = {}

    def _sets(self, *, settled: bool = False) -> dict[str, list[Path]]:
        """stage -> that stage's files, for each stage every rank wrote and whose sizes held since
        the last poll (`settled`: the writers are done, sizes need not hold)."""
        by_stage: dict[str, dict[int, Path]] = {}
        sizes: dict[str, int] = {}
        for p in self.raw.glob(f"{self.prefix}-*.trace.json.gz"):
            parts = parse_trace_name(p.name)
            if parts is None or parts.stage is None:
                continue
            try:
                sizes[p.name] = p.stat().st_size
            except OSError:
                continue
            by_stage.setdefault(parts.stage, {})[parts.tp_rank] = p
        stable = {n for n, size in sizes.items() if (settled or self._sizes.get(n) == size) and size > 0}
        self._sizes = sizes
        return {stage: list(ranks.values()) for stage, ranks in by_stage.items()
                if len(ranks) >= self.world and all(p.name in stable for p in ranks.values())}

    def poll(self, *, settled: bool = False) -> bool:
        """Move what is complete; True once the decode capture is in."""
        if self.decode_stage is not None:
            return True
        sets = self._sets(settled=settled)
        if "EXTEND" in sets:  # first: a prefill flush may land in the same poll as the decode capture
            if not self.extend_kept:
                self._move(sets["EXTEND"], "EXTEND")
                self.extend_kept = True
            else:
                self._move(sets["EXTEND"], "MIXED")
                self.decode_stage = "MIXED"
        if "DECODE" in sets and self.decode_stage is None:
            self._move(sets["DECODE"], "DECODE")
            self.decode_stage = "DECODE"
        return self.decode_stage is not None

    def _move(self, files: list[Path], stage: str) -> None:
        for p in files:
            name = p.name if stage == "EXTEND" or stage == "DECODE" else p.name.replace(
                "-EXTEND.trace.json", f"-{stage}.trace.json")
            p.replace(self.kept / name)
            self._sizes.pop(p.name, None)

    def decode_ranks(self) -> int:
        return self.world if self.decode_stage else 0

    def finish(self) -> tuple[list[Path], list[str]]:
        """(the files to keep: the sorted captures and anything not a trace, e.g. the expert dump),
        notes on the traces discarded."""
        self.poll(settled=True)  # the profiler is stopped and disarmed: what is whole now is final
        keep = sorted(p for p in self.kept.iterdir() if p.is_file())
        notes: list[str] = []
        for p in sorted(self.raw.iterdir()):
            if not p.is_file():
                continue
            if p.name.endswith((".trace.json.gz", ".trace.json")):
                notes.append(f"{p.name} discarded: a capture beyond the profiled one (SGLang's by-stage profiler "
                             f"stays armed) or a set missing ranks")
                p.unlink()
            else:
                keep.append(p)
        return keep, notes
