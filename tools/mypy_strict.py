"""mypy --strict over moe_tui as the house will run it once every module is clean (issue 24).

Builds the configuration from pyproject.toml's [tool.mypy] with `strict = true` globally and
without the `ignore_errors` overrides, runs mypy with it, and prints the errors (optionally only
those under the given paths) and a count per package. Exit status: mypy's.
Usage: python tools/mypy_strict.py [moe_tui/run moe_tui/store ...]
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def strict_config() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    text = text.replace("check_untyped_defs = false", "strict = true", 1)
    blocks = re.split(r"(?=^\[)", text, flags=re.M)  # one TOML table per block
    return "".join(b for b in blocks if "ignore_errors = true" not in b)


def main(argv: list[str]) -> int:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(strict_config())
    mypy = Path(sys.executable).with_name("mypy")
    proc = subprocess.run([str(mypy) if mypy.exists() else "mypy", "--config-file", f.name],
                          cwd=ROOT, capture_output=True, text=True)
    Path(f.name).unlink()
    lines = [ln for ln in proc.stdout.splitlines() if ": error:" in ln or ": note:" in ln]
    if argv:
        lines = [ln for ln in lines if any(ln.startswith(p.rstrip("/")) for p in argv)]
    print("\n".join(lines))
    per = collections.Counter("/".join(ln.split(":")[0].split("/")[:2]) for ln in lines if ": error:" in ln)
    for package, n in per.most_common():
        print(f"{n:5d}  {package}", file=sys.stderr)
    print(proc.stdout.splitlines()[-1] if proc.stdout else proc.stderr, file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
