"""Limits checked before any work: what one control-socket request and one campaign may ask for.

The runner's socket is owner-only, but an owner's script (or a bug) can still send a request that
would cost minutes and gigabytes: a campaign of 1,000,000 concurrencies expanded item by item.
`check_request_args` walks a request's arguments once (cheap, bounded by the socket's line limit)
and refuses any list over `MAX_LIST`, nesting over `MAX_DEPTH` or a string over `MAX_STRING`;
`check_campaign_size` refuses a campaign whose item count (profiles x concurrencies x repeats,
known before any item is built) is over `MAX_CAMPAIGN_ITEMS`. Both raise ValueError naming the
field and the limit; the runner answers it as the op's error and does nothing else.
"""

from __future__ import annotations

from typing import Any

MAX_LIST = 4096
MAX_DEPTH = 16
MAX_STRING = 1 << 20
# Far over any real campaign (the CLI asks for --yes over its soft cap); a guard against absurd ones.
MAX_CAMPAIGN_ITEMS = 1_000_000
MAX_CAMPAIGN_CONCURRENCIES = 1024


def check_request_args(args: Any, where: str = "args", depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(args, str):
        if len(args) > MAX_STRING:
            raise ValueError(f"{where}: a string of {len(args):,} characters, over the limit of {MAX_STRING:,}")
    elif isinstance(args, list):
        if len(args) > MAX_LIST:
            raise ValueError(f"{where}: {len(args):,} entries, over the limit of {MAX_LIST:,}; nothing done")
        for i, value in enumerate(args):
            check_request_args(value, f"{where}[{i}]", depth + 1)
    elif isinstance(args, dict):
        if len(args) > MAX_LIST:
            raise ValueError(f"{where}: {len(args):,} keys, over the limit of {MAX_LIST:,}; nothing done")
        for key, value in args.items():
            check_request_args(value, f"{where}.{key}", depth + 1)


def check_campaign_size(profiles: int, concurrencies: int, repeats: int) -> None:
    if concurrencies > MAX_CAMPAIGN_CONCURRENCIES:
        raise ValueError(f"campaign: {concurrencies:,} concurrencies, over the limit of "
                         f"{MAX_CAMPAIGN_CONCURRENCIES:,}; nothing added")
    size = profiles * concurrencies * max(1, repeats)
    if size > MAX_CAMPAIGN_ITEMS:
        raise ValueError(f"campaign: {size:,} items ({profiles} profile(s) x {concurrencies} concurrency(ies) x "
                         f"{repeats} repeat(s)), over the limit of {MAX_CAMPAIGN_ITEMS:,}; nothing added")
