"""Secrets out of sight: env values and argv flags whose names look like secrets (`SECRET_MARKERS`:
an API key, a token, a password) are shown and stored as `REDACTED`. Used wherever a profile's
environment or a server's command line is recorded (server starts, profile snapshots, logs)."""

from __future__ import annotations

from collections.abc import Mapping

SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
REDACTED = "***redacted***"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """Hide values of flags whose names look like secrets (e.g. --api-key)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("--") and is_secret_name(arg.split("=", 1)[0]):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out
