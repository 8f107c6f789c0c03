"""tmux for tests on a server of their own (`tmux -L <socket>`), never the user's: a test's sessions
cannot collide with, list, or be killed by someone's real tmux."""

from __future__ import annotations

import os

SOCKET = f"moe-tui-test-{os.getpid()}"
# The first command starts the server, whose environment every session inherits: a COLUMNS/LINES
# of the test process would pin the TUI's size (Textual reads them) whatever `-x`/`-y` say.
TMUX = ("env", "-u", "COLUMNS", "-u", "LINES", "tmux", "-L", SOCKET)

