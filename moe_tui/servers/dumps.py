"""Where a server moe-tui starts writes its expert-distribution dumps: a folder of its own.

SGLang 0.5.23 writes `/dump_expert_distribution_record` files into
$SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, /tmp when unset (eplb/expert_distribution.py): a folder
every local user can write, so a dump planted there was read as the server's expert load. Every
start gets `<data dir>/expert-dumps/<server id>/`, owner-only (0700), set in the server's
environment after the profile's own env (a profile cannot point it elsewhere); the runner reads
the dumps from there and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

RECORDER_DIR_ENV = "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"


def expert_dump_dir(server_id: str, *, create: bool = False) -> Path:
    """This server start's dump folder (made owner-only when `create`)."""
    from moe_tui import paths

    folder = paths.data_dir() / "expert-dumps" / server_id
    return paths.private_dir(folder, what="expert dump folder") if create else folder
