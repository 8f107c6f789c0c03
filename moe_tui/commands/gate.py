"""`moe-tui gate PROFILE`: run the greedy correctness gate against the profile's running server.

Sends the fixed prompt set (temperature 0, logprobs on) to the server at the profile's address
(or `--url`), stores every prompt's token ids and logprobs, and with `--against BASELINE` judges
them against the baseline profile's latest stored gate pass. `--no-send` only judges what is
stored. Exit 0: stored (and passed), 3: output differs, 2: bad input or nothing to compare,
1: the server or the store failed.
"""

from __future__ import annotations

import argparse
import sys

from moe_tui.commands.common import EXIT_NOT_FOUND, add_profiles_dir


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("profile", metavar="PROFILE", help="profile whose server answers the gate")
    add_profiles_dir(p)
    p.add_argument("--url", default=None, help="server address (default: the profile's host and port)")
    p.add_argument("--against", metavar="BASELINE", default=None,
                   help="judge against this profile's latest stored gate pass")
    p.add_argument("--no-send", action="store_true", help="send nothing; judge the stored passes")
    p.set_defaults(run=run)
    return p


def _err(message: str) -> None:
    print(f"moe-tui gate: {message}", file=sys.stderr)


def _resolved_backend(url: str) -> str | None:
    import httpx

    try:
        info = httpx.get(url + "/server_info", timeout=10.0, trust_env=False).json()
    except (httpx.HTTPError, ValueError):
        return None
    return info.get("moe_runner_backend") if isinstance(info, dict) else None


def run(args: argparse.Namespace) -> int:
    import asyncio

    from moe_tui.commands.server import find_profile
    from moe_tui.gate.correctness import OUTPUT_DIFFERS, PASSED, compare_gate
    from moe_tui.gate.probe import GateError, run_gate, stored_samples
    from moe_tui.profiles import ProfileError
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    if args.no_send and not args.against:
        _err("--no-send needs --against BASELINE (nothing to do otherwise)")
        return 2
    try:
        profile = find_profile(args.profile, args.profiles_dir)
    except KeyError as exc:
        _err(str(exc.args[0]))
        return EXIT_NOT_FOUND
    except ProfileError as exc:
        _err(str(exc))
        return 2
    url = (args.url or profile.base_url).rstrip("/")
    try:
        with Store.open_default() as store:
            if not args.no_send:
                backend = _resolved_backend(url)
                gate_id = asyncio.run(run_gate(store, profile.name, url, resolved_backend=backend))
                row = store.gate_samples(profile.name)
                if row is None:
                    _err(f"gate pass #{gate_id} of {profile.name} was not stored")
                    return 1
                print(f"gate pass #{gate_id} of {profile.name} stored: {len(row['samples'])} prompts, "
                      f"set {row['prompt_set']}, backend {backend or 'unknown'}")
            if not args.against:
                return 0
            base_row, cand_row = store.gate_samples(args.against), store.gate_samples(profile.name)
    except GateError as exc:
        _err(str(exc))
        return 1
    except StoreError as exc:
        _err(str(exc))
        return 1
    verdict = compare_gate(stored_samples(base_row), stored_samples(cand_row),
                           baseline_set=base_row["prompt_set"] if base_row else "",
                           candidate_set=cand_row["prompt_set"] if cand_row else "")
    print(f"{profile.name} against {args.against}: {verdict.words}")
    return {PASSED: 0, OUTPUT_DIFFERS: 3}.get(verdict.status, 2)
