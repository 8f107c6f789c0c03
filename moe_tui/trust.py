"""Whether a file or folder moe-tui reads back may be trusted, and what happens to one that may not.

Every file moe-tui reads back after writing it (spilled runs, `runner.json`, the store) must be
something only its owner could have written: a regular file (not a link, fifo or device), owned by
this user, with no group or other permission bits, of a sane size; its folder a real folder owned
by this user with no group or other write bit. `untrusted_reason` says why not, in words, or None.

A file that fails is never parsed: `set_aside` renames it within its folder to
`<name>.<why>-<time>` (so it no longer matches what is read back, and a person can look at it),
and returns the new path for the notice that names it. Pure checks over `os.lstat`, no parsing.

`read_small_regular_file` reads a file the user named (a profile) only if it is a regular file of
sane size; `terminal_text` strips what a terminal would obey from untrusted text (server logs), and
`install_terminal_safe_output` applies it to everything the CLI prints.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

# A spilled run holds every request record of one run: large, but never this large.
MAX_READBACK_BYTES = 512 * 2**20


def _own_entry(path: Path, is_kind: Callable[[int], bool], not_kind: str) -> tuple[os.stat_result | None, str | None]:
    """lstat `path`: (its stat, None) when it is this user's own entry of the wanted kind (never a
    link), else (None, why not)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return None, f"cannot be inspected: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return None, "is a symbolic link"
    if not is_kind(st.st_mode):
        return None, not_kind
    if st.st_uid != os.getuid():
        return None, f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    return st, None


def untrusted_dir_reason(path: Path) -> str | None:
    """Why the folder `path` is not private to this user, or None when it is."""
    st, why = _own_entry(path, stat.S_ISDIR, "is not a folder")
    if st is None:
        return why
    if stat.S_IMODE(st.st_mode) & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted_reason(path: Path, *, max_bytes: int = MAX_READBACK_BYTES) -> str | None:
    """Why the file `path` may not be trusted, or None: it must be a regular file of this user,
    owner-only (no group/other bits), at most `max_bytes`, in a folder private to this user."""
    folder = untrusted_dir_reason(path.parent)
    if folder is not None:
        return f"its folder {path.parent} {folder}"
    st, why = _own_entry(path, stat.S_ISREG, "is not a regular file")
    if st is None:
        return why
    if stat.S_IMODE(st.st_mode) & 0o077:
        return f"is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o}); moe-tui writes 0600"
    if st.st_size > max_bytes:
        return f"is {st.st_size} bytes, over the {max_bytes}-byte limit"
    return None


def set_aside(path: Path, why: str) -> Path | None:
    """Rename `path` to `<name>.<why>-<unix time>` in its folder; the new path, or None if it
    could not be moved (then it is still never parsed: callers skip it)."""
    target = path.with_name(f"{path.name}.{why}-{int(time.time())}")
    try:
        os.rename(path, target)
    except OSError:
        return None
    return target


def aside_note(path: Path, reason: str, moved: Path | None) -> str:
    """The notice line for a file set aside."""
    where = f"moved aside to {moved}" if moved is not None else "could not be moved aside; skipped"
    return f"{path} not trusted: {reason}; {where} (never read)"


def _kind(mode: int) -> str:
    return ("a named pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a file")


def open_regular(path: str | os.PathLike[str], *, follow_links: bool = True, own: bool = False,
                 max_bytes: int | None = None) -> int:
    """A read-only fd on `path` if it is a regular file; else OSError saying why (the caller names
    the file). Opened non-blocking, so a named pipe is refused instead of hanging and /dev/zero
    instead of read until memory runs out. `follow_links=False`: a link is refused (O_NOFOLLOW;
    for paths moe-tui wrote itself, or read from a record: data, never followed); `own`: the file
    must be this user's; `max_bytes`: refused when larger. The one safe open for files moe-tui did
    not just write: profiles, imports, archives, server logs."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_links and exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "is a symbolic link (not followed)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"is {_kind(st.st_mode)}, not a regular file")
        if own and st.st_uid != os.getuid():
            raise OSError(f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})")
        if max_bytes is not None and st.st_size > max_bytes:
            raise OSError(f"is {st.st_size:,} bytes, over the {max_bytes:,}-byte limit")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_small_regular_file(path: Path, max_bytes: int) -> bytes:
    """The bytes of `path` if it is a regular file (links followed) of at most `max_bytes`; else
    OSError saying why (`open_regular`)."""
    fd = open_regular(path)
    try:
        st = os.fstat(fd)
        if st.st_size > max_bytes:
            raise OSError(f"is {st.st_size:,} bytes, over the {max_bytes:,}-byte limit")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise OSError(f"is over the {max_bytes:,}-byte limit")
        return data
    finally:
        os.close(fd)


# Terminal escape sequences (CSI ... final byte, OSC ... BEL/ST, other ESC x) and every other
# control character but newline and tab: what a log line may carry and a terminal would obey
# (set the title, move the cursor, rewrite what is on screen).
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """`text` with escape sequences removed and other control characters shown as `?`, so it
    prints as itself on a terminal. Newlines and tabs are kept."""
    return _CONTROLS.sub("?", _ESCAPES.sub("", text))


class TerminalSafeWriter:
    """A text stream that passes everything written through `terminal_text`: the CLI's stdout and
    stderr (`install_terminal_safe_output`), so no stored or imported text (a profile name restored
    from an archive, a queue item's error, a server's log line) can retitle the terminal or clear
    the screen, whichever command prints it. `raw` is the stream underneath, for the one escape
    moe-tui itself sends (`gpus --watch` clearing its own screen)."""

    def __init__(self, raw: TextIO):
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(terminal_text(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, close, ...
        return getattr(self.raw, name)


def install_terminal_safe_output() -> None:
    """Wrap sys.stdout and sys.stderr in `TerminalSafeWriter` (once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, TerminalSafeWriter):
            setattr(sys, name, TerminalSafeWriter(stream))


def raw_stdout() -> TextIO:
    """stdout without the escaping (for moe-tui's own escapes only)."""
    import sys

    out = sys.stdout
    return out.raw if isinstance(out, TerminalSafeWriter) else out
