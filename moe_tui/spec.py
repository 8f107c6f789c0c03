"""BenchmarkSpec: everything that determines the workload a server sees and how it is measured.

Two runs are comparable only if their specs are identical, so the spec has one canonical JSON
form and a fingerprint (sha256 of that form). Spelling does not matter (field order, `4` vs `4.0`,
`"inf"` vs `float("inf")`); any change in meaning does. `diff` names every field that differs.
Every field that changes the prompts is in it: the dataset, and the vocabulary the random ids are
drawn from (`vocab_size`) and the tokenizer that gives it (`tokenizer`).

Compatibility: fields added after schema 1 (`ADDED_FIELDS`) enter the canonical form only when set
away from their "not given" default, so every fingerprint stored before they existed still loads and
still matches the same spec (a stored spec without them reads as "not given": the server's own
vocabulary and tokenizer, as those runs used).
Pure data: no I/O beyond parsing strings handed to it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from moe_tui.records import SpecJson, SpecOverrides

# Bumped only if the meaning of an existing field changes; it is part of the canonical form so
# fingerprints from different meanings never collide.
SPEC_SCHEMA = 1

CLIENTS = ("moe-tui", "sglang.bench_serving")
APIS = ("generate", "completions")
DATASETS = ("random-ids",)

# Upper bounds keep typos (an extra zero or three) from becoming a day-long run.
MAX_LEN = 1_048_576
MAX_PROMPTS = 10_000_000
MAX_CONCURRENCY = 1_000_000


class SpecError(ValueError):
    """A benchmark spec value is invalid. `field` names the field, `where` the source (file, flag)."""

    def __init__(self, field: str, message: str, where: str | None = None):
        self.field = field
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}benchmark spec field '{field}': {message}")


@dataclass(frozen=True)
class FieldDiff:
    field: str
    baseline: Any
    candidate: Any

    def describe(self) -> str:
        return f"{self.field}: {_show(self.baseline)} vs {_show(self.candidate)}"


@dataclass(frozen=True)
class BenchmarkSpec:
    """A frozen benchmark specification. Build with `BenchmarkSpec.from_dict` or the constructor."""

    client: str = "moe-tui"
    client_version: str = ""
    api: str = "generate"
    dataset: str = "random-ids"
    input_len: int = 1024
    output_len: int = 1024
    range_ratio: float = 1.0
    num_prompts: int = 100
    max_concurrency: int = 1
    request_rate: float = math.inf
    seed: int = 42
    warmup_requests: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0
    flush_cache: bool = True  # repeats must not be served from the radix cache of the previous one
    # The prompts' vocabulary: 0 = the served model's own (read from the server, as before these
    # fields existed); a given size draws other token ids, so other prompts.
    vocab_size: int = 0
    tokenizer: str = ""  # "" = the server's own tokenizer

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = _coerce(field.name, getattr(self, field.name), None)
            object.__setattr__(self, field.name, value)
        _check_ranges(self, None)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str | None = None) -> BenchmarkSpec:
        names = cls.field_names()
        unknown = [k for k in data if k not in names and k != "spec_schema"]
        if unknown:
            key = unknown[0]
            hint = difflib.get_close_matches(key, names, n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise SpecError(key, f"unknown field{extra}; known fields: {', '.join(names)}", where)
        schema = data.get("spec_schema", SPEC_SCHEMA)
        if schema != SPEC_SCHEMA:
            raise SpecError("spec_schema", f"unsupported schema {schema!r}, expected {SPEC_SCHEMA}", where)
        values = {k: _coerce(k, v, where) for k, v in data.items() if k != "spec_schema"}
        spec = cls.__new__(cls)
        defaults = cls()
        for name in names:
            object.__setattr__(spec, name, values.get(name, getattr(defaults, name)))
        _check_ranges(spec, where)
        return spec

    @classmethod
    def from_json(cls, text: str, where: str | None = None) -> BenchmarkSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError("(json)", f"not valid JSON: {exc}", where) from None
        if not isinstance(data, dict):
            raise SpecError("(json)", "expected a JSON object", where)
        return cls.from_dict(data, where)

    @classmethod
    def from_toml(cls, text: str, where: str | None = None) -> BenchmarkSpec:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError("(toml)", f"not valid TOML: {exc}", where) from None
        return cls.from_dict(data, where)

    def replace(self, **changes: Any) -> BenchmarkSpec:
        data = self.to_dict()
        data.update(changes)
        return BenchmarkSpec.from_dict(data)

    # -- canonical form -----------------------------------------------------------------------
    def to_dict(self) -> SpecOverrides:
        """Plain values; `request_rate` may be `math.inf`."""
        return {name: getattr(self, name) for name in self.field_names()}

    def canonical_dict(self) -> SpecJson:
        """JSON-safe values with one spelling each (inf as the string "inf", floats as floats)."""
        out: dict[str, object] = {"spec_schema": SPEC_SCHEMA}  # filled by name from the fields, typed on return
        for name, value in self.to_dict().items():
            if name in ADDED_FIELDS and value == ADDED_FIELDS[name]:
                continue  # not given: left out, so fingerprints from before the field existed still match
            if isinstance(value, float) and math.isinf(value):
                value = "inf"
            out[name] = value
        return cast(SpecJson, out)

    def canonical_json(self) -> str:
        # A spec never changes, and a campaign asks the same spec for its form and fingerprint once
        # per item (200,000 times for the largest allowed): kept beside the fields, outside them, so
        # equality, hashing and replace() never see it.
        cached: str | None = self.__dict__.get("_canonical_json")
        if cached is None:
            cached = json.dumps(self.canonical_dict(), sort_keys=True, separators=(",", ":"))
            self.__dict__["_canonical_json"] = cached
        return cached

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.canonical_dict(), sort_keys=True, indent=indent)

    def to_toml(self) -> str:
        import tomlkit

        doc = tomlkit.document()
        for name, value in self.to_dict().items():
            doc[name] = value
        return tomlkit.dumps(doc)

    @property
    def fingerprint(self) -> str:
        cached: str | None = self.__dict__.get("_fingerprint")
        if cached is None:
            cached = hashlib.sha256(self.canonical_json().encode()).hexdigest()
            self.__dict__["_fingerprint"] = cached
        return cached

    @property
    def short_fingerprint(self) -> str:
        return self.fingerprint[:12]

    # -- comparison ---------------------------------------------------------------------------
    def diff(self, other: BenchmarkSpec) -> list[FieldDiff]:
        """Every field whose value differs, in declaration order."""
        mine, theirs = self.canonical_dict(), other.canonical_dict()
        return [FieldDiff(n, mine.get(n, ADDED_FIELDS.get(n)), theirs.get(n, ADDED_FIELDS.get(n)))
                for n in self.field_names() if mine.get(n) != theirs.get(n)]

    def describe(self) -> str:
        """One line a person reads: the fields that matter most first."""
        rate = "inf" if math.isinf(self.request_rate) else f"{self.request_rate:g}/s"
        return (
            f"{self.dataset} in={self.input_len} out={self.output_len} ratio={self.range_ratio:g} "
            f"n={self.num_prompts} conc={self.max_concurrency} rate={rate} seed={self.seed} "
            f"api={self.api} client={self.client}{' ' + self.client_version if self.client_version else ''}"
        )


# ---------------------------------------------------------------------------------------------
_INT_FIELDS = {"input_len", "output_len", "num_prompts", "max_concurrency", "seed", "warmup_requests", "vocab_size"}
_FLOAT_FIELDS = {"range_ratio", "request_rate", "temperature"}
_BOOL_FIELDS = {"ignore_eos", "flush_cache"}
_STR_FIELDS = {"client", "client_version", "api", "dataset", "tokenizer"}
# Fields added after schema 1, with the "not given" value that keeps them out of the canonical form.
ADDED_FIELDS: dict[str, int | str] = {"vocab_size": 0, "tokenizer": ""}


def _coerce(name: str, value: Any, where: str | None) -> Any:
    if name in _BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        raise SpecError(name, f"expected true or false, got {value!r}", where)
    if name in _STR_FIELDS:
        if isinstance(value, str):
            return value
        raise SpecError(name, f"expected a string, got {value!r}", where)
    if name in _INT_FIELDS:
        if isinstance(value, bool):
            raise SpecError(name, f"expected an integer, got {value!r}", where)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return _coerce(name, float(value) if "." in value else int(value), where)
            except ValueError:
                pass
        raise SpecError(name, f"expected an integer, got {value!r}", where)
    if name in _FLOAT_FIELDS:
        if isinstance(value, bool):
            raise SpecError(name, f"expected a number, got {value!r}", where)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise SpecError(name, f"expected a number, got {value!r}", where)
    raise SpecError(name, "unknown field", where)


def _check_ranges(spec: BenchmarkSpec, where: str | None) -> None:
    def need(ok: bool, field: str, message: str) -> None:
        if not ok:
            raise SpecError(field, f"{message}, got {getattr(spec, field)!r}", where)

    need(spec.client in CLIENTS, "client", f"must be one of {', '.join(CLIENTS)}")
    need(spec.api in APIS, "api", f"must be one of {', '.join(APIS)}")
    need(spec.dataset in DATASETS, "dataset", f"must be one of {', '.join(DATASETS)}")
    need(1 <= spec.input_len <= MAX_LEN, "input_len", f"must be in [1, {MAX_LEN}]")
    need(1 <= spec.output_len <= MAX_LEN, "output_len", f"must be in [1, {MAX_LEN}]")
    need(not math.isnan(spec.range_ratio) and 0.0 <= spec.range_ratio <= 1.0, "range_ratio",
         "must be in [0, 1] (lengths are uniform on [L*ratio, L])")
    need(1 <= spec.num_prompts <= MAX_PROMPTS, "num_prompts", f"must be in [1, {MAX_PROMPTS}]")
    need(1 <= spec.max_concurrency <= MAX_CONCURRENCY, "max_concurrency",
         f"must be in [1, {MAX_CONCURRENCY}]")
    need(not math.isnan(spec.request_rate) and spec.request_rate > 0, "request_rate",
         "must be > 0 requests/s, or inf to send as fast as the concurrency cap allows")
    # bench_serving seeds numpy with it, which takes 32-bit seeds only.
    need(0 <= spec.seed < 2**32, "seed", "must be in [0, 2^32)")
    need(0 <= spec.warmup_requests <= 100_000, "warmup_requests", "must be in [0, 100000]")
    need(0 <= spec.vocab_size <= 100_000_000, "vocab_size", "must be 0 (the server's own) or a vocabulary size")
    need(not math.isnan(spec.temperature) and 0.0 <= spec.temperature <= 100.0, "temperature",
         "must be in [0, 100]")


# -- what a real box can run ----------------------------------------------------------------------
# The client keeps, per prompt, its request record and one ITL entry per output token; per request
# in flight, the prompt's token ids as a Python list and as JSON. Rough upper costs in bytes:
BYTES_PER_PROMPT = 1_500
BYTES_PER_OUTPUT_TOKEN = 160
BYTES_PER_INFLIGHT_INPUT_TOKEN = 60
MEMORY_LIMIT_ENV = "MOE_TUI_BENCH_MEMORY_LIMIT_GB"
DEFAULT_MEMORY_LIMIT_BYTES = 8 * 2**30


def memory_estimate_bytes(spec: BenchmarkSpec) -> int:
    """About how much memory the benchmark client needs for `spec` (before anything is made)."""
    in_flight = min(spec.max_concurrency, spec.num_prompts)
    return (spec.num_prompts * (BYTES_PER_PROMPT + spec.output_len * BYTES_PER_OUTPUT_TOKEN)
            + in_flight * spec.input_len * BYTES_PER_INFLIGHT_INPUT_TOKEN)


def memory_limit_bytes() -> int:
    """The client memory a run may take: MOE_TUI_BENCH_MEMORY_LIMIT_GB, else 8 GiB or half the
    machine's memory, whichever is less."""
    import os

    raw = os.environ.get(MEMORY_LIMIT_ENV)
    if raw:
        try:
            return int(float(raw) * 2**30)
        except ValueError:
            raise SpecError("num_prompts", f"{MEMORY_LIMIT_ENV}={raw!r} is not a number of GB") from None
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 2 * DEFAULT_MEMORY_LIMIT_BYTES
    return min(DEFAULT_MEMORY_LIMIT_BYTES, physical // 2)


def check_feasible(spec: BenchmarkSpec, where: str | None = None) -> None:
    """Refuse, before anything is allocated, a spec whose client would need more memory than this
    box allows (SpecError naming the fields and both figures). Not part of validity: a stored
    spec stays readable on any machine; runs and new campaigns are checked where they start."""
    need, limit = memory_estimate_bytes(spec), memory_limit_bytes()
    if need > limit:
        raise SpecError("num_prompts", f"num_prompts={spec.num_prompts} x output_len={spec.output_len} with "
                        f"max_concurrency={spec.max_concurrency} x input_len={spec.input_len} needs about "
                        f"{need / 2**30:,.1f} GiB of client memory, over the {limit / 2**30:,.1f} GiB limit "
                        f"({MEMORY_LIMIT_ENV}); split it into smaller runs", where)


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value or '""'
    return json.dumps(value)
