"""tmux for tests on a server of their own (`tmux -L <socket>`), never the user's: a test's sessions
cannot collide with, list, or be killed by someone's real tmux."""

from __future__ import annotations

import os

SOCKET = f"moe-tui-test-{os.getpid()}"
TMUX = ("tmux", "-L", SOCKET)

