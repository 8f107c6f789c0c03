"""tmux for tests on a server of their own (`tmux -L <socket>`), never the user's: a test's sessions
cannot collide with, list, or be killed by someone's real tmux. `session(...)` starts a detached
session (killed on leaving), `keys` types into it, `screen` reads it and `wait_screen` waits until
a predicate holds on it, failing with the screen shown."""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

SOCKET = f"moe-tui-test-{os.getpid()}"
# The first command starts the server, whose environment every session inherits: a COLUMNS/LINES
# of the test process would pin the TUI's size (Textual reads them) whatever `-x`/`-y` say.
TMUX = ("env", "-u", "COLUMNS", "-u", "LINES", "tmux", "-L", SOCKET)
T = TypeVar("T")


def tmux(*args: str) -> str:
    """One tmux command on the tests' server; its stdout."""
    return subprocess.run([*TMUX, *args], check=True, capture_output=True, text=True).stdout


def new_session(name: str, command: str, cwd: Path | str, env: Mapping[str, str] = (), *,
                size: tuple[int, int] = (120, 40), remain_on_exit: bool = False) -> None:
    """A detached session `name` running `command` (a shell line) in `cwd`, with `env` set in it
    (TERM is xterm-256color unless given)."""
    env = {"TERM": "xterm-256color", **dict(env)}
    subprocess.run([*TMUX, "new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), "-c", str(cwd),
                    *(f"-e{k}={v}" for k, v in env.items()), command], check=True)
    if remain_on_exit:
        subprocess.run([*TMUX, "set-option", "-t", name, "remain-on-exit", "on"], check=True)


def kill_session(name: str) -> None:
    """End session `name` (its processes get SIGHUP, as when an SSH connection drops); quiet if gone."""
    subprocess.run([*TMUX, "kill-session", "-t", name], capture_output=True)


@contextlib.contextmanager
def session(prefix: str, command: str, cwd: Path | str, env: Mapping[str, str] = (), *,
            size: tuple[int, int] = (120, 40), remain_on_exit: bool = False) -> Iterator[str]:
    """`new_session` under a fresh name (`prefix-<random>`), killed on leaving whatever happened."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    new_session(name, command, cwd, env, size=size, remain_on_exit=remain_on_exit)
    try:
        yield name
    finally:
        kill_session(name)


def keys(name: str, *typed: str) -> None:
    """Type into session `name`, one tmux key name or character at a time ("q", "Tab", "Enter")."""
    for key in typed:
        subprocess.run([*TMUX, "send-keys", "-t", name, key], check=True)


def screen(name: str) -> str:
    """What session `name` shows; lines the terminal wrapped come back whole (-J)."""
    return subprocess.run([*TMUX, "capture-pane", "-p", "-J", "-t", name], capture_output=True, text=True).stdout


def wait_screen(name: str, predicate: Callable[[], T] | str, timeout: float, what: str = "") -> T | str:
    """Poll until `predicate()` is truthy (or, for a string, until the screen shows it) and return
    its value (the screen, for a string). `timeout` is for an idle machine, scaled to this one's
    measured speed (runner_support.scaled); failing shows the screen."""
    from runner_support import wait_for

    check: Callable[[], T | str]
    if isinstance(predicate, str):
        needle = predicate

        def check() -> str:
            text = screen(name)
            return text if needle in text else ""

        what = what or repr(needle)
    else:
        check = predicate
    try:
        return wait_for(check, timeout, what, interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; screen:\n{screen(name)}") from None
