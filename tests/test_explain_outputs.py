"""The breakdown's exports (text, Markdown, CSV, JSON, stacked bars) and the expert-load reader:
on a dump real torch.save wrote (tests/data/expert_distribution_recorder_torch.pt, SGLang's "stat"
layout), on the emulator's hand-written one, and on hostile files."""

from __future__ import annotations

import csv
import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest

from moe_tui.explain import compare_sides, read_rank, side_breakdown
from moe_tui.explain.breakdown import KernelRow, SideBreakdown
from moe_tui.explain.expert_load import ExpertLoadError, expert_load
from moe_tui.explain.render import stacked_bars, text_lines, to_csv, to_json, to_markdown
from moe_tui.sim.expert_load import torch_save_int_tensor_dict

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def expl():
    a = side_breakdown("A", [read_rank(DATA / "real-A-TP-0.trace.json.gz")])
    b = side_breakdown("B", [read_rank(DATA / "real-B-TP-0.trace.json.gz")])
    return compare_sides(a, b)


def test_formats_carry_the_same_numbers(expl):
    rows = list(csv.reader(io.StringIO(to_csv(expl))))
    gemm = next(r for r in rows if r and r[0] == "moe_gemm")
    assert float(gemm[4]) == pytest.approx(expl.classes[0].delta_ms)
    data = json.loads(to_json(expl, {"extra": 1}))
    assert data["extra"] == 1 and data["classes"][0]["class"] == "moe_gemm"
    assert data["classes"][0]["beyond_noise"] is True
    md = to_markdown(expl)
    assert md.startswith("| class | A ms/step | B ms/step |") and "| MoE GEMM | 0.047 | 0.058 | +0.011 |" in md
    text = "\n".join(text_lines(expl))
    assert "MoE GEMM +0.011 ms/step moved beyond its noise" in text


def test_hostile_kernel_names_stay_data(expl):
    evil = "=HYPERLINK(\"http://x\")|`[bold]x[/]$\\alpha$\x1b[2J"
    side = expl.a
    hostile = SideBreakdown("=cmd|' /C calc'!A0", side.ranks, side.steps, side.classes, side.step_ms, side.step_se,
                            (KernelRow(evil, "other", 1.0, 1.0),) + side.kernels)
    e = compare_sides(hostile, expl.b)
    rows = list(csv.reader(io.StringIO(to_csv(e))))
    assert all(not cell.startswith(("=", "+", "@")) for row in rows for cell in row if cell)
    md = to_markdown(e)
    assert "\\|" in md and "\x1b" not in md and "\\`" in md
    png, svg = stacked_bars(e)  # a label with $...$ must not reach mathtext
    assert png[:4] == b"\x89PNG" and b"<svg" in svg


def test_real_torch_dump_per_layer_load():
    load = expert_load(DATA / "expert_distribution_recorder_torch.pt")
    assert load.steps == 3 and load.experts == 8 and len(load.layers) == 4
    worst = load.worst
    assert worst is not None and worst.layer == 2
    assert worst.max_tokens == 203 and worst.mean_tokens == pytest.approx(50.0)
    assert worst.imbalance == pytest.approx(4.06)


def test_emulator_dump_reads_back(tmp_path):
    p = tmp_path / "expert_distribution_recorder_1.pt"
    p.write_bytes(torch_save_int_tensor_dict({"rank": 0, "average_utilization_rate_over_window": None},
                                             "logical_count", (2, 1, 4), [1, 1, 1, 5, 0, 0, 0, 0]))
    load = expert_load(p)
    assert load.steps == 1 and [(lay.max_tokens, lay.mean_tokens) for lay in load.layers] == [(5, 2.0)]


def _zip(tmp_path: Path, pkl: bytes, extra: dict[str, bytes] | None = None) -> Path:
    p = tmp_path / "evil.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        for k, v in (extra or {}).items():
            z.writestr(k, v)
    return p


def test_hostile_dumps_are_refused(tmp_path):
    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(ExpertLoadError, match="refuses to load .*print"):
        expert_load(_zip(tmp_path, pickle.dumps({"logical_count": Boom()}, protocol=2)))
    with pytest.raises(ExpertLoadError, match="no logical_count"):
        expert_load(_zip(tmp_path, pickle.dumps({"rank": 0}, protocol=2)))
    bad = tmp_path / "not.pt"
    bad.write_bytes(b"plain text")
    with pytest.raises(ExpertLoadError, match="cannot read"):
        expert_load(bad)
    # a tensor that claims more elements than its storage holds
    big = torch_save_int_tensor_dict({}, "logical_count", (2, 2, 2), [1, 2, 3, 4, 5, 6, 7, 8])
    z = zipfile.ZipFile(io.BytesIO(big))
    short = {n: z.read(n) for n in z.namelist() if n != "archive/data.pkl"}
    short["archive/data/0"] = short["archive/data/0"][:8]
    with pytest.raises(ExpertLoadError, match="does not fit"):
        expert_load(_zip(tmp_path, z.read("archive/data.pkl"), short))


def test_the_emulators_expert_dump_rows_are_model_layers(tmp_path, monkeypatch):
    """0.5.23's stat recorder dumps one row per model layer (GLM-5: 78, the first 3 dense and zero),
    so explain names the worst layer by its model index; the emulator wrote one row per MoE layer."""
    from types import SimpleNamespace

    from moe_tui.sim.expert_load import SimExpertRecorder
    from moe_tui.sim.model import StepPlan

    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path))
    args = SimpleNamespace(model_path="zai-org/GLM-5", expert_distribution_recorder_mode="stat",
                           expert_distribution_recorder_buffer_size=4)
    rec = SimExpertRecorder(SimpleNamespace(args=args, random_seed=1, sim_seed=1))  # type: ignore[arg-type]
    rec.recording = True
    for i in range(2):
        rec.on_step(StepPlan(i, 16, 0), 0.01)
    load = expert_load(rec.dump())
    assert len(load.layers) == 78 and load.moe_layers == 75 and load.steps == 2
    assert [lay.tokens for lay in load.layers[:3]] == [0, 0, 0]
    assert all(lay.tokens > 0 for lay in load.layers[3:])
    assert load.worst is not None and load.worst.layer >= 3
