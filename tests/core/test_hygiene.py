"""Import hygiene and CLI speed: the core never imports Textual; `--help` stays light; the import
contracts of pyproject.toml hold (and would catch a violation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts real processes

CORE = ["moe_tui.spec", "moe_tui.profiles", "moe_tui.store.db", "moe_tui.metrics", "moe_tui.compare",
        "moe_tui.servers", "moe_tui.bench", "moe_tui.telemetry", "moe_tui.store.queue", "moe_tui.run.controller",
        "moe_tui.events", "moe_tui.paths", "moe_tui.judgement", "moe_tui.run.runner", "moe_tui.control",
        "moe_tui.control.clients", "moe_tui.control.launch", "moe_tui.export.results"]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_core_modules_do_not_import_textual():
    code = "import importlib\n" + "\n".join(f"importlib.import_module({m!r})" for m in CORE)
    modules = _modules_after(code)
    assert "textual" not in modules
    assert not any(m.startswith("textual.") for m in modules)


def test_foundation_modules_do_not_import_textual():
    modules = _modules_after("import moe_tui.spec, moe_tui.profiles, moe_tui.store.db")
    assert "textual" not in modules


def test_help_does_not_import_heavy_packages():
    code = ("import sys\nfrom moe_tui import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n")
    modules = _modules_after(code)
    for heavy in ("textual", "pandas", "httpx", "numpy", "aiohttp"):
        assert heavy not in modules, heavy


def test_every_subcommand_has_help():
    from moe_tui.cli import COMMANDS

    for name in COMMANDS:
        proc = subprocess.run([sys.executable, "-m", "moe_tui", name, "--help"], capture_output=True, text=True)
        assert proc.returncode == 0, (name, proc.stderr)
        assert "usage: moe-tui" in proc.stdout, name


def test_top_level_help_lists_subcommands():
    proc = subprocess.run([sys.executable, "-m", "moe_tui", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for name in ("demo", "bench", "queue", "run", "compare", "export", "sim", "profiles"):
        assert name in proc.stdout


def test_bare_options_go_to_the_default_tui_command():
    proc = subprocess.run([sys.executable, "-m", "moe_tui", "--in-process", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: moe-tui tui")
    proc = subprocess.run([sys.executable, "-m", "moe_tui", "--no-such-option"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unrecognized arguments: --no-such-option" in proc.stderr


# -- import contracts (pyproject.toml [tool.importlinter]) ----------------------------------------
ROOT = Path(__file__).resolve().parents[2]
# Beside this interpreter when it runs from a venv; else wherever PATH has it (a system install).
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
if not LINT_IMPORTS.exists():
    LINT_IMPORTS = Path(shutil.which("lint-imports") or LINT_IMPORTS)


def _lint_imports(tree: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def test_import_contracts_hold():
    proc = _lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_import_contracts_catch_a_widget_that_reads_the_store(tmp_path):
    """The contracts bite: the same tree with one forbidden import fails."""
    shutil.copytree(ROOT / "moe_tui", tmp_path / "moe_tui", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    widget = tmp_path / "moe_tui" / "ui" / "widgets" / "queue_table.py"
    widget.write_text(widget.read_text() + "\nfrom moe_tui.store.db import Store  # noqa\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode != 0
    assert "moe_tui.ui.widgets.queue_table -> moe_tui.store.db" in proc.stdout
