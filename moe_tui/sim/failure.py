"""How the emulator fails the way SGLang 0.5.23 does: a child's error, then the parent's own
kill of its process tree.

A scheduler that hits an exception logs `Scheduler hit an exception: <traceback>` and sends
SIGQUIT to the parent (srt/managers/scheduler.py `run_scheduler_process`). The parent's handler
logs `Received sigquit from a child process. It usually means the child failed.` (launch phase,
srt/entrypoints/engine.py) or `SIGQUIT received. ... It usually means one child failed.` (running
phase, srt/managers/tokenizer_manager.py), then `kill_process_tree(os.getpid())`
(srt/utils/common.py): it logs `kill_process_tree called: ...`, SIGKILLs every child, then
SIGKILLs itself. So a server that died this way exits by SIGKILL although no OOM killer was
involved; the lines before it say why.

`--sim-startup-fault KIND` raises one of the errors a real start meets, in the phase it belongs
to: `nccl` at distributed init, `cuda` while loading weights, `oom` while capturing CUDA graphs.
The wording of each error is PyTorch's / NCCL's own.
"""

from __future__ import annotations

import os
import signal

from moe_tui.sim.output import log

STARTUP_FAULTS = ("oom", "nccl", "cuda")
FAULT_PHASE = {"nccl": "distributed", "cuda": "load", "oom": "graphs"}
FAULT_ERRORS = {
    "oom": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 94.97 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
            "has 93.90 GiB memory in use. (SIMULATED)"),
    "nccl": ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), "
             "NCCL version 2.27.3 ncclSystemError: System call (e.g. socket, malloc) or external library "
             "call failed or device error. (SIMULATED)"),
    "cuda": ("RuntimeError: CUDA error: an illegal memory access was encountered. CUDA kernel errors might "
             "be asynchronously reported at some other API call. (SIMULATED)"),
}


def child_failed(engine: object, error: str, running: bool = False) -> None:
    """A scheduler's exception, then SGLang's kill of its own tree: never returns."""
    prefix = getattr(engine, "prefix", "")
    log(f"Scheduler hit an exception: Traceback (most recent call last):\n{error}", prefix, "ERROR")
    if running:
        log("SIGQUIT received. signum=3, frame=None. It usually means one child failed.", level="ERROR")
    else:
        log("Received sigquit from a child process. It usually means the child failed.", level="ERROR")
    log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
    children = getattr(engine, "children", None)
    if children is not None:
        children.stop()
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_startup_fault(engine: object, phase: str) -> None:
    """Fail the start here when `--sim-startup-fault` names an error of this phase."""
    kind = getattr(getattr(engine, "args", None), "sim_startup_fault", None)
    if kind and FAULT_PHASE.get(kind) == phase:
        child_failed(engine, FAULT_ERRORS[kind], running=False)
