"""Files a server or another user put where moe-tui looks are never followed or taken (issue 36).

- A trace folder's entry that is a link to a file of ours (planted by the server): never moved,
  chmodded or kept; the victim keeps its mode and bytes, the real traces are kept 0600.
- Expert dumps in the shared recorder folder (/tmp by default): one owned by another user (uid
  nobody), one that is a link and one over the size bound are left out and named; our own
  recent dump is the only one taken.
"""

from __future__ import annotations

import os
import time

import pytest

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files owned by another user")


def test_a_planted_link_in_the_trace_folder_is_never_followed(tmp_path):
    """incoming/ holds a real trace and a link to a 0644 file of ours: only the trace is kept (0600); the victim is untouched."""
    from moe_tui.run.profiled import keep_files

    raw, dest = tmp_path / "incoming", tmp_path / "run-1"
    raw.mkdir()
    dest.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    victim.chmod(0o644)
    (raw / "moe-tui-run1-TP-0-DECODE.trace.json.gz").write_bytes(b"trace")
    os.symlink(victim, raw / "moe-tui-run1-TP-1-DECODE.trace.json.gz")
    os.mkfifo(raw / "moe-tui-run1-TP-2-DECODE.trace.json.gz")
    kept, left = keep_files(list(raw.iterdir()), dest)
    assert kept == ["moe-tui-run1-TP-0-DECODE.trace.json.gz"]
    assert (dest / kept[0]).stat().st_mode & 0o777 == 0o600
    assert victim.stat().st_mode & 0o777 == 0o644 and victim.read_text() == "mine\n"
    assert not (dest / "moe-tui-run1-TP-1-DECODE.trace.json.gz").exists()
    assert any("TP-1" in note and "a symbolic link" in note for note in left), left
    assert any("TP-2" in note and "not a regular file" in note for note in left), left


@needs_root
def test_expert_dumps_planted_by_another_user_are_left_out(tmp_path):
    """The shared folder holds dumps of uid nobody, a link, an oversized one and ours: only ours is taken; the rest named."""
    from moe_tui.run.profiled import expert_dumps

    since = time.time()
    ours = tmp_path / "expert_distribution_recorder_1.pt"
    ours.write_bytes(b"ours")
    planted = tmp_path / "expert_distribution_recorder_2.pt"
    planted.write_bytes(b"pickle from someone else")
    os.chown(planted, NOBODY, NOBODY)
    os.symlink(ours, tmp_path / "expert_distribution_recorder_3.pt")
    big = tmp_path / "expert_distribution_recorder_4.pt"
    big.write_bytes(b"x" * 2048)
    found, notes = expert_dumps(tmp_path, since, limit=1024)
    assert found == [ours]
    text = "\n".join(notes)
    assert f"recorder_2.pt not kept: owned by uid {NOBODY}, not you" in text
    assert "recorder_3.pt not kept: a symbolic link" in text
    assert "recorder_4.pt not kept: 2048 bytes, over the 1024-byte bound" in text


@pytest.mark.parametrize("key", ["MOE_TUI_RUNNER_DIR", "MOE_TUI_SERVER_ID", "moe_tui_home"])
def test_a_profile_cannot_set_moe_tuis_own_markers(tmp_path, key):
    """A profile env naming MOE_TUI_RUNNER_DIR / MOE_TUI_SERVER_ID (how a killed runner's servers are found): refused at load, naming file and key."""
    from moe_tui.profiles import ProfileError, load_profile

    path = tmp_path / "sneaky.toml"
    path.write_text('name = "sneaky"\nengine = "sim"\nmodel_path = "m"\nmoe_runner_backend = "triton"\nport = 30000\n'
                    f'[env]\n{key} = "/elsewhere"\n')
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    text = str(info.value)
    assert str(path) in text and "env" in text and f"{key} is moe-tui's own variable" in text, text
