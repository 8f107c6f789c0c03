"""Bad input, one test per row: each asserts a clear message naming what is wrong and where, a
non-zero exit from the CLI, no traceback, and that nothing already stored changed (a digest of
every table of a seeded store, or the bytes of a corrupt store file, before and after)."""

from __future__ import annotations

import asyncio
import os
import socket
import textwrap
from pathlib import Path

import pytest
from runner_support import free_port, write_profile

GOOD = textwrap.dedent("""\
    name = "{name}"
    engine = "sim"
    model_path = "GLM-5-NVFP4"
    moe_runner_backend = "flashinfer_cutlass"
    port = {port}
""")


def _write(env, filename: str, text: str) -> Path:
    path = env.profiles / filename
    path.write_text(text)
    return path


def _assert_refused(result, *needles: str) -> None:
    out = result.stdout
    assert result.returncode != 0, out
    assert "Traceback" not in out, f"a traceback instead of a clear message: {out.strip().splitlines()[-1]}"
    for needle in needles:
        assert needle in out, f"{needle!r} not in:\n{out}"


def _profile_row(env, seeded_store, store_digest, filename: str, text: str, *needles: str) -> None:
    """A bad profile is named (file + key) by `profiles check`, `server start` and `queue add`."""
    name = filename.removesuffix(".toml")
    path = _write(env, filename, text)
    before = store_digest(seeded_store)
    check = env.run("profiles", "check", str(env.profiles))
    _assert_refused(check, str(path), *needles)
    start = env.run("server", "start", name, "--profiles", str(env.profiles), "--keep", "--quiet")
    _assert_refused(start, str(path), *needles)
    add = env.run("queue", "add", "--profiles", name, "--concurrency", "1", "--profiles-dir", str(env.profiles))
    _assert_refused(add, str(path), *needles)
    assert store_digest(seeded_store) == before
    assert not env.emulators()


@pytest.mark.integration
def test_malformed_profile_toml(env, seeded_store, store_digest):
    """Malformed profile TOML: file, line and column named by profiles check, server start, queue add."""
    _profile_row(env, seeded_store, store_digest, "broken.toml",
                 GOOD.format(name="broken", port=30001) + "tp_size = = 8\ndescription = \"x\"\n", "malformed TOML", "line 6")


@pytest.mark.integration
def test_profile_unknown_key(env, seeded_store, store_digest):
    """Unknown profile key: named, with a did-you-mean, everywhere the profile is used."""
    _profile_row(env, seeded_store, store_digest, "typo.toml",
                 GOOD.format(name="typo", port=30002) + "tp_sise = 8\n", "key 'tp_sise'", "did you mean 'tp_size'")


@pytest.mark.integration
def test_profile_wrong_types(env, seeded_store, store_digest):
    """Wrong value type in a profile (tp_size = "8"): key, expected and actual type named."""
    _profile_row(env, seeded_store, store_digest, "types.toml",
                 GOOD.format(name="types", port=30003) + 'tp_size = "8"\n', "key 'tp_size'", "expected int, got str")


@pytest.mark.integration
def test_profile_port_below_1024(env, seeded_store, store_digest):
    """Port below 1024: refused before any launch, with the allowed range."""
    _profile_row(env, seeded_store, store_digest, "low.toml", GOOD.format(name="low", port=80),
                 "key 'port'", "[1024, 65535]", "got 80")


@pytest.mark.integration
def test_port_already_in_use_on_server_start(env, seeded_store, store_digest):
    """Port already in use at `moe-tui server start`: refused, the port and the holder's pid named."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env.ports.append(port)
        write_profile(env.profiles, "busy", "flashinfer_cutlass", port)
        before = store_digest(seeded_store)
        result = env.run("server", "start", "busy", "--profiles", str(env.profiles), "--keep", "--quiet")

        _assert_refused(result, f"port {port}", "in use", f"pid {os.getpid()}")
    assert store_digest(seeded_store) == before
    assert not env.emulators()


def test_gpu_index_beyond_gpu_count(env, tmp_path):
    """GPU index beyond the GPU count (count injected, as NVML would report it): refused before launch."""
    from moe_tui import servers
    from moe_tui.profiles import profile_from_dict

    profile = profile_from_dict({"name": "big", "engine": "sglang", "model_path": "m", "tp_size": 2,
                                 "moe_runner_backend": "flashinfer_cutlass", "gpus": [6, 9],
                                 "port": 30004, "python": "/nonexistent/python"}, "big.toml")
    with pytest.raises(servers.GpuConflictError, match=r"GPU index 9, but NVML reports 8 GPU\(s\) \(indices 0..7\)"):
        servers.check_gpus(profile, [], servers.GpuView(count=8), force=False)

    async def start() -> servers.ManagedServer:
        server = servers.ManagedServer(profile, gpu_probe=lambda: servers.GpuView(count=8))
        with pytest.raises(servers.GpuConflictError, match="GPU index 9"):
            await server.start()
        return server

    server = asyncio.run(start())
    assert server.pid is None and server.state == "stopped"  # nothing was launched
    assert not list((env.data_dir / "logs").glob("big-*.log")) if (env.data_dir / "logs").exists() else True
    # Without an NVIDIA driver the probe reports nothing and the index cannot be checked: the
    # start goes ahead and SGLang itself fails on the missing device (recorded in the report).
    if servers.nvml_gpu_view() is None:
        servers.check_gpus(profile, [], None, force=False)


@pytest.mark.parametrize("flags, needle", [
    (["--concurrency", "0"], "max_concurrency"),
    (["--concurrency", "1", "--input-len", "0"], "input_len"),
    (["--concurrency", "1", "--range-ratio", "5"], "range_ratio"),
    (["--concurrency", "1", "--num-prompts", "-4"], "num_prompts"),
    (["--concurrency", "two"], "--concurrency expects comma-separated ints"),
    (["--concurrency", "1", "--repeats", "0"], "repeats"),
], ids=["concurrency 0", "input-len 0", "range-ratio 5", "num-prompts -4", "concurrency 'two'", "repeats 0"])
@pytest.mark.integration
def test_impossible_spec_queue_add(env, seeded_store, store_digest, flags, needle):
    """Impossible spec values via `moe-tui queue add`: the field named, nothing queued."""
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30005)
    before = store_digest(seeded_store)
    result = env.run("queue", "add", "--profiles", "ok", "--profiles-dir", str(env.profiles), *flags)
    _assert_refused(result, needle)
    assert result.returncode == 2, result.stdout  # a bad value is a usage error (README: exit codes)
    assert store_digest(seeded_store) == before


@pytest.mark.parametrize("flags, needle", [
    (["--num-prompts", "0"], "'num_prompts'"),
    (["--max-concurrency", "-1"], "'max_concurrency'"),
    (["--random-range-ratio", "1.5"], "'range_ratio'"),
    (["--random-input-len", "0"], "'input_len'"),
    (["--request-timeout", "0"], "--request-timeout"),
    (["--spec-file", "/nonexistent/spec.toml"], "/nonexistent/spec.toml"),
], ids=["num-prompts 0", "max-concurrency -1", "range-ratio 1.5", "input-len 0", "request-timeout 0",
        "missing spec file"])
@pytest.mark.integration
def test_impossible_spec_bench_flags(env, seeded_store, store_digest, flags, needle):
    """Impossible spec values via `moe-tui bench` flags: exit 2 before any request, the field named."""
    before = store_digest(seeded_store)
    result = env.run("bench", "--base-url", "http://127.0.0.1:9", *flags, timeout=60)
    _assert_refused(result, needle)
    assert result.returncode == 2
    assert store_digest(seeded_store) == before


STORE_COMMANDS = [
    ["queue", "list"],
    ["queue", "add", "--profiles", "ok", "--concurrency", "1", "--profiles-dir", "{profiles}"],
    ["queue", "pause"],
    ["run", "--profiles-dir", "{profiles}"],
    ["compare", "a", "b"],
    ["export", "a", "b"],
    ["server", "status"],
    ["server", "stop", "--all"],
    ["server", "logs", "ok"],
    ["server", "start", "ok", "--profiles", "{profiles}", "--keep", "--quiet"],
]


@pytest.mark.parametrize("argv", STORE_COMMANDS, ids=["queue list", "queue add", "queue pause", "run", "compare",
                                                   "export", "server status", "server stop", "server logs",
                                                   "server start"])
@pytest.mark.integration
def test_corrupt_store_file(env, argv):
    """Corrupt store file: every CLI that opens the store names the file, exits non-zero, leaves it byte-identical."""
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30006)
    env.data_dir.mkdir(parents=True)
    garbage = bytes(range(256)) * 64
    env.db.write_bytes(garbage)
    result = env.run(*[a.format(profiles=env.profiles) for a in argv])
    _assert_refused(result, str(env.db), "not a usable moe-tui database")
    assert env.db.read_bytes() == garbage
    assert not env.emulators()


@pytest.mark.integration
def test_corrupt_store_file_tui(env):
    """Corrupt store file at `moe-tui tui`: a clear message naming the file, no traceback, file untouched."""
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30007)
    env.data_dir.mkdir(parents=True)
    garbage = b"not a database " * 100
    env.db.write_bytes(garbage)
    result = env.run("tui", "--profiles-dir", str(env.profiles), "--in-process", "--no-gpu-sampling", timeout=60)
    _assert_refused(result, str(env.db))
    assert env.db.read_bytes() == garbage


def test_malformed_profile_tui_toast(env):
    """Malformed profile in the TUI: a warning toast naming the file and the TOML error."""
    from moe_tui.ui.launch import open_control_room

    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30008)
    bad = _write(env, "broken.toml", GOOD.format(name="broken", port=30009) + "port = = 1\n")
    env.data_dir.mkdir(parents=True, exist_ok=True)
    room = open_control_room(env.profiles, attach=False)
    seen: list[tuple[str, str]] = []
    original = room.app.notify

    def notify(message, *args, **kwargs):
        seen.append((str(message), kwargs.get("severity", "information")))
        return original(message, *args, **kwargs)

    room.app.notify = notify

    async def drive() -> None:
        async with room.app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(0.5)

    try:
        asyncio.run(drive())
    finally:
        close = getattr(room.client, "close", None) or getattr(room.client, "stop", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass
    assert any(str(bad) in m and "malformed TOML" in m and sev == "warning" for m, sev in seen), seen


def _jsonl_rows():
    return [
        ("garbage.jsonl", b'{"backend": "sglang"\nnot json at all\n', ":1:"),
        ("binary.jsonl", bytes(range(256)), "binary.jsonl"),
        ("array.jsonl", b"[1, 2, 3]\n", "expected a JSON object"),
    ]


@pytest.mark.parametrize("filename, content, needle", _jsonl_rows(),
                         ids=["line not JSON", "binary bytes", "not an object"])
@pytest.mark.integration
def test_unreadable_jsonl_import(env, seeded_store, store_digest, filename, content, needle):
    """Unreadable bench_serving JSONL import: path and line named, no run stored (adapter and `moe-tui import`)."""
    from moe_tui.bench.sglang_adapter import RecordError, normalize_record, parse_bench_serving_jsonl

    path = env.home / filename
    path.write_bytes(content)
    before = store_digest(seeded_store)
    with pytest.raises(RecordError) as info:
        for i, record in enumerate(parse_bench_serving_jsonl(path), start=1):
            normalize_record(record, f"{path}:{i}")
    assert str(path) in str(info.value) and needle in str(info.value)
    import importlib.util

    if importlib.util.find_spec("moe_tui.commands.importer") is None:
        pytest.skip("`moe-tui import` is not in this build (moe_tui/commands/importer.py missing); "
                    "the adapter's parser was checked")
    result = env.run("import", str(path), timeout=60)
    _assert_refused(result, str(path))
    assert store_digest(seeded_store) == before


@pytest.mark.integration
def test_server_info_not_json(env, seeded_store, store_digest, tmp_path):
    """Server answering /health_generate 200 but non-JSON /server_info: start says UNVERIFIED with the reason, no traceback."""
    from conftest import write_garbage_server

    script = write_garbage_server(tmp_path, "info-not-json")
    port = free_port()
    env.ports.append(port)
    before = store_digest(seeded_store)
    (env.profiles / "garbage.toml").write_text(
        GOOD.format(name="garbage", port=port) + f'python = "{script}"\nstartup_timeout_s = 20\n')
    result = env.run("server", "start", "garbage", "--profiles", str(env.profiles), "--keep", "--quiet", timeout=60)
    out = result.stdout
    try:
        assert "Traceback" not in out, out
        assert "/server_info is not JSON" in out and "UNVERIFIED" in out, out
        assert "Bad Gateway" in out  # the start of the body is quoted
        rows = env.query("SELECT resolved_backend, reason FROM server_starts WHERE profile_name = 'garbage'")
        assert rows and rows[-1][0] is None and "resolved backend UNKNOWN" in rows[-1][1]
    finally:
        stop = env.run("server", "stop", "garbage", timeout=60)
        assert stop.returncode == 0, stop.stdout
    # The seeded rows are untouched; only the new server start was added.
    after = store_digest(seeded_store)
    assert {k: v for k, v in after.items() if k != "server_starts"} == \
        {k: v for k, v in before.items() if k != "server_starts"}


@pytest.mark.integration
def test_generate_answers_garbage_sse(env, garbage_server, seeded_store, store_digest):
    """Server answering garbage SSE on /generate: `moe-tui bench` ends failed with a clear error, no traceback."""
    base = garbage_server("sse-garbage")
    before = store_digest(seeded_store)
    result = env.run("bench", "--base-url", base, "--num-prompts", "3", "--random-input-len", "8",
                     "--random-output-len", "4", "--warmup-requests", "0", "--vocab-size", "1000", timeout=60)
    out = result.stdout
    assert result.returncode == 1, out
    assert "Traceback" not in out, out
    assert "failed" in out.lower(), out
    assert "json" in out.lower() or "garbage" in out.lower() or "malformed" in out.lower(), out
    assert store_digest(seeded_store) == before


@pytest.mark.integration
def test_bench_base_url_nothing_listening(env):
    """`moe-tui bench` against a port where nothing listens: failed, exit 1, the URL named, no traceback."""
    url = f"http://127.0.0.1:{free_port()}"
    result = env.run("bench", "--base-url", url, "--num-prompts", "2", "--random-input-len", "8",
                     "--random-output-len", "4", "--vocab-size", "1000", timeout=60)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stdout
    assert "127.0.0.1" in result.stdout
