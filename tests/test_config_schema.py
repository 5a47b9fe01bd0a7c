"""schema: configuration dataclasses read strictly from YAML-shaped dicts, and written back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from rlvr_factory.schema import (
    SET_BY_RUN, ConfigError, Fraction, PositiveInt, describe, field_docs, parse, to_dict,
)


@dataclass(frozen=True)
class Inner:
    steps: PositiveInt = 3  # optimizer steps
    band: tuple[Fraction, Fraction] = (0.1, 0.9)  # low, high


@dataclass(frozen=True)
class Outer:
    lr: float = 1e-3  # learning rate
    kind: Literal["a", "b"] = "a"  # which one
    budget: int | None = None  # null: unbounded
    names: list[str] = field(default_factory=lambda: [
        "x", "y"])  # names, written over two lines
    inner: Inner = field(default_factory=Inner)  # a nested block
    seed: int = field(default=0, metadata=SET_BY_RUN)  # set by the run

    def __post_init__(self) -> None:
        if self.kind == "b" and self.budget is None:
            raise ValueError("kind b needs a budget")


def test_a_block_reads_its_keys_converts_numbers_and_fills_the_rest_with_defaults():
    config = parse(Outer, {"lr": "1e-4", "inner": {"steps": 5}, "budget": 7})  # YAML 1.1 reads 1e-4 as a string
    assert config == Outer(lr=1e-4, budget=7, inner=Inner(steps=5))
    assert to_dict(config) == {"lr": 1e-4, "kind": "a", "budget": 7, "names": ["x", "y"],
                               "inner": {"steps": 5, "band": [0.1, 0.9]}}  # no run-set seed
    assert parse(Outer, to_dict(config)) == config


@pytest.mark.parametrize(("data", "key", "says"), [
    ({"lrr": 1}, "lrr", "unknown key (did you mean lr?); valid keys: lr, kind, budget, names, inner"),
    ({"seed": 3}, "seed", "unknown key"),  # the run sets it
    ({"lr": "abc"}, "lr", "expected float, got 'abc'"),
    ({"lr": True}, "lr", "expected float, got True"),
    ({"kind": "c"}, "kind", "must be one of 'a', 'b'"),
    ({"budget": 2.5}, "budget", "expected int or null, got 2.5"),
    ({"names": ["x", 3]}, "names[1]", "expected string, got 3"),
    ({"inner": {"steps": 0}}, "inner.steps", "must be >= 1, got 0"),
    ({"inner": {"band": [0.1]}}, "inner.band", "expected 2 values"),
    ({"inner": {"band": [0.1, 1.5]}}, "inner.band[1]", "must be >= 0 and <= 1, got 1.5"),
    ({"inner": 3}, "inner", "expected a mapping of Inner's keys"),
    ({"kind": "b"}, "cfg", "kind b needs a budget"),  # the dataclass's own checks, under the block's key
])
def test_a_wrong_key_or_value_is_named_with_what_is_allowed(data, key, says):
    with pytest.raises(ConfigError) as error:
        parse(Outer, data, "cfg" if key == "cfg" else "")
    assert error.value.key == key and says in error.value.problem


def test_types_read_as_a_yaml_reader_expects_and_docs_come_from_field_comments():
    assert describe(PositiveInt) == "int >= 1"
    assert describe(Literal["a", "b"]) == "one of a, b"
    assert describe(int | None) == "int or null"
    assert field_docs(Outer)["names"] == "names, written over two lines"
    assert field_docs(Outer)["inner"] == "a nested block"


@dataclass(frozen=True)
class Knobs:
    timeout_s: float = 1.0  # a time limit
    workers: int = 1  # a worker count
    backoff_seconds: float = 0.0  # a wait: 0 means none
    scale: float = 1.0  # any number
    extra: dict[str, Any] = field(default_factory=dict)  # an untyped block


@pytest.mark.parametrize(("data", "key", "says"), [
    ({"scale": float("nan")}, "scale", "must be a finite number, got nan"),
    ({"scale": "-inf"}, "scale", "must be a finite number, got -inf"),
    ({"timeout_s": 0}, "timeout_s", "must be > 0 (a time limit or a worker count), got 0.0"),
    ({"timeout_s": -1.5}, "timeout_s", "must be > 0"),
    ({"workers": 0}, "workers", "must be > 0"),
    ({"extra": {"deep": [{"x": float("inf")}]}}, "extra.deep[0].x", "must be a finite number"),
    ({"extra": {"limits": {"cpu_s": -1}}}, "extra.limits.cpu_s", "must be > 0"),
    ({"extra": {"generation": {"timeout_seconds": 0}}}, "extra.generation.timeout_seconds", "must be > 0"),
])
def test_every_number_is_finite_and_time_limits_and_worker_counts_are_positive(data, key, says):
    with pytest.raises(ConfigError) as error:
        parse(Knobs, data)
    assert error.value.key == key and says in error.value.problem


def test_zero_stays_allowed_where_it_means_none():
    assert parse(Knobs, {"backoff_seconds": 0, "scale": 0, "extra": {"retries": 0, "flag": True}}).scale == 0.0
