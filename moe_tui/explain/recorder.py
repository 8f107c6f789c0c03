"""Whether a server records expert load: SGLang's `--expert-distribution-recorder-mode`, read the
way SGLang 0.5.23 reads it, so `explain` never asks a server that would die of the question.

In 0.5.23 a server launched without a recorder mode holds the no-op recorder, whose
`start_record`/`stop_record`/`dump_record` raise; the scheduler's `expert_distribution_handle`
does not catch it, the scheduler exits ("Scheduler hit an exception") and the launcher kills the
whole tree (eplb/expert_distribution.py, managers/scheduler.py, entrypoints/engine.py). The mode
is set by the flag (any spelling SGLang's parser accepts: `moe_tui.sglang_flags`), and
automatically to "stat" with `--enable-eplb` or `--expert-balancedness-report-mode`
(server_args.py). A live server's `/server_info` reports the resolved value; it wins when present.

Pure: profile arguments and a server_info dict in, a mode (or None) out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from moe_tui.sglang_flags import resolve

RECORDER_DEST = "expert_distribution_recorder_mode"
RECORDER_FLAG = "--expert-distribution-recorder-mode"
# settings that make 0.5.23 set the recorder mode to "stat" by itself (server_args.py)
AUTO_STAT_DESTS = ("enable_eplb", "expert_balancedness_report_mode")


def recorder_mode(extra_args: Sequence[str]) -> str | None:
    """The recorder mode a server launched with `extra_args` runs with (None: no recorder)."""
    mode: str | None = None
    auto = False
    args = list(extra_args)
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        dest = resolve(arg).dest
        value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else None)
        if dest == RECORDER_DEST:
            mode = value if value and not value.startswith("--") else None
        elif dest == "enable_eplb":
            auto = True
        elif dest == "expert_balancedness_report_mode" and value and not value.startswith("--"):
            auto = True
    return mode if mode is not None else ("stat" if auto else None)


def server_recorder_mode(server_info: Mapping[str, Any] | None, extra_args: Sequence[str]) -> str | None:
    """The live server's resolved mode when its /server_info says (SGLang's own post-processing
    applied), else what the profile's arguments give."""
    if isinstance(server_info, Mapping) and RECORDER_DEST in server_info:
        value = server_info[RECORDER_DEST]
        return str(value) if value else None
    return recorder_mode(extra_args)


def variant_name(profile_name: str) -> str:
    return f"{profile_name}-expert-stat"


def why_not_recorded(profile_name: str) -> str:
    """Why a side has no expert load, and the profile variant that would have it."""
    return (f"expert load not recorded for {profile_name}: it runs without {RECORDER_FLAG}, and SGLang kills the "
            f"whole server when asked to record without one; to record it, use a variant of the profile "
            f"({variant_name(profile_name)}: the same profile with \"{RECORDER_FLAG}\", \"stat\" in extra_args)")
