"""BenchmarkSpec: canonical form, fingerprint, diff, round-trips and validation errors."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moe_tui.spec import BenchmarkSpec, SpecError

# A value generator per field that always yields a *valid* value.
FIELD_VALUES = {
    "client": st.sampled_from(["moe-tui", "sglang.bench_serving"]),
    "client_version": st.sampled_from(["", "0.1.0", "0.5.23"]),
    "api": st.sampled_from(["generate", "completions"]),
    "dataset": st.just("random-ids"),
    "input_len": st.integers(1, 32768),
    "output_len": st.integers(1, 32768),
    "range_ratio": st.floats(0.0, 1.0),
    "num_prompts": st.integers(1, 100_000),
    "max_concurrency": st.integers(1, 4096),
    "request_rate": st.one_of(st.just(math.inf), st.floats(0.01, 1e4)),
    "seed": st.integers(0, 2**31),
    "warmup_requests": st.integers(0, 64),
    "ignore_eos": st.booleans(),
    "temperature": st.floats(0.0, 2.0),
    "flush_cache": st.booleans(),
}

specs = st.fixed_dictionaries(FIELD_VALUES).map(BenchmarkSpec.from_dict)


def respell(data: dict) -> dict:
    """The same meaning, spelled differently: floats that are integral become ints and back."""
    out = {}
    for key, value in data.items():
        if isinstance(value, bool):
            out[key] = value
        elif isinstance(value, float) and math.isinf(value):
            out[key] = "inf"
        elif isinstance(value, float) and value.is_integer():
            out[key] = int(value)
        elif isinstance(value, int):
            out[key] = float(value)
        else:
            out[key] = value
    return out


@settings(max_examples=200, deadline=None)
@given(specs, st.randoms())
def test_equal_specs_have_equal_fingerprints_regardless_of_order_and_spelling(spec, rnd):
    data = spec.to_dict()
    items = list(respell(data).items())
    rnd.shuffle(items)
    other = BenchmarkSpec.from_dict(dict(items))
    assert other == spec
    assert other.fingerprint == spec.fingerprint
    assert other.diff(spec) == []


@settings(max_examples=300, deadline=None)
@given(specs, st.sampled_from(sorted(f for f in FIELD_VALUES if f != "dataset")), st.data())
def test_any_single_field_change_changes_fingerprint_and_shows_alone_in_diff(spec, field, data):
    new_value = data.draw(FIELD_VALUES[field].filter(lambda v: v != getattr(spec, field)))
    changed = spec.replace(**{field: new_value})
    diff = spec.diff(changed)
    assert changed.fingerprint != spec.fingerprint
    assert [d.field for d in diff] == [field]
    assert field in diff[0].describe()


@settings(max_examples=100, deadline=None)
@given(specs)
def test_json_and_toml_round_trip(spec):
    assert BenchmarkSpec.from_json(spec.to_json()) == spec
    assert BenchmarkSpec.from_toml(spec.to_toml()) == spec
    assert BenchmarkSpec.from_json(spec.canonical_json()).fingerprint == spec.fingerprint


def test_fingerprint_is_sha256_of_canonical_json_and_short_form_is_12_chars():
    import hashlib

    spec = BenchmarkSpec()
    assert spec.fingerprint == hashlib.sha256(spec.canonical_json().encode()).hexdigest()
    assert spec.short_fingerprint == spec.fingerprint[:12]
    canonical = json.loads(spec.canonical_json())
    assert canonical["request_rate"] == "inf"
    assert list(canonical) == sorted(canonical)


def test_seed_situation_output_len_drift_is_named():
    baseline = BenchmarkSpec(max_concurrency=10, output_len=1024)
    drifted = BenchmarkSpec(max_concurrency=10, output_len=512)
    (only,) = baseline.diff(drifted)
    assert only.field == "output_len"
    assert only.describe() == "output_len: 1024 vs 512"


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("input_len", -1, "must be in [1,"),
        ("output_len", 0, "must be in [1,"),
        ("range_ratio", 1.5, "must be in [0, 1]"),
        ("range_ratio", -0.1, "must be in [0, 1]"),
        ("range_ratio", float("nan"), "must be in [0, 1]"),
        ("num_prompts", 0, "must be in [1,"),
        ("max_concurrency", 0, "must be in [1,"),
        ("request_rate", float("nan"), "must be > 0"),
        ("request_rate", 0, "must be > 0"),
        ("api", "chat", "must be one of generate, completions"),
        ("dataset", "sharegpt", "must be one of random-ids"),
        ("input_len", 10.5, "expected an integer"),
        ("ignore_eos", "yes", "expected true or false"),
        ("temperature", "hot", "expected a number"),
    ],
)
def test_invalid_values_name_the_field_and_the_allowed_range(field, value, fragment):
    with pytest.raises(SpecError) as info:
        BenchmarkSpec.from_dict({field: value}, where="campaign.toml")
    message = str(info.value)
    assert info.value.field == field
    assert f"'{field}'" in message
    assert fragment in message
    assert message.startswith("campaign.toml: ")


def test_unknown_field_is_rejected_with_a_suggestion():
    with pytest.raises(SpecError) as info:
        BenchmarkSpec.from_dict({"output_length": 10})
    assert "unknown field" in str(info.value)
    assert "did you mean 'output_len'" in str(info.value)


def test_constructor_validates_too():
    with pytest.raises(SpecError, match="max_concurrency"):
        BenchmarkSpec(max_concurrency=0)


def test_malformed_json_and_toml_are_clear_errors():
    with pytest.raises(SpecError, match="not valid JSON"):
        BenchmarkSpec.from_json("{nope", where="x.json")
    with pytest.raises(SpecError, match="not valid TOML"):
        BenchmarkSpec.from_toml("a = = 1", where="x.toml")


def test_spec_is_frozen():
    spec = BenchmarkSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.output_len = 5  # type: ignore[misc]


def test_describe_mentions_the_key_fields():
    text = BenchmarkSpec(max_concurrency=64, request_rate=8).describe()
    assert "conc=64" in text and "rate=8/s" in text and "out=1024" in text


def test_random_specs_never_collide():
    rnd = random.Random(0)
    seen = {}
    for _ in range(2000):
        spec = BenchmarkSpec(input_len=rnd.randint(1, 64), output_len=rnd.randint(1, 64),
                             max_concurrency=rnd.randint(1, 8))
        other = seen.setdefault(spec.fingerprint, spec)
        assert other == spec
