"""UI test fixtures: the App on a recording fake adapter, a fixed clock, no NVML thread.

`make_app()` gives a fresh MoeTuiApp and its RecordingAdapter; the data dir is a tmp dir so no
test touches the user's config or store.
"""

from __future__ import annotations

import pytest

from tests.ui.fakes import T0, RecordingAdapter


@pytest.fixture(autouse=True)
def _ui_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_TUI_HOME", str(tmp_path / "home"))
    # Repaints are rate-limited for CPU's sake; tests assert what is painted, not when.
    monkeypatch.setattr("moe_tui.ui.app.FLUSH_INTERVAL_S", 0.0)


@pytest.fixture
def make_app():
    """The App as tests of keys, screens and flows use it: nothing built ahead of its first showing
    (`build_ahead=False`: each screen is built on its first visit, as Textual builds it), because in
    an App that lives a second or two the building ahead was 40% of the CPU (test_pilot and
    test_keys_users_expect: 19 -> 11 s). Tests of the building ahead pass `build_ahead=True`; the
    snapshots and the tmux tests (the real `moe-tui tui`) run it as users do."""
    from moe_tui.ui.app import MoeTuiApp

    def factory(**kwargs):
        adapter = kwargs.pop("adapter", None) or RecordingAdapter()
        kwargs.setdefault("build_ahead", False)
        app = MoeTuiApp(adapter, clock=lambda: T0, **kwargs)
        return app, adapter

    return factory
