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


PER_START_PROFILE = """
name = "sim-dumps"
engine = "sim"
model_path = "GLM-5-NVFP4"
moe_runner_backend = "flashinfer_cutlass"
port = {port}
startup_timeout_s = 30
extra_args = ["--expert-distribution-recorder-mode", "stat", "--expert-distribution-recorder-buffer-size", "8"]

[env]
SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR = "{shared}"

[sim]
load_seconds = 0
graph_seconds = 0
warmup_seconds = 0
"""


@pytest.mark.integration
def test_expert_dumps_go_to_an_owner_only_folder_of_this_server_start(env, tmp_path):
    """A profile pointing the recorder at a shared 1777 folder: the server still gets a 0700 folder of its own start (the dump lands there, nothing in the shared one, uid nobody cannot plant one), gone after the stop."""
    import asyncio
    import stat as stat_mod

    import psutil
    from runner_support import free_port

    from moe_tui import servers
    from moe_tui.profiles import load_profile
    from tests.support import loopback

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    port = free_port()
    env.ports.append(port)
    (env.profiles / "sim-dumps.toml").write_text(PER_START_PROFILE.format(port=port, shared=shared))
    profile = load_profile(env.profiles / "sim-dumps.toml")

    async def scenario() -> tuple[str, os.stat_result, list[str], bool]:
        server = servers.ManagedServer(profile, ready_poll_s=0.05, grace_s=2.0, gpu_probe=None)
        await server.start()
        try:
            await server.wait_ready(30)
            child_dir = psutil.Process(server.pid).environ()["SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"]
            assert server.expert_dump_dir is not None and child_dir == str(server.expert_dump_dir)
            st = os.lstat(child_dir)
            from moe_tui.servers.keys import auth_headers  # the start's key: its admin routes answer only moe-tui

            async with loopback.AsyncClient(base_url=server.base_url, trust_env=False, timeout=10,
                                         headers=auth_headers(server.base_url)) as c:
                for call in ("start", "stop", "dump"):
                    assert (await c.post(f"/{call}_expert_distribution_record")).status_code == 200
            dumps = sorted(p.name for p in server.expert_dump_dir.glob("expert_distribution_recorder_*"))
            if os.geteuid() == 0:  # another user (uid nobody: a forked child that setuids) cannot plant one there
                target = str(server.expert_dump_dir / "expert_distribution_recorder_9.pt")
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        os.setgid(NOBODY)
                        os.setuid(NOBODY)
                        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                        os.write(fd, b"pickle")
                    except PermissionError:
                        code = 3
                    finally:
                        os._exit(code)
                assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3
        finally:
            await server.stop("test over")
        return child_dir, st, dumps, os.path.exists(child_dir)

    child_dir, st, dumps, left = asyncio.run(scenario())
    assert child_dir != str(shared)
    assert stat_mod.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == os.getuid()
    assert len(dumps) == 1 and dumps[0].startswith("expert_distribution_recorder_"), dumps
    assert list(shared.iterdir()) == []
    assert not left
