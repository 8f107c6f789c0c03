"""Confounders: every difference between the two columns other than the compared field(s).

Three sources, each per run so that a side whose own runs disagree is caught too:
- the profile snapshot (launch settings: engine, model, parallelism, quantization, GPUs, python,
  each extra arg flag by flag, each env var and emulator setting); identity keys do not count;
- the resolved server args the server reported (`/server_info`, or an imported record's
  `server_info`), flattened with dots: only the keys `judgement.server_arg_kind` calls settings
  (derived values such as the KV pool are shown beside the grid, `derived_notes`; per-start values
  are ignored);
- the environment: SGLang version, GPU model and count, driver (`judgement.ENVIRONMENT_CONFOUNDERS`).
Fields named by `vary` (and their aliases, `judgement.VARY_ALIASES`) are what is compared and
never confound. Host, clocks and the like are listed beside the control check (`environment_listed`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from moe_tui import judgement as J
from moe_tui.compare.evidence import start_key
from moe_tui.compare.memo import derived, derived_by_value
from moe_tui.compare.model import Confounder
from moe_tui.compare.runs import NOT_RECORDED, Run, dig, provenance_values
from moe_tui.profiles import _flag_map

NOT_SET = "(not set)"


def _text(value: object) -> str:
    kind = type(value)
    if kind is str:
        return str(value)
    if kind is int or (kind is float and math.isfinite(float(value))):  # type: ignore[arg-type]
        return repr(value)  # what json.dumps writes for a plain int or finite float, without its cost per value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def profile_settings(snapshot: Mapping[str, Any]) -> dict[str, str]:
    """A profile snapshot as flat launch settings (identity keys dropped); once per build and snapshot."""
    return derived("profile_settings", (snapshot,), lambda: _profile_settings(snapshot))


def _profile_settings(snapshot: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in snapshot.items():
        if key in J.PROFILE_IDENTITY_KEYS:
            continue
        if key == "extra_args" and isinstance(value, (list, tuple)):
            for flag, v in _flag_map(tuple(str(a) for a in value)).items():
                out[f"extra_args {flag}"] = _text(v)
        elif key in ("env", "sim") and isinstance(value, Mapping):
            for k, v in value.items():
                out[f"{key} {k}"] = _text(v)
        else:
            out[key] = _text(value)
    return out


def _flatten(prefix: str, value: object, out: dict[str, str]) -> None:
    if type(value) is dict or isinstance(value, Mapping):  # the cheap test first: decoded JSON is dicts
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = _text(value)


def server_args(run: Run) -> dict[str, str] | None:
    """The run's resolved server args, flat, without ignored keys; None when not recorded."""
    prov = run.provenance
    info = dig(prov, ("server", "resolved_args")) or prov.get("server_info")
    if not isinstance(info, Mapping) or not info:
        return None
    return derived("server_args", (info,), lambda: _same_settings(info))


def _same_settings(info: Mapping[str, Any]) -> dict[str, str]:
    """Runs of one server start repeat its args in objects of their own: flattened once per distinct
    content (the canonical JSON text, one C call), or on their own when they are not plain JSON."""
    try:
        text = json.dumps(info, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError):
        return _settings_of(info)
    return derived_by_value("server_args", text, lambda: _settings_of(info))


def _settings_of(info: Mapping[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    _flatten("", info, flat)
    return {k: v for k, v in flat.items() if _is_setting(k)}


_SETTING_KEYS: dict[str, bool] = {}  # flat key -> counts as a setting (a few hundred SGLang arg names)


def _is_setting(key: str) -> bool:
    setting = _SETTING_KEYS.get(key)
    if setting is None:
        if len(_SETTING_KEYS) > 8192:  # keys of imported records are untrusted: never an unbounded table
            _SETTING_KEYS.clear()
        setting = _SETTING_KEYS[key] = J.server_arg_kind(key) == J.SETTING and key != "simulated"
    return setting


def _distinct(side: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """One of each distinct flat dict (runs of one start share their args): the sets below are alike."""
    seen: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
    for d in side:
        seen.setdefault(tuple(d.items()), d)
    return list(seen.values())


def _compare(source: str, side_a: Sequence[Mapping[str, str]], side_b: Sequence[Mapping[str, str]],
             vary: Iterable[str], missing: str) -> list[Confounder]:
    """Keys whose values differ between the sides, or within a side; `missing` for an absent key."""
    if not side_a or not side_b:
        return []
    side_a, side_b = _distinct(side_a), _distinct(side_b)
    keys = sorted({k for d in (*side_a, *side_b) for k in d})
    out = []
    for key in keys:
        if J.varied(key, vary) or (source == "server_args" and J.derived_from_varied(key, vary)):
            continue
        va = sorted({d.get(key, missing) for d in side_a})
        vb = sorted({d.get(key, missing) for d in side_b})
        if va != vb or len(va) > 1 or len(vb) > 1:
            out.append(Confounder(key, " | ".join(va), " | ".join(vb), source))
    return out


def confounders(runs_a: Sequence[Run], runs_b: Sequence[Run], vary: Iterable[str]) -> tuple[Confounder, ...]:
    """Every confounding difference between two sides' runs (at one concurrency)."""
    vary = tuple(vary)
    found = _compare("profile", [profile_settings(r.profile) for r in runs_a if r.profile],
                     [profile_settings(r.profile) for r in runs_b if r.profile], vary, NOT_SET)
    args_a = [a for a in (server_args(r) for r in runs_a) if a is not None]
    args_b = [a for a in (server_args(r) for r in runs_b) if a is not None]
    found += _compare("server_args", args_a, args_b, vary, "(absent)")
    env_a = [_env(r, J.ENVIRONMENT_CONFOUNDERS) for r in runs_a]
    env_b = [_env(r, J.ENVIRONMENT_CONFOUNDERS) for r in runs_b]
    for key in J.ENVIRONMENT_CONFOUNDERS:
        va = sorted({e[key] for e in env_a if key in e})
        vb = sorted({e[key] for e in env_b if key in e})
        mixed = (len(va) > 1 or len(vb) > 1) and key not in J.ENVIRONMENT_BALANCED_OK
        if va and vb and (va != vb or mixed) and not J.varied(key, vary):
            found.append(Confounder("different machines (hostname)" if key == "hostname" else key,
                                    " | ".join(va), " | ".join(vb), "environment"))
        elif va and va == vb and len(va) > 1 and not J.varied(key, vary):
            found += _unbalanced(key, zip(runs_a, env_a), zip(runs_b, env_b))
    return tuple(found)


def _unbalanced(key: str, side_a: Iterable[tuple[Run, Mapping[str, str]]],
                side_b: Iterable[tuple[Run, Mapping[str, str]]]) -> list[Confounder]:
    """Both sides measured on the same machines, but not in the same shares of their server starts (the
    unit): a machine that is faster weighs more on one side than the other, and the difference is partly
    the machines'. With node blocks (`--node-blocks`) every machine measures whole repeat blocks of both
    sides, so the shares are equal; a block cut short (a failed or flagged run) unbalances them."""
    def shares(side: Iterable[tuple[Run, Mapping[str, str]]]) -> dict[str, Fraction]:
        host_of = {start_key(r) or ("run", r.id): e[key] for r, e in side if key in e}
        counts = Counter(host_of.values())
        return {h: Fraction(n, len(host_of)) for h, n in counts.items()}

    sa, sb = shares(side_a), shares(side_b)
    if sa == sb:
        return []
    name = "machines in unequal shares (hostname)" if key == "hostname" else f"{key} in unequal shares"
    return [Confounder(name, _counted(sa), _counted(sb), "environment")]


def _counted(shares: Mapping[str, Fraction]) -> str:
    return ", ".join(f"{host} {float(share):.0%}" for host, share in sorted(shares.items())) + " of the starts"


def _env(run: Run, keys: Sequence[str]) -> dict[str, str]:
    values = provenance_values(run)
    return {k: values[k] for k in keys if k in values and values[k] != NOT_RECORDED}


def environment_listed(runs_a: Sequence[Run], runs_b: Sequence[Run]) -> tuple[str, ...]:
    """Environment provenance that differs (host, clocks seen, CUDA, ...): listed, not confounding."""
    out = []
    env_a = [_env(r, J.ENVIRONMENT_LISTED) for r in runs_a]  # one provenance read per run, not per key
    env_b = [_env(r, J.ENVIRONMENT_LISTED) for r in runs_b]
    for key in J.ENVIRONMENT_LISTED:
        va = sorted({e[key] for e in env_a if key in e})
        vb = sorted({e[key] for e in env_b if key in e})
        if va and vb and va != vb:
            out.append(f"{key}: {' | '.join(va)} vs {' | '.join(vb)}")
    return tuple(out)


def server_args_missing(runs_a: Sequence[Run], runs_b: Sequence[Run]) -> list[str]:
    """Which sides recorded no resolved server args (their launch can only be compared by profile)."""
    out = []
    for side, runs in (("baseline", runs_a), ("candidate", runs_b)):
        if runs and all(server_args(r) is None for r in runs):
            out.append(side)
    return out


def _derived(run: Run, key: str) -> float | None:
    info = dig(run.provenance, ("server", "resolved_args")) or run.provenance.get("server_info")
    value = info.get(key) if isinstance(info, Mapping) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def derived_notes(runs_a: Sequence[Run], runs_b: Sequence[Run]) -> list[str]:
    """Derived server values (judgement.SERVER_ARGS_SHOWN) that differ between the sides, in words:
    never a confounder, but the KV pool limits the running batch, so a reader must see it."""
    out = []
    for key, label in J.SERVER_ARGS_SHOWN.items():
        va = sorted({v for v in (_derived(r, key) for r in runs_a) if v is not None})
        vb = sorted({v for v in (_derived(r, key) for r in runs_b) if v is not None})
        if not va or not vb or va == vb:
            continue
        mean_a, mean_b = sum(va) / len(va), sum(vb) / len(vb)
        pct = f" ({(mean_b - mean_a) / mean_a * 100:+.1f}%)" if mean_a else ""
        why = "; it limits how many requests run at once" if key == J.KV_POOL_KEY else ""
        out.append(f"derived by the server, not a confounder: {label} ({key}) "
                   f"{' | '.join(f'{v:.0f}' for v in va)} vs {' | '.join(f'{v:.0f}' for v in vb)}{pct}{why}")
    return out
