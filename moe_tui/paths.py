"""Where moe-tui keeps its files: data dir (store, logs, exports) and config dir.

`MOE_TUI_HOME` overrides both (tests and side-by-side installs); otherwise platformdirs.

Owner-only: every directory made here is 0700 and the process umask becomes 0077 the first time a
data path is asked for, so the store, its WAL/SHM, logs, exports and the runner's files are 0600
without each writer having to remember it. An existing data dir that others can read is
tightened to 0700 (it is ours: we only chmod what we own); one owned by another user is refused
for writing (whoever owns it could rewrite what moe-tui reads back). A data dir that cannot be made or
written (MOE_TUI_HOME a file, a read-only folder) raises `DataDirError` naming the path and why;
`writable=False` asks for a dir only to read from (queue list, compare, export elsewhere).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

APP_NAME = "moe-tui"
PRIVATE_UMASK = 0o077
DIR_MODE = 0o700


class DataDirError(OSError):
    """The data or config dir cannot be used; the message names the path and what to do."""


def owner_only_umask() -> None:
    """Files this process creates from now on are readable by their owner only."""
    os.umask(os.umask(PRIVATE_UMASK) | PRIVATE_UMASK)


def home_override() -> Path | None:
    value = os.environ.get("MOE_TUI_HOME")
    return Path(value).expanduser() if value else None


def private_dir(path: Path, *, what: str, writable: bool = True) -> Path:
    """`path` as an owner-only directory: made 0700 if missing, tightened if ours and looser.
    Raises DataDirError with a clear message instead of an OSError traceback."""
    owner_only_umask()
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            raise DataDirError(f"{what} {path}: {parent} is a file, not a folder "
                               f"(set MOE_TUI_HOME to a folder, or move the file away)")
    if not path.exists():
        if not writable:
            raise DataDirError(f"{what} {path} does not exist (nothing has been stored there yet)")
        try:
            path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise DataDirError(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    st = path.stat()
    if writable and st.st_uid != os.getuid():
        raise DataDirError(f"{what} {path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): another "
                           f"user could rewrite what moe-tui reads back from it; use a folder of your own")
    if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(path, DIR_MODE)
        except OSError:
            pass  # a read-only filesystem: reading still works; writes are refused below
    if writable and not os.access(path, os.W_OK | os.X_OK):
        raise DataDirError(f"{what} {path} is not writable by this user; read-only commands (queue list, "
                           f"compare, export --out elsewhere) still work, writes need a writable folder")
    return path


def default_data_dir() -> Path:
    """The data dir when no MOE_TUI_HOME is set (the platform's per-user data folder); not created."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def data_dir(*, writable: bool = True) -> Path:
    override = home_override()
    path = override / "data" if override is not None else default_data_dir()
    return private_dir(path, what="data dir", writable=writable)


def config_dir() -> Path:
    override = home_override()
    if override is not None:
        path = override / "config"
    else:
        import platformdirs

        path = Path(platformdirs.user_config_dir(APP_NAME))
    return private_dir(path, what="config dir")


def config_file() -> Path:
    return config_dir() / "config.toml"


def store_path(*, writable: bool = True) -> Path:
    return data_dir(writable=writable) / "moe-tui.sqlite3"


def spill_dir(store: Path) -> Path:
    """Beside the store: finished results the store could not take wait here for the next start."""
    return store.parent / "spill"


def logs_dir() -> Path:
    return private_dir(data_dir() / "logs", what="logs dir")


def exports_dir() -> Path:
    return private_dir(data_dir() / "exports", what="exports dir")


def repo_root() -> Path:
    """The source checkout (editable install); bundled profiles live under it."""
    return Path(__file__).resolve().parent.parent


def bundled_demo_profiles_dir() -> Path:
    return repo_root() / "server_profiles" / "demo"
