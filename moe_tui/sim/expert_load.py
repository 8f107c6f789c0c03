"""The emulator's expert-distribution recorder (SGLang's eplb/expert_distribution.py, "stat" mode).

`/start_expert_distribution_record` resets and starts counting, `/stop_..._record` stops,
`/dump_..._record` writes `expert_distribution_recorder_<time.time()>.pt` into
$SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR (default /tmp) and resets. The file is what SGLang's
`torch.save` writes: a zip archive holding `data.pkl` (a dict `{"rank": 0, "logical_count":
int32 tensor [buffer, model layers, experts], "average_utilization_rate_over_window": None}`:
the whole circular buffer of `--expert-distribution-recorder-buffer-size` rows, unused rows zero,
one row per model layer with the leading dense layers zero, as 0.5.23 dumps it) and the
tensor's raw storage; written here by hand (no torch in the emulator), read back without torch by
`moe_tui.explain.expert_load`. Every endpoint needs `--expert-distribution-recorder-mode`: without
one, 0.5.23's no-op recorder raises in the scheduler and the whole server dies unanswered
(`moe_tui.sim.failure.child_failed`), and so does the emulator.

Routing model: per MoE layer a fixed, seeded popularity over the routed experts (a Zipf-like
skew, max/mean about 2.6, as real routers show), each step's tokens x top-k spread over it in
expectation (rounded up or down at random, so counts stay unbiased).
"""

from __future__ import annotations

import array
import asyncio
import io
import json
import os
import random
import struct
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from moe_tui.records import HfConfig, SglangJson
from moe_tui.sim.failure import child_failed

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine
    from moe_tui.sim.model import StepPlan

MODEL_DIR = Path(__file__).with_name("models")
DEFAULT_BUFFER = 1000  # SGLang's --expert-distribution-recorder-buffer-size default: a circular buffer
NOT_ENABLED = ("Please set ServerArgs.expert_distribution_recorder_mode to use ExpertDistributionRecorder.")


def model_moe_shape(model_path: str) -> tuple[int, int, int, int]:
    """(model layers, leading dense layers, routed experts, top-k) of the emulated model (GLM-5's
    by default)."""
    cfg_file = MODEL_DIR / Path(model_path).name / "config.json"
    cfg: HfConfig = {}
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
    return (int(cfg.get("num_hidden_layers", 78)), int(cfg.get("first_k_dense_replace", 3)),
            int(cfg.get("n_routed_experts", 256)), int(cfg.get("num_experts_per_tok", 8)))


class SimExpertRecorder:
    def __init__(self, engine: SimEngine) -> None:
        self.e = engine
        self.mode = getattr(engine.args, "expert_distribution_recorder_mode", None)
        self.buffer = max(1, int(getattr(engine.args, "expert_distribution_recorder_buffer_size", None)
                                 or DEFAULT_BUFFER))
        self.model_layers, self.dense, self.experts, self.topk = model_moe_shape(engine.args.model_path)
        self.layers = self.model_layers - self.dense  # MoE layers
        rng = random.Random(engine.random_seed * 7919 + 17)
        self.rng = random.Random(engine.sim_seed)
        self.popularity: list[list[float]] = []
        for _ in range(self.layers):
            w = [1.0 / (r + 40.0) ** 0.8 for r in range(self.experts)]
            rng.shuffle(w)
            total = sum(w)
            self.popularity.append([x / total for x in w])
        self.recording = False
        self.counts: list[list[list[int]]] = []

    def on_step(self, plan: StepPlan, _duration: float) -> None:
        if not self.recording:
            return
        tokens = plan.decode_batch + plan.prefill_tokens
        if tokens <= 0:
            return
        routed = tokens * self.topk
        u = self.rng.random
        step = [[int(routed * p + u()) for p in layer] for layer in self.popularity]  # unbiased rounding
        self.counts.append(step)
        if len(self.counts) > self.buffer:
            self.counts.pop(0)

    def dump(self) -> Path:
        """The whole circular buffer, as 0.5.23's stat accumulator dumps it: `buffer` rows (unused
        ones zero), one row per model layer (the leading dense layers zero), one column per expert."""
        out_dir = Path(os.environ.get("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "/tmp")).expanduser()
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"expert_distribution_recorder_{time.time()}.pt"
        shape = (self.buffer, self.model_layers, self.experts)
        flat = array.array("i", bytes(4 * self.buffer * self.model_layers * self.experts))
        row = self.model_layers * self.experts
        for i, step in enumerate(self.counts):
            for j, layer in enumerate(step):
                at = i * row + (self.dense + j) * self.experts
                flat[at:at + self.experts] = array.array("i", layer)
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(torch_save_int_tensor_dict(
            {"rank": 0, "average_utilization_rate_over_window": None}, "logical_count", shape, flat.tobytes()))
        tmp.replace(path)
        self.counts = []
        return path

    # -- HTTP (SGLang's texts) ------------------------------------------------------------------
    async def _die_without_mode(self, method: str) -> None:
        """0.5.23 without a recorder mode: the no-op recorder's `method` raises in the scheduler's
        `expert_distribution_handle`, which has no try; the scheduler exits and SIGQUITs the
        launcher, which kills the whole tree. The HTTP request is never answered."""
        error = (f'  File "sglang/srt/managers/scheduler.py", in expert_distribution_handle\n'
                 f'  File "sglang/srt/eplb/expert_distribution.py", in {method}\n'
                 f'  File "sglang/srt/eplb/expert_distribution.py", in _on_not_implemented\n'
                 f"Exception: {NOT_ENABLED}")
        asyncio.get_running_loop().call_later(0.02, child_failed, self.e, error, True)
        await asyncio.Event().wait()  # the process is SIGKILLed before any answer

    async def handle_start(self, request: web.Request) -> web.Response:
        if self.mode is None:
            await self._die_without_mode("start_record")
        self.counts, self.recording = [], True
        return web.Response(text="Start recording the expert distribution.\n")

    async def handle_stop(self, request: web.Request) -> web.Response:
        if self.mode is None:
            await self._die_without_mode("stop_record")
        self.recording = False
        return web.Response(text="Stop recording the expert distribution.\n")

    async def handle_dump(self, request: web.Request) -> web.Response:
        if self.mode is None:
            await self._die_without_mode("dump_record")
        self.dump()
        return web.Response(text="Dump expert distribution record.\n")


# -- torch.save's format, by hand -------------------------------------------------------------
def _unicode(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(v: int) -> bytes:
    return b"J" + struct.pack("<i", v)


def _tuple(items: list[bytes]) -> bytes:
    return b"(" + b"".join(items) + b"t"


def _value(v: object) -> bytes:
    if v is None:
        return b"N"
    if isinstance(v, bool):
        return b"\x88" if v else b"\x89"
    if isinstance(v, int):
        return _int(v)
    if isinstance(v, float):
        return b"G" + struct.pack(">d", v)
    return _unicode(str(v))


def torch_save_int_tensor_dict(plain: SglangJson, tensor_key: str, shape: tuple[int, ...],
                               values: list[int] | bytes) -> bytes:
    """The bytes `torch.save({..plain, tensor_key: int32 tensor(shape)})` writes (zip format)."""
    stride: list[int] = []
    acc = 1
    for dim in reversed(shape):
        stride.insert(0, acc)
        acc *= max(dim, 1)
    raw = values if isinstance(values, bytes) else struct.pack(f"<{len(values)}i", *values)
    numel = len(raw) // 4
    storage_ref = _tuple([_unicode("storage"), b"ctorch\nIntStorage\n", _unicode("0"), _unicode("cpu"), _int(numel)])
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n"
              + _tuple([storage_ref + b"Q", _int(0), _tuple([_int(d) for d in shape]),
                        _tuple([_int(s) for s in stride]), b"\x89",
                        b"ccollections\nOrderedDict\n)R"]) + b"R")
    items = b"".join(_unicode(k) + _value(v) for k, v in plain.items()) + _unicode(tensor_key) + tensor
    pkl = b"\x80\x02}(" + items + b"u."
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", raw)
        z.writestr("archive/version", "3\n")
    return buf.getvalue()
