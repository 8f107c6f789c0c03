"""Expert dumps (issue 36): a server moe-tui starts writes them into a folder of its own start
(owner-only, under the data dir), whatever a profile's env says, and the runner reads them from
there only; a dump another user planted in the shared folder (/tmp by default, here the folder
the profile names) is never read, and `explain`'s reader refuses a file that is not this user's
regular file, naming why."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files owned by another user")


@pytest.mark.integration
@needs_root
def test_dumps_go_to_the_server_starts_own_folder_and_planted_ones_are_never_read(env, tmp_path):

    from moe_tui import paths
    from moe_tui.profiles import load_profile
    from moe_tui.run.profiled import _expert_dump
    from moe_tui.servers.keys import auth_headers
    from moe_tui.servers.managed import ManagedServer
    from tests.support import loopback

    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # what /tmp is
    env.profile("sim-rec", "flashinfer_cutlass")
    path = env.profiles / "sim-rec.toml"
    text = path.read_text().replace('extra_args = ["--enable-metrics"]', 'extra_args = ["--enable-metrics", '
                                    '"--expert-distribution-recorder-mode", "stat"]')
    path.write_text(text.replace("[sim]", f'[env]\nSGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR = "{shared}"\n\n[sim]', 1))
    profile = load_profile(path)

    async def scenario() -> tuple[str, list[str], dict]:
        env.data_dir.mkdir(parents=True, exist_ok=True)
        server = ManagedServer(profile, gpu_probe=None)
        await server.start()
        try:
            await server.wait_ready(60)
            environ = open(f"/proc/{server.pid}/environ", "rb").read().split(b"\0")
            folder = next(e.split(b"=", 1)[1].decode() for e in environ
                          if e.startswith(b"SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR="))
            home = paths.data_dir().resolve()
            assert os.path.realpath(folder).startswith(str(home) + os.sep), folder  # not the profile's shared folder
            st = os.stat(folder)
            assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
            # planted after the server started, as fresh as its own dump: one by uid nobody, one of ours
            for name, uid in (("expert_distribution_recorder_1.pt", NOBODY), ("expert_distribution_recorder_2.pt", 0)):
                (shared / name).write_bytes(b"a pickle from someone else")
                os.chown(shared / name, uid, uid)
            raw = tmp_path / "raw"
            raw.mkdir()
            facts: dict = {"notes": []}
            async with loopback.AsyncClient(base_url=server.base_url, trust_env=False,
                                         headers=auth_headers(server.base_url)) as client:  # the start's key
                assert (await client.post("/start_expert_distribution_record")).status_code == 200
                await _expert_dump(client, server, raw, facts)
            return folder, sorted(p.name for p in raw.iterdir()), facts
        finally:
            await server.stop("test over")

    folder, kept, facts = asyncio.run(scenario())
    assert len(kept) == 1 and kept[0].startswith("expert_distribution_recorder_"), kept
    assert not os.path.exists(folder)  # the server's own dump moved out, its folder removed at stop
    assert not any("recorder_1.pt" in n or "recorder_2.pt" in n for n in facts["notes"]), facts
    assert facts["expert_record"] == "dumped"
    # the server wrote nothing into the shared folder the profile named
    assert sorted(os.listdir(shared)) == ["expert_distribution_recorder_1.pt", "expert_distribution_recorder_2.pt"]


@needs_root
@pytest.mark.parametrize("kind", ["other-user", "symlink"])
def test_explain_reader_refuses_a_dump_this_user_did_not_write(tmp_path, kind):
    from moe_tui.explain.expert_load import ExpertLoadError, load_dump

    real = tmp_path / "expert_distribution_recorder_9.pt"
    real.write_bytes(b"PK not even a zip")
    target = real
    if kind == "other-user":
        os.chown(real, NOBODY, NOBODY)
    else:
        target = tmp_path / "expert_distribution_recorder_link.pt"
        target.symlink_to(real)
    with pytest.raises(ExpertLoadError) as info:
        load_dump(target)
    text = str(info.value)
    assert str(target) in text
    assert (f"belongs to uid {NOBODY}" in text) if kind == "other-user" else ("symbolic link" in text), text
