"""SGLang 0.5.23's launch flags as its own parser reads them, for checking profiles without SGLang.

`sglang_flags_0_5_23.json` lists every option string of `ServerArgs.add_cli_args` (532 of them)
with the setting (argparse dest) it writes; `tools/sglang_parser/check.py` writes it from the
installed 0.5.23 parser and fails `make lint` when the two disagree. SGLang's parser is argparse
with abbreviations allowed, so a flag reaches a setting by its name, by an alias
(`--tensor-parallel-size` = `--tp-size`, `--model` = `--model-path`) or by any unambiguous prefix
(`--moe-runner` = `--moe-runner-backend`); `resolve` answers the same way argparse does.

`PROFILE_OWNED` names the settings a profile sets through its own keys: extra_args reaching one of
them under any spelling would launch something other than the profile describes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

CHECKED_VERSION = "0.5.23"
FLAGS_FILE = Path(__file__).with_name("sglang_flags_0_5_23.json")

# argparse dest -> the profile key that sets it.
PROFILE_OWNED: dict[str, str] = {
    "model_path": "model_path", "served_model_name": "served_model_name", "tp_size": "tp_size",
    "ep_size": "ep_size", "moe_runner_backend": "moe_runner_backend", "quantization": "quantization",
    "host": "host", "port": "port", "api_key": "api_key", "nnodes": "nnodes",
}
# Set by moe-tui per start, not by a profile key: a multi-node start's rank and rendezvous address
# (servers/multinode.py), derived from the profile's `nnodes`.
START_OWNED: dict[str, str] = {"node_rank": "nnodes", "dist_init_addr": "nnodes"}


@dataclass(frozen=True)
class Resolved:
    """What one spelling means to SGLang's parser."""

    spelling: str
    dest: str | None  # None: unknown to 0.5.23, or ambiguous
    canonical: str | None  # the dest's first option string (its name in SGLang's --help)
    candidates: tuple[str, ...] = ()  # more than one: an ambiguous abbreviation

    @property
    def ambiguous(self) -> bool:
        return len(self.candidates) > 1


@cache
def flag_table() -> dict[str, str]:
    """option string -> dest, as 0.5.23's parser defines them."""
    data = json.loads(FLAGS_FILE.read_text(encoding="utf-8"))
    return dict(data["flags"])


@cache
def _canonical() -> dict[str, str]:
    out: dict[str, str] = {}
    for option, dest in flag_table().items():
        out.setdefault(dest, option)  # the file keeps the parser's order: the first is the main name
    return out


def resolve(spelling: str) -> Resolved:
    """The setting a `--flag` (or `--flag=value`) reaches, by exact name, alias or unique prefix."""
    flag = spelling.split("=", 1)[0]
    table = flag_table()
    if flag in table:
        return Resolved(flag, table[flag], _canonical()[table[flag]], (flag,))
    if not flag.startswith("--") or len(flag) <= 2:
        return Resolved(flag, None, None)
    matches = tuple(o for o in table if o.startswith(flag))
    if len(matches) == 1:  # argparse (3.11) takes a prefix only when one option string has it
        return Resolved(flag, table[matches[0]], _canonical()[table[matches[0]]], matches)
    return Resolved(flag, None, None, matches)


def owned_reached(extra_args: tuple[str, ...] | list[str]) -> list[tuple[str, Resolved]]:
    """(profile key, resolution) for each extra arg that reaches a profile-owned setting."""
    out = []
    for arg in extra_args:
        if not arg.startswith("--"):
            continue
        r = resolve(arg)
        owner = PROFILE_OWNED.get(r.dest or "") or START_OWNED.get(r.dest or "")
        if owner:
            out.append((owner, r))
    return out


def owned_conflict(extra_args: tuple[str, ...] | list[str], profile: Mapping[str, Any]) -> str | None:
    """Why extra_args may not stand, naming both spellings: the first one that reaches a setting the
    profile sets through its own key (extra_args come last, so they would win, and the stored
    profile would describe a launch that did not happen). None when there is none."""
    for key, r in owned_reached(extra_args):
        spelled = r.spelling if r.spelling == r.canonical else f"{r.spelling} (SGLang {CHECKED_VERSION} reads it as {r.canonical})"
        value = repr(profile[key]) if key in profile else "its default"
        return f"{spelled} sets {r.dest}, which is set by the profile's own key '{key}' ({value}); remove it from extra_args"
    return None
