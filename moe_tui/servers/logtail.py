"""A server's log read in bounded memory: what the runner follows and `server logs` prints.

A server's output is not ours to trust: a line that never ends (a progress bar without a newline,
a hung writer, a hostile launcher) grew the runner from 94 MB to 1 GB in two minutes, and
`server logs -n 5` printed 549 MB. Here:

- `LineSplitter` turns the bytes the runner reads into lines, each cut at `MAX_LINE_CHARS` with
  a note of how much was left out; the rest of a cut line is skipped, never held. What it holds
  between reads is at most one line's worth.
- `READ_CHUNK` / `MAX_DRAIN_BYTES`: how much one poll of the follower reads (a server writing
  faster than that is read on the next polls, never in one huge read).
- `tail_lines(fd, n)`: the last `n` lines of an open log, read backwards from its end in blocks
  (at most `MAX_TAIL_BYTES`), each line cut like the follower's: never the whole file.
"""

from __future__ import annotations

import os

MAX_LINE_CHARS = 64 * 1024
READ_CHUNK = 1 << 20
MAX_DRAIN_BYTES = 8 << 20
MAX_TAIL_BYTES = 16 << 20
_BLOCK = 64 * 1024


def cut_note(dropped: int) -> str:
    return f" [moe-tui: line cut, {dropped:,} more bytes not kept]"


class LineSplitter:
    """Bytes in, whole lines out (without their newline), each at most MAX_LINE_CHARS characters."""

    def __init__(self, max_line: int = MAX_LINE_CHARS):
        self.max_line = max_line
        self._partial = b""
        self._dropped = 0  # > 0: inside a line already cut; its rest is counted, not kept

    def feed(self, chunk: bytes) -> list[str]:
        lines: list[str] = []
        data = self._partial + chunk if self._partial else chunk
        self._partial = b""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            lines.append(self._line(data[start:end]))
            start = end + 1
        rest = data[start:]
        if self._dropped:
            self._dropped += len(rest)
        elif len(rest) > self.max_line:  # a line that does not end: emit its head now, skip the rest
            lines.append(self._decode(rest[:self.max_line]) + cut_note(len(rest) - self.max_line))
            self._dropped = 1 + len(rest) - self.max_line
        else:
            self._partial = rest
        return lines

    def pending(self) -> str:
        """The unfinished line so far (a progress bar still updating), without consuming it."""
        return self._decode(self._partial) if self._partial else ""

    def flush(self) -> str:
        """The unfinished line held so far (its text; empty when none), and forget it."""
        rest, self._partial, self._dropped = self._partial, b"", 0
        return self._decode(rest) if rest else ""

    def _line(self, raw: bytes) -> str:
        if self._dropped:  # the end of a line whose head was already emitted
            self._dropped = 0
            return "" if not raw.strip() else f"[moe-tui: ... end of the cut line] {self._decode(raw[-200:])}"
        if len(raw) > self.max_line:
            return self._decode(raw[:self.max_line]) + cut_note(len(raw) - self.max_line)
        return self._decode(raw)

    @staticmethod
    def _decode(raw: bytes) -> str:
        return raw.decode("utf-8", "replace").rstrip("\r")


def tail_lines(fd: int, n: int, *, max_bytes: int = MAX_TAIL_BYTES, max_line: int = MAX_LINE_CHARS) -> list[str]:
    """The last `n` lines of the regular file open at `fd`, reading at most `max_bytes` back from
    its end; lines over `max_line` characters are cut. Leaves the offset at the end of the file."""
    size = os.fstat(fd).st_size
    pos = size
    data = b""
    while pos > 0 and data.count(b"\n") <= n and size - pos < max_bytes:
        step = min(_BLOCK, pos, max_bytes - (size - pos))
        pos -= step
        data = os.pread(fd, step, pos) + data
    os.lseek(fd, size, os.SEEK_SET)
    body = data[:-1] if data.endswith(b"\n") else data
    raw_lines = body.split(b"\n")
    partial_head = pos > 0  # the first line read may have begun before the window
    if partial_head and len(raw_lines) > n:
        raw_lines = raw_lines[1:]
    out = []
    for raw in raw_lines[-n:] if n > 0 else raw_lines:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        out.append(text[:max_line] + cut_note(len(raw) - max_line) if len(raw) > max_line else text)
    if partial_head and len(raw_lines) <= n:
        out.insert(0, f"[moe-tui: only the last {max_bytes:,} bytes of the log were read]")
    return out


def last_update(line: str) -> str:
    """What a terminal shows of a line written with "\r" updates (a tqdm bar): its last non-empty
    update."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""
