"""SGLang's weight-load progress as it prints it (a tqdm bar: "\\r" updates, one newline at the end):
the emulator's bar, what moe-tui's log reader keeps of it, and the emulator's own line reader."""

from __future__ import annotations

import io

from moe_tui.servers.logtail import last_update as _last_update
from moe_tui.sim.launch import _updates
from moe_tui.sim.startup import load_bar


def test_the_bar_reads_as_tqdm_writes_it():
    assert load_bar(0, 0.0) == "Loading safetensors checkpoint shards:   0% Completed | 0/80 [00:00<?, ?it/s]"
    assert load_bar(20, 40.0) == "Loading safetensors checkpoint shards:  25% Completed | 20/80 [00:40<02:00,  2.00s/it]"
    assert load_bar(80, 10.0).endswith("80/80 [00:10<00:00,  8.00it/s]")


def test_a_line_of_updates_is_its_last_update():
    line = "\r" + load_bar(0, 0.0) + "\r" + load_bar(40, 1.0) + "\r"
    assert _last_update(line) == load_bar(40, 1.0)
    assert _last_update("plain line") == "plain line"


def test_the_emulators_reader_sees_each_update():
    stream = io.BytesIO(("before\n\r" + load_bar(0, 0.0) + "\r" + load_bar(80, 1.0) + "\nafter\n").encode())
    assert list(_updates(stream)) == ["before", load_bar(0, 0.0), load_bar(80, 1.0), "after"]
