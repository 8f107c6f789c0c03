"""Shared pytest fixtures. Keep this file small: one fixture per need, each saying what it gives.

- `sglang_client` (session): SGLang's own benchmark client (`sglang.bench_serving`), as located by
  `moe_tui.bench.sglang_adapter.locate_client` (a full SGLang install, or the repo's
  `.venv-sglang-client` built by `make sglang-client`). Without one, tests using it are skipped
  locally with the reason, but FAIL in CI (env CI=true), where `make test` builds it first: a
  missing client there is a broken build, not a reason to skip.
- `built_envs` (session): under `make test`, which builds the helper environments beside the suite,
  waits for that build to end (`sglang_client` and the HTA tests ask for it).

The session's own home (`_isolate_home`): before any test, HOME, the XDG folders and MPLCONFIGDIR
point into one fresh temporary folder, so no test reads or writes the user's home (data dir, logs,
config, caches), and matplotlib's font cache is built there once, while processes are still allowed;
SSL_CERT_FILE names an empty bundle there (nothing in the suite talks TLS; see `_isolate_home`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

# pytest rewrites each test module's asserts when it imports it (an AST pass over ~4,000 asserts:
# more than half of a worker's 7.5 s collection) and keeps the result as a .pyc beside the module,
# unless bytecode writing is off. On a box with PYTHONDONTWRITEBYTECODE=1 every worker of every run
# redid it; the test session keeps that cache whatever the environment says (this process only).
sys.dont_write_bytecode = False


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


# Under `make test` the helper environments (.venv-sglang-client, .venv-hta) are built while the suite
# runs: MOE_TUI_ENVS_DONE names the file their build writes its exit status to, MOE_TUI_ENVS_LOG its
# output. Unset (pytest run by hand), the environments are whatever is already built.
ENVS_DONE = "MOE_TUI_ENVS_DONE"
ENV_FIXTURES = ("sglang_client", "built_envs")


def _envs_pending() -> bool:
    done = os.environ.get(ENVS_DONE)
    return bool(done) and not Path(done).exists()


@pytest.fixture(scope="session")
def built_envs() -> None:
    """Waits until `make test`'s background build of the helper environments has ended (a no-op when
    pytest runs by hand), and fails with its output if the build failed."""
    done = os.environ.get(ENVS_DONE)
    if not done:
        return
    from runner_support import wait_for

    wait_for(Path(done).exists, 900, f"the helper environments' build ({done})", interval=0.5)
    status = Path(done).read_text().strip()
    if status != "0":
        log = Path(os.environ.get("MOE_TUI_ENVS_LOG", "/nonexistent"))
        tail = log.read_text()[-3000:] if log.exists() else "(no log)"
        pytest.fail(f"make sglang-client hta failed (exit {status}):\n{tail}")


@pytest.fixture(scope="session")
def sglang_client(built_envs):
    """An `SglangClient` (kind, python, version, argv_prefix) for sglang.bench_serving."""
    from moe_tui.bench.sglang_adapter import CLIENT_ENV_DIR, locate_client

    client = locate_client()
    if client is None:
        reason = (
            f"sglang.bench_serving is not available: no SGLang install and no client env at "
            f"{CLIENT_ENV_DIR} (run `make sglang-client`)"
        )
        if _in_ci():
            pytest.fail(f"{reason}; in CI the client env must be built before the tests")
        pytest.skip(reason)
    return client


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A private MOE_TUI_HOME (for the `moe-tui` processes the test starts and for this one's in-process
    reads), a profiles folder and fast emulator profiles on free ports, with every process the test
    started killed afterwards (`runner_support.Env`: the runner by its recorded pid, any emulator of the
    test's ports). The one `env` fixture of the suite."""
    from runner_support import Env

    e = Env(tmp_path)
    monkeypatch.setenv("MOE_TUI_HOME", str(e.home))
    yield e
    e.cleanup()


# -- tiers ---------------------------------------------------------------------------------------
# `integration` marks a test that starts real processes (the emulator, the runner, `moe-tui`
# subprocesses, SGLang's client, tmux); `ui` (set here for tests/ui) an in-process Textual pilot or
# snapshot; the rest are unit tests of pure code, the quick tier (`make check`). No tier but
# integration may start a process: the guard below makes an unmarked test that starts one fail at
# once, naming itself, so the quick tiers can never quietly grow slow.
class ProcessOutsideIntegrationTier(RuntimeError):
    pass


# -- the session's own home -------------------------------------------------------------------------
# The first process of a session (xdist's controller, or the only one) makes the folder and names it in
# _HOME_ENV; xdist's workers inherit the environment and use the same one; the maker removes it at the
# end. MOE_TUI_HOME is dropped too: a user's own data dir must not receive tests' runs.
_HOME_ENV = "MOE_TUI_TEST_SESSION_HOME"
_XDG = {"XDG_DATA_HOME": ".local/share", "XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache",
        "XDG_STATE_HOME": ".local/state", "MPLCONFIGDIR": ".config/matplotlib"}
_made_home: list[str] = []


def _isolate_home() -> None:
    home = os.environ.get(_HOME_ENV)
    if not home:
        home = tempfile.mkdtemp(prefix="moe-tui-test-home-")
        os.environ[_HOME_ENV] = home
        _made_home.append(home)
    os.environ["HOME"] = home
    for name, sub in _XDG.items():
        os.environ[name] = os.path.join(home, sub)
        os.makedirs(os.environ[name], exist_ok=True)
    os.environ.pop("MOE_TUI_HOME", None)
    # No test talks TLS (every server is plain HTTP on 127.0.0.1), yet aiohttp builds two TLS contexts
    # when imported, reading the system's CA bundle: 40 ms of CPU in each of the ~700 emulators, runners
    # and clients a run of the suite starts. An empty bundle keeps them from reading it.
    no_ca = os.path.join(home, "no-ca.pem")
    open(no_ca, "a").close()
    os.environ["SSL_CERT_FILE"] = no_ca
    if _made_home:
        _build_font_cache()


def _build_font_cache() -> None:
    """matplotlib lists the system's fonts with `fc-list` on first use, which the unit tier refuses:
    build the cache (in the fresh MPLCONFIGDIR) now, once for every worker."""
    try:
        import matplotlib.font_manager  # noqa: F401  (importing it builds and saves the cache)
    except ImportError:
        pass


# SIGINT reaches a worker from Ctrl-C at the terminal and from xdist's own shutdown (after the last test);
# one that arrives during a test came from a test or the code under test signalling a process group it
# does not own. It still interrupts, as the default handler does, but first says in the session home
# which test was running; the summary prints it.
_SIGINT_LOG = "stray-sigint.log"


def _stray_sigint(signum, frame):
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if current:
        with open(os.path.join(os.environ[_HOME_ENV], _SIGINT_LOG), "a") as log:
            log.write(f"worker {os.environ.get('PYTEST_XDIST_WORKER')} got SIGINT during {current}\n")
    raise KeyboardInterrupt


def pytest_unconfigure(config):
    for home in _made_home:
        shutil.rmtree(home, ignore_errors=True)


def pytest_configure(config):
    _isolate_home()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        signal.signal(signal.SIGINT, _stray_sigint)
    # A test that fails and then passes on its rerun keeps its first failure's traceback in the
    # summary (pytest-rerunfailures' --rerun-show-tracebacks): a flake leaves its cause in CI's output.
    if config.pluginmanager.hasplugin("rerunfailures"):
        config.option.rerun_show_tracebacks = True
    config.addinivalue_line(
        "markers", "integration: starts real processes (emulator, runner, CLI, tmux); not in `make check`")
    config.addinivalue_line("markers", "ui: in-process Textual pilot or snapshot test (set for tests/ui by conftest)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Around setup, call and teardown (module fixtures included) of a unit or ui test, starting a
    process raises ProcessOutsideIntegrationTier naming the test."""
    if item.get_closest_marker("integration") is not None:
        yield from _record_cpu(item)
        return
    import multiprocessing.util
    import subprocess

    def refuse(*_args, **_kwargs):
        raise ProcessOutsideIntegrationTier(
            f"{item.nodeid} starts a process: mark it `pytest.mark.integration` "
            "(or its module, with pytestmark) so it runs in the integration tier")

    patched = [(subprocess.Popen, "_execute_child"), (os, "fork"), (os, "posix_spawn"),
               (multiprocessing.util, "spawnv_passfds")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in patched]
    for owner, name in patched:
        setattr(owner, name, refuse)
    try:
        yield from _record_cpu(item)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _record_cpu(item):
    """With MOE_TUI_RECORD_CPU=PATH, append the CPU seconds of the test and of the processes it
    started and reaped (independent of how loaded the machine is) to PATH, one JSON line a test
    (`own_s`: the worker's own part)."""
    path = os.environ.get("MOE_TUI_RECORD_CPU")
    if not path:
        yield
        return
    import resource

    def cpu() -> tuple[float, float]:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

    (own0, kids0), started = cpu(), time.monotonic()
    yield
    own1, kids1 = cpu()
    line = json.dumps({"test": item.nodeid, "cpu_s": round(own1 + kids1 - own0 - kids0, 2),
                       "own_s": round(own1 - own0, 2), "wall_s": round(time.monotonic() - started, 2)})
    with open(path, "a") as f:  # one short line per write: appends from parallel workers stay whole
        f.write(line + "\n")


# -- scheduling and the tier report ----------------------------------------------------------------
# With parallel workers the run ends when its longest test ends, so known-long tests start first
# (tests/durations.json: seconds per test id from an earlier run, refreshed by `make durations`).
# Tests sharing a module-scoped fixture (one emulator for the module) stay on one worker
# (xdist_group), so that fixture starts once.
DURATIONS = Path(__file__).with_name("durations.json")
_UNKNOWN_S = {"integration": 5.0, "ui": 2.0, "unit": 0.2}
_seen: dict[str, tuple[str, float]] = {}


def _tier(item_or_report) -> str:
    """integration: starts processes; ui: in-process Textual pilots and snapshots; unit: the rest."""
    if "integration" in item_or_report.keywords:
        return "integration"
    return "ui" if "ui" in item_or_report.keywords else "unit"


def pytest_collection_modifyitems(session, config, items):
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    for item in items:
        if item.nodeid.startswith("tests/ui/") and _tier(item) != "integration":
            item.add_marker(pytest.mark.ui)
        # An integration test races real processes, and a UI pilot the App's own timers, on a shared
        # 2-core box: one failure is run once more (pytest-rerunfailures) and shown as R with its
        # first failure in the summary, a flake to fix rather than a pass to trust; failing twice
        # fails the run. Unit tests (pure code) get no second try.
        if _tier(item) in ("integration", "ui") and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=1))
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d[-1].scope == "module" for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # A test that waits for an environment still being built goes after the longest ones (its worker
    # would only wait): by then the build has ended.
    pending = _envs_pending()

    def planned(it: pytest.Item) -> float:
        seconds = known.get(it.nodeid, _UNKNOWN_S[_tier(it)])
        if pending and any(name in ENV_FIXTURES for name in getattr(it, "fixturenames", ())):
            return min(seconds, 12.0)
        return seconds

    items.sort(key=lambda it: -planned(it))


def pytest_runtest_logreport(report):
    tier, total = _seen.get(report.nodeid, (_tier(report), 0.0))
    _seen[report.nodeid] = (tier, total + report.duration)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _seen:
        return
    started = getattr(config, "_moe_started", None)
    wall = f", wall {time.monotonic() - started:.0f} s" if started else ""
    terminalreporter.section("tiers")
    for tier in ("unit", "ui", "integration"):
        times = [t for k, (n, t) in _seen.items() if n == tier]
        if times:
            terminalreporter.write_line(f"{tier:12s} {len(times):4d} tests, {sum(times):7.1f} s of test time")
    terminalreporter.write_line(f"workers: {getattr(config.option, 'numprocesses', None) or 1}{wall}")
    stray = Path(os.environ.get(_HOME_ENV, "/nonexistent"), _SIGINT_LOG)
    if stray.exists():
        terminalreporter.section("stray SIGINT (Ctrl-C at the terminal, or a bug: something signalled the worker's process group)")
        terminalreporter.write(stray.read_text())
    out = config.getoption("--record-durations", None)
    if out:
        Path(out).write_text(json.dumps({k: round(t, 2) for k, (_, t) in sorted(_seen.items())}, indent=0) + "\n")


def pytest_addoption(parser):
    parser.addoption("--record-durations", default=None, metavar="PATH",
                     help="write each test's setup+call+teardown seconds as JSON (tests/durations.json)")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    session.config._moe_started = time.monotonic()
