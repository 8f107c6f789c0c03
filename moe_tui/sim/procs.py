"""The emulator's process tree, shaped like `sglang.launch_server`'s.

SGLang 0.5.23 runs the HTTP server and tokenizer manager in the launched (parent) process and
spawns one scheduler process per TP rank (`run_scheduler_process`, srt/managers/scheduler.py,
title `sglang::scheduler` + `_TP{rank}` when tp_size > 1 + `_EP{rank}` when ep_size > 1) and one
detokenizer (`sglang::detokenizer`, srt/managers/detokenizer_manager.py). The schedulers hold the
GPUs. `ChildProcs` starts the same tree from `child.py` (argv[0] = the title), each child with a
pipe from the parent: the pipe closing is how a child notices its parent is gone.

Children inherit the parent's environment, so moe-tui's `MOE_TUI_SERVER_ID` marker finds them even
when they are reparented. `start_foreign` starts a process outside the tree (fault injection).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD_SCRIPT = Path(__file__).with_name("child.py")
# argv[0] is the title, not a path, so the interpreter cannot find the venv it belongs to and would
# run the base install's site (every .pth there, some of which import packages: 25 ms of CPU a child,
# 9 children a start). child.py needs only the standard library: no site (-S), no user site (-s);
# not -E/-I, which would drop the PYTHONHOME that `child_env` sets.
CHILD_FLAGS = ("-S", "-s")


def log_prefix(tp_rank: int, tp_size: int, ep_size: int) -> str:
    """SGLang's per-rank logger prefix (' TP0 EP0'); no DP/PP parts with dp_size = pp_size = 1."""
    prefix = ""
    if tp_size > 1:
        prefix += f" TP{tp_rank}"
    if ep_size > 1:
        # moe_ep_rank = tp_rank // (tp_size // ep_size) (parallel_state); EP8 over TP8 is the rank.
        prefix += f" EP{tp_rank // max(1, tp_size // ep_size)}"
    return prefix


def scheduler_title(tp_rank: int, tp_size: int, ep_size: int) -> str:
    return "sglang::scheduler" + log_prefix(tp_rank, tp_size, ep_size).replace(" ", "_")


DETOKENIZER_TITLE = "sglang::detokenizer"


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child exec'd with argv[0] = its title. Python finds its standard
    library from argv[0]; a bare title (and a cwd of "/", as the detached runner uses) makes it
    pick the wrong prefix, so PYTHONHOME names the interpreter's own. The child needs nothing
    but the standard library; everything else (the MOE_TUI_SERVER_ID marker) is inherited."""
    out = dict(os.environ if env is None else env)
    out["PYTHONHOME"] = os.pathsep.join(dict.fromkeys([sys.base_prefix, sys.base_exec_prefix]))
    out.pop("PYTHONPATH", None)
    return out


class ChildProcs:
    """One scheduler per TP rank plus a detokenizer, all children of this process."""

    def __init__(self, tp_size: int, ep_size: int, *, orphan_seconds: float = 0.0) -> None:
        self.tp_size, self.ep_size = tp_size, ep_size
        self.orphan_seconds = orphan_seconds
        self.schedulers: list[subprocess.Popen[bytes]] = []
        self.detokenizer: subprocess.Popen[bytes] | None = None
        self.foreign_pid: int | None = None
        self._foreign_pipe: int | None = None

    def _spawn(self, title: str, role: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [title, *CHILD_FLAGS, str(CHILD_SCRIPT), role, str(os.getpid()), str(self.orphan_seconds), title],
            executable=sys.executable, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=None, close_fds=True, env=child_env())  # stderr: the server's log

    def start(self) -> list[int]:
        """Start the tree and wait until every child is up (titled, death signal armed), as
        SGLang's launcher waits for each scheduler's init info; returns the scheduler pids by rank.
        Blocking: the server calls it in an executor."""
        for rank in range(self.tp_size):
            self.schedulers.append(self._spawn(scheduler_title(rank, self.tp_size, self.ep_size), "scheduler"))
        self.detokenizer = self._spawn(DETOKENIZER_TITLE, "detokenizer")
        for proc in self.schedulers + [self.detokenizer]:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            proc.stdout.close()
            if line.strip() != b"ready":
                raise RuntimeError(f"child {proc.pid} exited before it was up (rc {proc.poll()})")
        return [p.pid for p in self.schedulers]

    @property
    def pids(self) -> list[int]:
        procs = self.schedulers + ([self.detokenizer] if self.detokenizer else [])
        return [p.pid for p in procs]

    def dead(self) -> list[int]:
        """Children that exited on their own (a crashed rank)."""
        procs = self.schedulers + ([self.detokenizer] if self.detokenizer else [])
        return [p.pid for p in procs if p.poll() is not None]

    def start_foreign(self) -> int:
        """A process outside this tree and outside moe-tui's marker, alive while we are."""
        env = {k: v for k, v in child_env().items() if k != "MOE_TUI_SERVER_ID"}
        read_end, write_end = os.pipe()
        proc = subprocess.Popen(["foreign-burn", *CHILD_FLAGS, str(CHILD_SCRIPT), "foreign", str(os.getpid()), "0", "foreign-burn"],
                                executable=sys.executable, stdin=read_end, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        os.close(read_end)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        proc.stdout.close()
        proc.wait(5)
        self._foreign_pipe = write_end
        self.foreign_pid = int(line.strip())
        return self.foreign_pid

    def stop(self, timeout: float = 3.0) -> None:
        """Shutdown: SIGKILL every child, as SGLang's kill_process_tree does (srt/utils/common.py:
        `child.kill()`). A child that receives a SIGTERM therefore got it from someone else (a
        group-wide signal): child.py says so in the log."""
        if self._foreign_pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._foreign_pipe)
            self._foreign_pipe = None
        procs = self.schedulers + ([self.detokenizer] if self.detokenizer else [])
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(2)
