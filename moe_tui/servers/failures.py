"""Why a server died, read from its log: the errors SGLang 0.5.23 prints before it goes, and
whether SGLang killed its own process tree.

A scheduler (one per TP rank) that hits an exception logs `Scheduler hit an exception: ...` and
sends SIGQUIT to the launcher (srt/managers/scheduler.py); the launcher logs `Received sigquit from
a child process. It usually means the child failed.` (srt/entrypoints/engine.py, launch phase) or
`SIGQUIT received. ... It usually means one child failed.` (srt/managers/tokenizer_manager.py,
running phase) and calls `kill_process_tree` on itself (srt/utils/common.py), which SIGKILLs the
children and then the launcher. An exit by SIGKILL after those lines is SGLang's own doing, not the
kernel's OOM killer. The error lines name the cause: GPU memory, NCCL, CUDA. Pure text matching.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

OOM, NCCL, CUDA = "out of GPU memory", "NCCL error", "CUDA error"
# (kind, pattern): the first kind whose pattern matches a line wins; patterns are PyTorch's,
# NCCL's and SGLang's own wording. OOM first: an OOM is often reported inside a CUDA error.
_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (OOM, re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|"
                     r"Not enough memory\. Please try to increase --mem-fraction-static", re.I)),
    (NCCL, re.compile(r"NCCL error|nccl\w*Error|DistBackendError|NCCL WARN|NCCL timeout|Watchdog caught collective",
                      re.I)),
    (CUDA, re.compile(r"CUDA error|cudaError\w+|CUBLAS_STATUS_\w+|CUDA_ERROR_\w+|illegal memory access|"
                      r"device-side assert", re.I)),
)
_SELF_KILL = re.compile(r"Received sigquit from a child process|It usually means one child failed|"
                        r"kill_process_tree called", re.I)
CAUSE_TEXT_MAX = 240
DIAGNOSE_LINES = 1000  # how much of the log ring a diagnosis reads


@dataclass(frozen=True)
class Diagnosis:
    """What the log says about a failure: its cause (None if no known error line) and whether
    SGLang stopped its own tree."""

    kind: str | None
    line: str
    self_killed: bool

    def describe(self) -> str:
        if self.kind is None:
            return ""
        return f"{self.kind}: {self.line[:CAUSE_TEXT_MAX]}"


def _strip(line: str) -> str:
    # "[2026-12-02 00:56:34 TP0 EP0] ERROR Scheduler hit an exception: ..." -> the message; the
    # log is the server's text: no control characters travel into a reason shown on screen.
    line = "".join(c if c.isprintable() else " " for c in line.strip())
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)
    return re.sub(r"^(ERROR|WARNING|INFO)\s+", "", line)


def diagnose(lines: Sequence[str]) -> Diagnosis:
    """The first known error line of the log tail (an OOM wins over the CUDA error it causes)."""
    self_killed = any(_SELF_KILL.search(line) for line in lines)
    for kind, pattern in _CAUSES:
        for line in lines:
            if pattern.search(line):
                return Diagnosis(kind, _strip(line), self_killed)
    return Diagnosis(None, "", self_killed)


def exit_reason(how: str, when: str, diagnosis: Diagnosis, *, by_sigkill: bool) -> str:
    """The failure reason for the server row and the run: who ended it and why."""
    if diagnosis.self_killed and by_sigkill:
        head = f"SGLang stopped its own process tree {when} after a child process failed"
    else:
        head = f"server process exited {when} ({how})"
    cause = diagnosis.describe()
    return f"{head}: {cause}" if cause else head
