"""Expert load per MoE layer, from SGLang's expert-distribution dump, read without torch.

The dump (`/dump_expert_distribution_record` in "stat" mode) is `torch.save({"rank",
"logical_count": int tensor [buffered steps, layers, logical experts], ...})`: a zip archive of a
pickle and raw storages. It is untrusted input: the pickle is read by an unpickler that knows only
the few names a tensor needs (`torch._utils._rebuild_tensor_v2`, torch's typed storages,
`collections.OrderedDict`) and refuses any other, so a crafted file cannot run code; sizes are
bounded, and only a regular file of this user is opened (no link followed), else a named refusal.

Imbalance of a layer = the tokens its busiest expert got / the mean over its experts (1.0 is
perfectly even; with EP the busiest expert's GPU sets the MoE's pace). Pure.
"""

from __future__ import annotations

import io
import os
import pickle
import statistics
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from moe_tui.records import FreeForm
from moe_tui.records.grid import ExpertLoadJson
from moe_tui.trust import open_regular

# SGLang's expert_distribution_recorder dump (torch.save of its dict, tensors as numpy arrays here): a
# foreign payload, read into ExpertLoad here and nowhere else.
ExpertDump = FreeForm

MAX_DUMP_BYTES = 256 * 1024 * 1024
STORAGE_DTYPES = {"IntStorage": np.int32, "LongStorage": np.int64, "FloatStorage": np.float32,
                  "DoubleStorage": np.float64, "ShortStorage": np.int16, "ByteStorage": np.uint8}


class ExpertLoadError(ValueError):
    """A dump that cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class LayerLoad:
    layer: int
    tokens: int
    max_tokens: int
    mean_tokens: float

    @property
    def imbalance(self) -> float | None:
        return self.max_tokens / self.mean_tokens if self.mean_tokens > 0 else None


@dataclass(frozen=True)
class ExpertLoad:
    source: str
    steps: int  # buffered steps that routed any token
    experts: int
    layers: tuple[LayerLoad, ...]

    @property
    def worst(self) -> LayerLoad | None:
        rated = [lay for lay in self.layers if lay.imbalance is not None]
        return max(rated, key=lambda lay: lay.imbalance or 0.0) if rated else None

    @property
    def moe_layers(self) -> int:
        """Layers that routed any token (a dump has a row per model layer: dense ones stay zero)."""
        return sum(1 for lay in self.layers if lay.tokens > 0)

    @property
    def mean_imbalance(self) -> float | None:
        vals = [lay.imbalance for lay in self.layers if lay.imbalance is not None]
        return statistics.fmean(vals) if vals else None

    def to_dict(self) -> ExpertLoadJson:
        worst = self.worst
        return {"source": self.source, "steps": self.steps, "experts": self.experts,
                "mean_imbalance": self.mean_imbalance,
                "worst_layer": worst.layer if worst else None, "worst_imbalance": worst.imbalance if worst else None,
                "layers": [{"layer": lay.layer, "tokens": lay.tokens, "max": lay.max_tokens, "mean": lay.mean_tokens,
                            "imbalance": lay.imbalance} for lay in self.layers]}


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, zf: zipfile.ZipFile, root: str, source: str) -> None:
        super().__init__(io.BytesIO(data))
        self.zf, self.root, self.source = zf, root, source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise ExpertLoadError(f"{self.source}: refuses to load {module}.{name} (not part of an expert dump)")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise ExpertLoadError(f"{self.source}: unexpected persistent id in the pickle")
        key = str(pid[2])
        try:
            raw = self.zf.read(f"{self.root}/data/{key}")
        except KeyError:
            raise ExpertLoadError(f"{self.source}: storage {key!r} missing from the archive") from None
        return np.frombuffer(raw, dtype=STORAGE_DTYPES[pid[1].name])


def _rebuild_tensor(storage: Any, offset: int, size: tuple[int, ...], stride: tuple[int, ...], *_: Any) -> Any:
    flat = np.asarray(storage)
    need = offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) + 1 if all(size) else 0
    if need > flat.size:
        raise ExpertLoadError(f"tensor of shape {tuple(size)} does not fit its storage ({flat.size} elements)")
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=tuple(size),
                                           strides=tuple(s * flat.itemsize for s in stride))
    return np.array(view)


def load_dump(path: str | Path) -> ExpertDump:
    """The dumped dict, tensors as numpy arrays."""
    p = Path(path)
    try:
        # only a regular file of this user, never through a link: a dump is a pickle, and one
        # another user could write is read as this server's expert load
        fd = open_regular(p, follow_links=False, own=True, max_bytes=MAX_DUMP_BYTES)
    except OSError as exc:
        raise ExpertLoadError(f"{p}: not read: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as f, zipfile.ZipFile(f) as zf:
            pkl = [n for n in zf.namelist() if n.endswith("/data.pkl")]
            if len(pkl) != 1:
                raise ExpertLoadError(f"{p}: not a torch.save archive (no single data.pkl)")
            root = pkl[0][: -len("/data.pkl")]
            data = _Unpickler(zf.read(pkl[0]), zf, root, p.name).load()
    except (OSError, zipfile.BadZipFile) as exc:
        raise ExpertLoadError(f"{p}: cannot read the dump: {exc}") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(exc, ExpertLoadError):
            raise
        raise ExpertLoadError(f"{p}: malformed dump: {exc}") from None
    if not isinstance(data, dict):
        raise ExpertLoadError(f"{p}: the dump is not a dict")
    return data


def expert_load(path: str | Path) -> ExpertLoad:
    """Per-layer load from a "stat"-mode dump (its `logical_count`)."""
    p = Path(path)
    data = load_dump(p)
    counts = data.get("logical_count")
    if not isinstance(counts, np.ndarray) or counts.ndim not in (2, 3):
        raise ExpertLoadError(f"{p.name}: no logical_count [steps, layers, experts] tensor (was the recorder "
                              f"mode 'stat'?)")
    if counts.ndim == 2:
        counts = counts[None]
    steps = int((counts.reshape(counts.shape[0], -1).sum(axis=1) > 0).sum())
    per_layer = counts.sum(axis=0)
    layers = tuple(LayerLoad(i, int(row.sum()), int(row.max()) if row.size else 0,
                             float(row.mean()) if row.size else 0.0) for i, row in enumerate(per_layer))
    return ExpertLoad(p.name, steps, int(counts.shape[2]), layers)
