"""What the runner and its benchmark client process both read: the variable that hands the client its
server's key, the warmup pause and the default stall timeout. Standard library only: the runner's side imports this,
not the client's modules (aiohttp, numpy: ~0.25 s of CPU for every runner that would)."""

from __future__ import annotations

API_KEY_ENV = "MOE_TUI_API_KEY"  # the server's key, handed to the bench child in its environment

WARMUP_PAUSE_S = 1.0  # the pause between the warmup pass and the timed run

# The longest a response may deliver no bytes before the request fails as "timeout". A real
# SGLang server is silent for long stretches legitimately: a CuteDSL kernel JIT-compiling on the
# first use of a new batch shape (tens of seconds), a long prefill queue ahead of this request at
# high concurrency (TTFT of tens of seconds), a CUDA graph capture of a new shape. 120 s clears
# those with margin while freeing a queue item held by a hung server 5x sooner than the 600 s
# request timeout. Lower it (`--stall-timeout`) for emulator runs or known-fast servers.
DEFAULT_STALL_TIMEOUT_S = 120.0
