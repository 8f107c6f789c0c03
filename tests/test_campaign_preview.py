"""The add form's preview (`ControlClient.campaign_preview`) is what `add_campaign` then queues, the
control concurrency's extra repeats included, and `control=False` leaves them out (issue 33)."""

from __future__ import annotations

from moe_tui import paths
from moe_tui.control import CampaignRequest
from moe_tui.control.clients import InProcessClient
from moe_tui.profiles import load_profiles
from moe_tui.store.db import Store
from moe_tui.store.queue import RunQueue

SPEC = {"input_len": 128, "output_len": 32, "num_prompts": 16}


def test_the_preview_counts_what_add_campaign_queues_with_and_without_the_control(tmp_path):
    folder = paths.bundled_demo_profiles_dir()
    store = Store(tmp_path / "store.sqlite3")
    client = InProcessClient(store, load_profiles(folder).profiles, folder, tmp_path / "data")
    try:
        for control in (True, False):
            request = CampaignRequest(name="", profiles=("sim-flashinfer-cutedsl", "sim-flashinfer-cutlass"),
                                      concurrencies=(1, 10, 64), repeats=2, spec=SPEC, policy="grouped",
                                      control=control)
            preview = client.campaign_preview(request)
            assert preview.grid_items == 12
            # the control: concurrency 2 added to every sweep (2 profiles x 2 repeats), no control-only starts
            assert preview.control_items == (4 if control else 0)
            before = len(RunQueue(store).items())
            assert client.add_campaign(request) == preview.items
            assert len(RunQueue(store).items()) - before == preview.items
            assert preview.name.startswith("sim-flashinfer-cutedsl vs sim-flashinfer-cutlass @ conc "
                                           + ("2,1,10,64" if control else "1,10,64"))
    finally:
        client.shutdown(stop_servers=False)
        store.close()


def test_the_preview_names_cells_that_can_never_reach_their_concurrency(tmp_path):
    folder = paths.bundled_demo_profiles_dir()
    store = Store(tmp_path / "store.sqlite3")
    client = InProcessClient(store, load_profiles(folder).profiles, folder, tmp_path / "data")
    try:
        request = CampaignRequest(name="", profiles=("sim-flashinfer-cutlass",), concurrencies=(1, 64, 1024),
                                  repeats=1, spec={**SPEC, "num_prompts": 100}, policy="grouped")
        assert client.campaign_preview(request).short_cells == ((1024, 100),)
    finally:
        client.shutdown(stop_servers=False)
        store.close()
