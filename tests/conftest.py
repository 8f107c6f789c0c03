"""Shared pytest fixtures. Keep this file small: one fixture per need, each saying what it gives.

- `sglang_client` (session): SGLang's own benchmark client (`sglang.bench_serving`), as located by
  `moe_tui.bench.sglang_adapter.locate_client` (a full SGLang install, or the repo's
  `.venv-sglang-client` built by `make sglang-client`). Without one, tests using it are skipped
  locally with the reason, but FAIL in CI (env CI=true), where `make test` builds it first: a
  missing client there is a broken build, not a reason to skip.
"""

from __future__ import annotations

import os

import pytest


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session")
def sglang_client():
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
def env(tmp_path):
    """A private MOE_TUI_HOME, a profiles folder and fast emulator profiles on free ports, with
    every process the test started killed afterwards (`runner_support.Env`)."""
    from runner_support import Env

    e = Env(tmp_path)
    yield e
    e.cleanup()
