"""The house's size rules, read from the source with `ast` (quick tier: no process).

No module of moe_tui over 500 lines and no function over 80: past those sizes a file stops being
one idea and a function stops fitting on a screen. The limits are the ones docs/architecture.md
states; raise them there and here together, never per file.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "moe_tui"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_the_limit():
    long = {str(p.relative_to(PACKAGE.parent)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_over_the_limit():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"] = size
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_scan_sees_the_package():
    """The rules above read real files (an empty scan would pass anything)."""
    assert len(_modules()) > 50
