"""Whether a file or folder moe-tui reads back may be trusted, and what happens to one that may not.

Every file moe-tui reads back after writing it (spilled runs, `runner.json`, the store) must be
something only its owner could have written: a regular file (not a link, fifo or device), owned by
this user, with no group or other permission bits, of a sane size; its folder a real folder owned
by this user with no group or other write bit. `untrusted_reason` says why not, in words, or None.

A file that fails is never parsed: `set_aside` renames it within its folder to
`<name>.<why>-<time>` (so it no longer matches what is read back, and a person can look at it),
and returns the new path for the notice that names it. Pure checks over `os.lstat`, no parsing.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

# A spilled run holds every request record of one run: large, but never this large.
MAX_READBACK_BYTES = 512 * 2**20


def untrusted_dir_reason(path: Path) -> str | None:
    """Why the folder `path` is not private to this user, or None when it is."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be inspected: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if stat.S_IMODE(st.st_mode) & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted_reason(path: Path, *, max_bytes: int = MAX_READBACK_BYTES) -> str | None:
    """Why the file `path` may not be trusted, or None: it must be a regular file of this user,
    owner-only (no group/other bits), at most `max_bytes`, in a folder private to this user."""
    folder = untrusted_dir_reason(path.parent)
    if folder is not None:
        return f"its folder {path.parent} {folder}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be inspected: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
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
