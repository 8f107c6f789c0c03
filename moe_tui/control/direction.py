"""The comparison's direction: which profile is the baseline and which the candidate.

A delta's sign depends on it, so it is the user's to choose and it never changes by itself:
- what the user picked last is remembered per data dir (`compare_direction.json` beside the store);
- without a pick, the latest campaign's order decides: its first profile (with runs, or the newest
  campaign's own before their first runs land) is the baseline, its second the candidate (an
  investigation campaign keeps the pair it was made for);
- without a campaign that names two profiles with runs, the first two profiles with runs.
Pure functions over plain data plus one small JSON file; no Textual.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

DIRECTION_FILE = "compare_direction.json"

Pair = tuple[str, str]


def _campaign_profiles(camp: Mapping[str, Any]) -> list[str]:
    definition = camp.get("definition") or {}
    if definition.get("baseline") and definition.get("candidate"):  # an investigation's pair
        return [str(definition["baseline"]), str(definition["candidate"])]
    return list(dict.fromkeys(str(p) for p in definition.get("profiles") or ()))


def newest_campaign_profiles(campaigns: Sequence[Mapping[str, Any]]) -> list[str]:
    """The profiles the newest campaign names, in its order (baseline first); [] without one."""
    return _campaign_profiles(campaigns[-1]) if campaigns else []


def campaign_order(campaigns: Sequence[Mapping[str, Any]], with_runs: Iterable[str]) -> Pair | None:
    """(baseline, candidate) from the newest campaign naming two of these profiles (with runs, or the
    newest campaign's own before its first runs land)."""
    have = set(with_runs)
    for camp in reversed(list(campaigns)):
        names = [n for n in _campaign_profiles(camp) if n in have]
        if len(names) >= 2:
            return names[0], names[1]
    return None


def waiting_profiles(campaigns: Sequence[Mapping[str, Any]], with_runs: Iterable[str]) -> list[str]:
    """Profiles without runs yet named by a campaign one of whose profiles has runs: during a
    campaign's first sweep one side has run and the other not yet; its grid shows what is there."""
    have, out = set(with_runs), list[str]()
    for camp in campaigns:
        named = [str(n) for n in ((camp.get("definition") or {}).get("profiles") or ())]
        if any(n in have for n in named):
            out += [n for n in named if n not in have and n not in out]
    return out


def load_pick(data_dir: Path | None) -> Pair | None:
    """The pair the user picked last in this data dir; None if none or the file is unreadable."""
    if data_dir is None:
        return None
    try:
        data = json.loads((Path(data_dir) / DIRECTION_FILE).read_text())
    except (OSError, ValueError):
        return None
    base, cand = (data.get("baseline"), data.get("candidate")) if isinstance(data, dict) else (None, None)
    if isinstance(base, str) and isinstance(cand, str) and base and cand and base != cand:
        return base, cand
    return None


def save_pick(data_dir: Path | None, baseline: str, candidate: str) -> None:
    """Remember the user's pick (written whole to a temporary file, then renamed)."""
    if data_dir is None or not baseline or not candidate or baseline == candidate:
        return
    path = Path(data_dir) / DIRECTION_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"baseline": baseline, "candidate": candidate}))
    os.replace(tmp, path)


def choose(names: Sequence[str], picked: Pair | None, campaign: Pair | None) -> Pair | None:
    """The direction to open with: the remembered pick, else the campaign's, else the first two."""
    for pair in (picked, campaign):
        if pair is not None and pair[0] in names and pair[1] in names and pair[0] != pair[1]:
            return pair
    return (names[0], names[1]) if len(names) >= 2 else None
