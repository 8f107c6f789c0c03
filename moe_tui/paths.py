"""Where moe-tui keeps its files: data dir (store, logs, exports) and config dir.

`MOE_TUI_HOME` overrides both (tests and side-by-side installs); otherwise platformdirs.
"""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "moe-tui"


def home_override() -> Path | None:
    value = os.environ.get("MOE_TUI_HOME")
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    override = home_override()
    if override is not None:
        path = override / "data"
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def config_dir() -> Path:
    override = home_override()
    if override is not None:
        path = override / "config"
    else:
        import platformdirs

        path = Path(platformdirs.user_config_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def config_file() -> Path:
    return config_dir() / "config.toml"


def store_path() -> Path:
    return data_dir() / "moe-tui.sqlite3"


def logs_dir() -> Path:
    path = data_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def exports_dir() -> Path:
    path = data_dir() / "exports"
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_root() -> Path:
    """The source checkout (editable install); bundled profiles live under it."""
    return Path(__file__).resolve().parent.parent


def bundled_demo_profiles_dir() -> Path:
    return repo_root() / "server_profiles" / "demo"
