"""A key for every server moe-tui starts, so that only moe-tui talks to it: never on the command line.

Without a key, any local user can reach every route of a server on loopback: SGLang 0.5.23 checks
none when neither `--api-key` nor `--admin-api-key` is set (utils/auth.py `decide_request_auth`,
the levels of entrypoints/http_server.py), so another user's `/start_profile` with an `output_dir`
made the owner's server write traces into the owner's private folders, and its `/flush_cache` or
requests disturbed a timed run. With `--api-key` every route but /health, /ready and /metrics
answers only `Bearer <key>`, the admin routes (profiler, expert recorder, `/flush_cache`) included,
and `/get_server_info` too (it returns the server args, keys among them: `dataclasses.asdict`).
An `--admin-api-key` alone would leave `/get_server_info` open, and the key in it.

So every start gets an api key: the profile's `api_key` when it sets one, else a new random one. It
never goes on the command line (`ps` shows argv to every local user): it is written to a YAML file
the server reads with `--config` (server_args_config_parser.ConfigArgumentMerger: keys spelled as
the flags, `api-key: ...`; the command line wins), owner-only (0600, created O_EXCL|O_NOFOLLOW) in
the start's private folder (`servers.dumps`, 0700), removed at stop. moe-tui's client, the gate and
explain send it (`servers.keys`); SGLang's own bench client gets it as OPENAI_API_KEY in its
environment, which it sends on every request, `/flush_cache` included. A profile whose extra args
carry `--config` or `--api-key` decides the keys itself (SGLang takes one config file).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from moe_tui.profiles import ServerProfile

CONFIG_NAME = "moe-tui-keys.yaml"


def start_key(profile: ServerProfile) -> str:
    """The key this start's server gets, or "" when the profile decides the keys itself."""
    flags = {str(a).split("=", 1)[0] for a in profile.extra_args}
    if profile.engine not in ("sglang", "sim") or flags & {"--config", "--api-key"}:
        return ""
    return profile.api_key or secrets.token_urlsafe(32)


def write_key_config(folder: Path, key: str) -> Path:
    """The `--config` file holding the key: 0600, never following or reusing what is there."""
    path = folder / CONFIG_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"api-key: {json.dumps(key)}\n")  # a JSON string is a YAML string
    return path


def scrub(text: str, keys: tuple[str, ...]) -> str:
    """`text` with every key replaced by the redaction mark (the server echoes its args, keys
    included, in its log and at /get_server_info)."""
    from moe_tui.redaction import REDACTED

    for key in keys:
        if key:
            text = text.replace(key, REDACTED)
    return text
