"""Sorting a by-stage profile's files as 0.5.23 writes them (moe_tui.run.capture): the prefill
flush kept, a decode capture SGLang named EXTEND recognised at once (no wait for a DECODE file
that never comes), strays from the armed profiler discarded."""

from __future__ import annotations

from moe_tui.run.capture import CaptureCollector


def _write(folder, stage, world=2, body=b"x" * 10, prefix="moe-tui-run1"):
    for r in range(world):
        (folder / f"{prefix}-1.5-TP-{r}{'-' + stage if stage else ''}.trace.json.gz").write_bytes(body)


def test_second_extend_set_is_the_decode_capture(tmp_path):
    c = CaptureCollector(tmp_path, "moe-tui-run1", 2)
    _write(tmp_path, "EXTEND")
    assert not c.poll()  # sizes not yet seen twice: torch may still be writing
    assert not c.poll() and c.extend_kept  # the prefill flush, moved out of the way
    _write(tmp_path, "EXTEND", body=b"y" * 20)
    c.poll()
    assert c.poll() and c.decode_stage == "MIXED"
    _write(tmp_path, "", world=1)  # a capture the armed profiler began, stopped by /stop_profile
    (tmp_path / "expert_distribution_recorder_1.pt").write_bytes(b"pt")
    keep, notes = c.finish()
    names = sorted(p.name for p in keep)
    assert names == ["expert_distribution_recorder_1.pt", "moe-tui-run1-1.5-TP-0-EXTEND.trace.json.gz",
                     "moe-tui-run1-1.5-TP-0-MIXED.trace.json.gz", "moe-tui-run1-1.5-TP-1-EXTEND.trace.json.gz",
                     "moe-tui-run1-1.5-TP-1-MIXED.trace.json.gz"]
    assert len(notes) == 1 and "discarded" in notes[0]
    assert not list(tmp_path.glob("*.trace.json.gz"))


def test_decode_set_needs_every_rank(tmp_path):
    c = CaptureCollector(tmp_path, "moe-tui-run1", 2)
    _write(tmp_path, "DECODE", world=1)
    assert not c.poll() and not c.poll()
    _write(tmp_path, "DECODE", world=2)
    c.poll()
    assert c.poll() and c.decode_stage == "DECODE"
