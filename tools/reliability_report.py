"""Run the reliability suite and rewrite the README's "Reliability" section from the result.

    .venv/bin/python tools/reliability_report.py [--json FILE] [--no-readme] [-- extra pytest args]
    .venv/bin/python tools/reliability_report.py --from-json FILE   (README from an earlier run's records)

Collects `tests/reliability` in this process (each test's kind and description), then runs it, on 2
xdist workers by default (`--workers N`; 0 runs it in this process: the suite took over 20 minutes one
test at a time on the 2-core box), with a small plugin that records, for every
test, its kind (bad input, fault, security: from the file it lives in), a human description (the
first line of its docstring, plus the parameter id), the outcome of this run and its duration.
The records are written as JSON (`--json`), and the README section between `## Reliability` and
the next `## ` heading (or the end of the file) is replaced by a dated table of them: one row per
test, so the README says what was tried and whether it held, not what was hoped. The exit status
is pytest's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = "tests/reliability"
README = REPO / "README.md"
HEADING = "## Reliability"

KIND_BY_FILE = {
    "test_bad_input.py": "bad input",
    "test_faults.py": "fault",
    "test_server_crash.py": "fault",
    "test_runner_kill.py": "fault",
    "test_security.py": "security",
    "test_nothing_lost.py": "fault",
    "test_orphans.py": "fault",
    "test_bounds.py": "bad input",
    "test_owner_only.py": "security",
    "test_untrusted_text.py": "security",
    "test_trust.py": "security",
    "test_disturbed.py": "fault",
    "test_store_health.py": "fault",
    "test_hung_runner.py": "fault",
    "test_bounded.py": "bad input",
    "test_api_key.py": "security",
    "test_evidence.py": "bad input",
    "test_maintenance.py": "fault",
    "test_cli_escapes.py": "security",
    "test_log_bounds.py": "bad input",
    "test_planted_files.py": "security",
    "test_wedged_server.py": "fault",
    "test_wedge_watch.py": "fault",
    "test_expert_dump_folder.py": "security",
    "test_launcher_markers.py": "security",
    "test_hostile_traces.py": "bad input",
    "test_admin_key.py": "security",
}
KIND_ORDER = ("fault", "bad input", "security", "other")


@dataclass
class TestRecord:
    nodeid: str
    kind: str
    description: str
    outcome: str = "not run"  # passed, failed, skipped, error
    duration_s: float = 0.0
    detail: str = ""  # skip reason or the first line of the failure


def _describe(item) -> str:  # item: pytest.Item
    doc = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
    text = doc.splitlines()[0].strip() if doc else ""
    if not text:
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        text = name.removeprefix("test_").replace("_", " ").capitalize()
        text = re.sub(r"\bsig(kill|term|hup|int)\b", lambda m: "SIG" + m.group(1).upper(), text, flags=re.I)
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        text = f"{text.rstrip('.')} [{callspec.id}]"
    return text


class Recorder:
    """pytest plugin: one TestRecord per collected test, filled in as reports arrive."""

    def __init__(self) -> None:
        self.records: dict[str, TestRecord] = {}

    def pytest_collection_modifyitems(self, session, config, items) -> None:
        for item in items:
            filename = Path(str(item.fspath)).name
            self.records[item.nodeid] = TestRecord(item.nodeid, KIND_BY_FILE.get(filename, "other"),
                                                   _describe(item))

    def pytest_runtest_logreport(self, report) -> None:
        record = self.records.get(report.nodeid)
        if record is None:
            return
        record.duration_s += report.duration
        if report.skipped:
            record.outcome = "skipped"
            longrepr = report.longrepr
            record.detail = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
        elif report.failed:
            record.outcome = "failed" if report.when == "call" else "error"
            record.detail = _first_error_line(report)
        elif report.when == "call" and record.outcome == "not run":
            record.outcome = "passed"


def _first_error_line(report) -> str:
    text = getattr(report, "longreprtext", "") or str(report.longrepr)
    for line in text.splitlines():
        if line.startswith("E "):
            return _short_paths(line[1:].strip())[:200]
    return _short_paths(text.strip().splitlines()[-1])[:200] if text.strip() else "failed"


def _short_paths(text: str) -> str:
    return re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/\s]+/", "<tmp>/", text)


RESULT = {"passed": "pass", "failed": "**FAIL**", "error": "**ERROR**", "skipped": "skipped", "not run": "not run"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


TRUST_RULES = (
    "Nothing is trusted that should not be. Every file moe-tui reads back (spilled runs, `runner.json`, "
    "the store) must be a regular file of this user, owner-only, in an owner-only folder (`moe_tui.trust`); "
    "one that is not is moved aside and named, never parsed, never a crash, and a stored run is never "
    "overwritten by any later write or import. The temp-dir spill fallback is a `mkdtemp` folder, never a "
    "fixed /tmp path. A run is clean only if nothing else touched the server: someone else's requests "
    "(the server's own running + queued count over the client's cap: `foreign_load`), a frozen server "
    "(one stall, or short freezes adding up: `server_stall`), throttling and foreign GPU processes flag it. "
    "The store runs `PRAGMA quick_check` at a writable open after an unclean stop (or when the file changed "
    "since moe-tui closed it) and refuses to write into a damaged file; one checked online backup is kept, "
    "`moe-tui doctor` tells a locked store from a damaged one, and `moe-tui doctor --repair` restores the "
    "backup (keeping the replaced file beside it) and lists what was lost. A runner that does not answer "
    "is stopped by signal (`run --stop` always works), "
    "and a killed runner's servers and load generator are stopped at once by its watchdog. Socket requests, "
    "campaign sizes, stream lines, error bodies and profile files are bounded before any work; server log "
    "text reaches the terminal without escape codes; `moe-tui bench` stops within seconds of SIGTERM.")


def _chaos() -> list[str]:
    """The latest chaos bench result (benches/chaos.py): its figures, as one paragraph."""
    results = sorted((REPO / "benches" / "results").glob("chaos-*.md"))
    if not results:
        return []
    text = results[-1].read_text()
    rows = dict(re.findall(r"^\| ([^|]+?) \| (.+?) \|$", text, flags=re.MULTILINE))
    verdict = next((ln for ln in text.splitlines() if ln.startswith(("PASS", "FAIL"))), "no verdict")
    return ["", f"Chaos (`benches/chaos.py`, {results[-1].relative_to(REPO)}): {rows.get('kills total', '?')} random "
                f"SIGKILLs ({rows.get('kills', '?')}) over a {rows.get('items', '?')}-item emulator campaign, "
                f"{rows.get('runner starts', '?')} runner starts, runs by status {rows.get('runs by status', '?')}, "
                f"cleanup after a runner kill {rows.get('cleanup after runner kill s', '?')} s, "
                f"integrity check {rows.get('integrity check', '?')}, processes left "
                f"{rows.get('processes left', '?')}: {verdict}"]


def _measured_elsewhere() -> list[str]:
    """Targets that are measurements, not pass/fail tests (they live in benches/): their latest result."""
    results = sorted((REPO / "benches" / "results").glob("runner_memory-*.md"))
    if not results:
        return _chaos()
    spread = next((ln.strip("- ").strip() for ln in results[-1].read_text().splitlines()
                   if ln.startswith("- spread after warm-up")), "see the file")
    return ["", f"Measured, not tested: runner memory over a long emulator campaign with a server restart "
                f"every item (`benches/runner_memory.py`, {results[-1].relative_to(REPO)}): {spread}. "
                "Polling waits in the tests scale with a measured machine-speed factor "
                "(`tests/runner_support.speed_factor`), so the suite holds on a loaded 2-core box.", *_chaos()]


def render_section(records: list[TestRecord], when: str, wall_s: float) -> str:
    counts = {k: sum(1 for r in records if r.outcome == k) for k in ("passed", "failed", "error", "skipped")}
    ordered = sorted(records, key=lambda r: (KIND_ORDER.index(r.kind) if r.kind in KIND_ORDER else 99))
    lines = [
        HEADING,
        "",
        "What the control room survives, and the bad input it refuses, as last run by "
        "`tools/reliability_report.py` (which runs `pytest tests/reliability` and rewrites this section). "
        "Every row is one test with real processes on loopback: the SGLang emulator, `moe-tui` "
        "subprocesses, a detached runner, the TUI under tmux. A bad-input row asserts a message naming "
        "what and where, a non-zero exit, and an unchanged store; a fault row asserts that nothing is "
        "lost, the run is never shown as clean, the queue goes on and no server process is left behind.",
        "",
        TRUST_RULES,
        "",
        f"Last run: {when}, {len(records)} tests in {wall_s:.0f} s: {counts['passed']} passed, "
        f"{counts['failed'] + counts['error']} failed, {counts['skipped']} skipped.",
        "",
        "| Kind | What was tried (and what must hold) | Result | Time |",
        "|---|---|---|---:|",
    ]
    for r in ordered:
        lines.append(f"| {r.kind} | {_cell(r.description)} | {RESULT[r.outcome]} | {r.duration_s:.1f} s |")
    lines += _measured_elsewhere()
    notes = [r for r in ordered if r.outcome in ("failed", "error", "skipped") and r.detail]
    if notes:
        lines += ["", "Not passing in this run:", ""]
        for r in notes:
            lines.append(f"- `{r.nodeid.split('::', 1)[-1]}` ({r.outcome}): {_cell(_short_paths(r.detail))}")
    return "\n".join(lines) + "\n"


def replace_section(readme: str, section: str) -> str:
    """Swap the `## Reliability` section (to the next `## ` heading or the end); append if missing."""
    match = re.search(rf"^{re.escape(HEADING)}[ \t]*$", readme, flags=re.MULTILINE)
    if match is None:
        return readme.rstrip("\n") + "\n\n" + section
    nxt = re.search(r"^## ", readme[match.end():], flags=re.MULTILINE)
    end = match.end() + nxt.start() if nxt else len(readme)
    tail = readme[end:]
    return readme[:match.start()] + section + ("\n" + tail if tail else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the per-test records as JSON here")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite README.md")
    parser.add_argument("--from-json", metavar="FILE",
                        help="do not run pytest: rewrite the README from records an earlier --json wrote")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (0: run in this process)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        records = [TestRecord(**t) for t in saved["tests"]]
        README.write_text(replace_section(README.read_text(encoding="utf-8"),
                                          render_section(records, saved["date"], saved["wall_s"])), encoding="utf-8")
        print(f"README.md: '{HEADING}' section rewritten from {args.from_json} ({len(records)} rows)")
        return 0

    import pytest

    sys.path.insert(0, str(REPO))  # as `python -m pytest` from the repo root: tests import `tests.*`
    recorder = Recorder()
    # Under xdist the tests are collected in the workers, so the rows (kind, description) come from a
    # collection pass here first; the reports of the run then fill them in as they arrive.
    collected = pytest.main([str(REPO / SUITE), "-q", "-p", "no:cacheprovider", "--collect-only"], plugins=[recorder])
    if int(collected) != 0:
        return int(collected)
    workers = ["-n", str(args.workers)] if args.workers else []
    started = time.monotonic()
    when = time.strftime("%Y-%m-%d %H:%M %Z")
    code = pytest.main([str(REPO / SUITE), "-q", "-p", "no:cacheprovider", *workers, *args.pytest_args],
                       plugins=[recorder])
    wall = time.monotonic() - started
    records = list(recorder.records.values())
    if args.json:
        Path(args.json).write_text(json.dumps({"date": when, "wall_s": round(wall, 1), "exit_code": int(code),
                                               "tests": [asdict(r) for r in records]}, indent=2) + "\n")
    if records and not args.no_readme and int(code) in (0, 1):  # 0/1: the suite ran (2+: interrupted)
        README.write_text(replace_section(README.read_text(encoding="utf-8"), render_section(records, when, wall)),
                          encoding="utf-8")
        print(f"README.md: '{HEADING}' section rewritten ({len(records)} rows)")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
