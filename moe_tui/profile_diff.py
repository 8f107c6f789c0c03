"""`profile_diff`: every launch setting that differs between two server profiles (extra args and
env compared flag by flag), each a `SettingDiff` of kind "backend", "launch" or "identity", for the
comparison grid. `moe_tui.profiles` re-exports both names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from moe_tui.profiles import ServerProfile

_IDENTITY_KEYS = ("name", "description", "port", "host", "python")


@dataclass(frozen=True)
class SettingDiff:
    key: str
    baseline: Any
    candidate: Any
    kind: str  # "backend" (what is being compared), "launch" (could change speed), "identity"

    def describe(self) -> str:
        return f"{self.key}: {json.dumps(self.baseline)} vs {json.dumps(self.candidate)}"


def profile_diff(baseline: ServerProfile, candidate: ServerProfile) -> list[SettingDiff]:
    """Every launch setting that differs. Extra args and env are compared flag by flag."""
    a, b = baseline.launch_settings(), candidate.launch_settings()
    out: list[SettingDiff] = []
    for key in a:
        if key in ("extra_args", "env", "sim"):
            continue
        if a[key] != b[key]:
            kind = "backend" if key == "moe_runner_backend" else "identity" if key in _IDENTITY_KEYS else "launch"
            out.append(SettingDiff(key, a[key], b[key], kind))
    fa, fb = flag_map(baseline.extra_args), flag_map(candidate.extra_args)
    for flag in sorted(set(fa) | set(fb)):
        if fa.get(flag) != fb.get(flag):
            out.append(SettingDiff(f"extra_args {flag}", fa.get(flag), fb.get(flag), "launch"))
    for group, da, db in (("env", a["env"], b["env"]), ("sim", a["sim"], b["sim"])):
        for key in sorted(set(da) | set(db)):
            if da.get(key) != db.get(key):
                out.append(SettingDiff(f"{group} {key}", da.get(key), db.get(key), "launch"))
    return out


def flag_map(args: tuple[str, ...]) -> dict[str, str | bool | list[str]]:
    """`--flag value`, `--flag=value` and bare `--flag` as {flag: value or True}."""
    out: dict[str, str | bool | list[str]] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            if "=" in arg:
                flag, value = arg.split("=", 1)
                out[flag] = value
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[arg] = args[i + 1]
                i += 1
            else:
                out[arg] = True
        else:
            if not positional:
                out["(positional)"] = positional  # where the first one stood among the flags
            positional.append(arg)
        i += 1
    return out
