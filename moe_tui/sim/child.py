"""A child process of the emulator: one TP rank's scheduler, the detokenizer, or a foreign process.

Run as a plain file (`python child.py ROLE ...`, standard library only) with argv[0] set to the
process title, so `ps`/psutil show `sglang::scheduler_TP0_EP0` as they do for SGLang (which calls
setproctitle); /proc/PID/comm gets the first 15 characters through prctl(PR_SET_NAME), as
setproctitle does on Linux. It imports nothing of moe-tui and does no work: it exists to be found,
owned, stopped and listed on "its GPU" by the simulated NVML.

Parent death (SGLang 0.5.23 `kill_itself_when_parent_died`, srt/utils/common.py): schedulers and
the detokenizer ask the kernel for SIGKILL when their parent dies (PR_SET_PDEATHSIG). With
`--orphan SECONDS` they do not (the field reports of orphans holding GPU memory): they notice the
parent is gone when its pipe closes and stay alive SECONDS longer, reparented, holding the GPU.

Roles: `scheduler` / `detokenizer` (the above); `foreign` double-forks out of the emulator's tree
into a session of its own, prints its pid and lives until the emulator's pipe closes.
"""

import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1


def _prctl(option: int, value: int | ctypes.c_char_p) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: titles stay argv[0] only
        pass


def _set_comm(title: str) -> None:
    _prctl(PR_SET_NAME, ctypes.c_char_p(title.encode()[:15]))


def _wait_for_eof() -> None:
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass


def _outside_sigterm(title: str) -> Callable[[int, FrameType | None], None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        os.write(2, f"{title} (pid {os.getpid()}): SIGTERM from outside its launcher; a real scheduler "
                    "dies here before the launcher's clean shutdown (SIMULATED)\n".encode())
        os._exit(128 + signal.SIGTERM)
    return handler


def main(argv: list[str]) -> int:
    role, parent_pid, orphan_s, title = argv[0], int(argv[1]), float(argv[2]), argv[3]
    if role == "foreign":
        if os.fork():
            os._exit(0)  # the intermediate: the grandchild is reparented out of the emulator's tree
        os.setsid()
        sys.stdout.write(f"{os.getpid()}\n")
        sys.stdout.flush()
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        _set_comm("foreign-burn")
        _wait_for_eof()
        return 0
    _set_comm(title)
    # SGLang's schedulers have no SIGTERM handler: a SIGTERM kills them at once. Their launcher ends
    # them with SIGKILL (kill_process_tree), so a SIGTERM here came from outside (a group-wide
    # signal that skipped the launcher's clean shutdown): say so in the log, then die as they do.
    signal.signal(signal.SIGTERM, _outside_sigterm(title))
    if orphan_s <= 0:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before the request took effect
            return 0
    # Tell the parent we are up (SGLang's scheduler sends its init info down a pipe the same way).
    os.write(1, b"ready\n")
    os.close(1)
    _wait_for_eof()
    if orphan_s > 0:
        # Orphaned (a graceful parent SIGTERMs its children first, so EOF means it died): still
        # holding the GPU, as reported in the field. getppid() is no test here: the pipe closes
        # before the kernel reparents us.
        time.sleep(orphan_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
