"""Kubernetes quantity parity: the integers Kubernetes itself would compute.

cpu is compared with ``Quantity.MilliValue()``, every other resource with
``Quantity.Value()``; both round up to the next whole unit.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from events.models import TaskSpec
from events.quantity import (
    MAX_QUANTITY,
    QuantityError,
    format_quantity,
    format_resources,
    parse_quantity,
    parse_resources,
)

PARITY = [
    # resource, quantity, Tephra units (cpu millicores, else whole base units)
    ("cpu", "500m", 500),
    ("cpu", "0.5", 500),
    ("cpu", ".5", 500),
    ("cpu", "2", 2000),
    ("cpu", 2, 2000),
    ("cpu", 0.25, 250),
    ("cpu", "1e3", 1_000_000),
    ("cpu", "0.1m", 1),  # MilliValue rounds up
    ("cpu", "5n", 1),
    ("cpu", "+1", 1000),
    ("memory", "1G", 10**9),
    ("memory", "1Gi", 2**30),
    ("memory", "1.5Gi", 1_610_612_736),
    ("memory", "1e3", 1000),
    ("memory", "1.5e3", 1500),
    ("memory", "1E3", 1000),  # an exponent, not the exa suffix
    ("memory", "1P", 10**15),  # the peta suffix (exa is beyond the bound: below)
    ("memory", "100Ki", 102_400),
    ("memory", "12Mi", 12_582_912),
    ("memory", "2k", 2000),
    ("memory", "1m", 1),  # a milli-byte rounds up to one byte
    ("memory", "0", 0),
    ("memory", 68_719_476_736, 2**36),
    ("ephemeral-storage", "10Ti", 10 * 2**40),
    ("pods", "110", 110),
    ("nvidia.com/gpu", 8, 8),
    ("nvidia.com/gpu", "8", 8),
]


@pytest.mark.parametrize(("resource", "quantity", "units"), PARITY)
def test_parity_with_kubernetes(resource: str, quantity: str | int | float, units: int) -> None:
    assert parse_quantity(resource, quantity) == units


REJECTED = [
    ("cpu", "-1", "must not be negative"),
    ("cpu", "-500m", "must not be negative"),
    ("memory", "abc", "expected a number"),
    ("memory", "1.5.5", "expected a number"),
    ("memory", "1Gb", "expected a number"),
    ("memory", "1K", "expected a number"),  # Kubernetes spells kilo "k"
    ("memory", "1 Gi", "expected a number"),
    ("memory", "", "expected a number"),
    ("memory", "NaN", "expected a number"),
    ("memory", "\u0663Gi", "expected a number"),  # an Arabic-Indic digit three
    ("cpu", "1.\u0665", "expected a number"),
    ("memory", "1e31", "exponent out of range"),
    ("cpu", True, "boolean"),
    ("cpu", None, "expected a quantity string"),
    ("cpu", [1], "expected a quantity string"),
    ("cpu", float("nan"), "not a finite number"),
    ("cpu", float("inf"), "not a finite number"),
    ("Not A Name", "1", "not a valid resource name"),
    # The bound (events.quantity.MAX_QUANTITY): refused, never saturated.
    ("memory", "1E", "must be below 2^50 base units"),
    ("memory", "1Pi", "must be below 2^50 base units"),
    ("cpu", "100E", "must be below 2^50 millicores"),
    ("nvidia.com/gpu", "1e30", "must be below 2^50"),
    ("memory", 2**63, "must be below 2^50"),
    ("cpu", str(2**50 // 1000 + 1), "must be below 2^50 millicores"),
    ("cpu", f"{2**50}m", "must be below 2^50 millicores"),
]


@pytest.mark.parametrize(("resource", "quantity", "why"), REJECTED)
def test_rejected_quantity_names_resource_and_value(resource: str, quantity: object, why: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity(resource, quantity)  # type: ignore[arg-type]

    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.resource, repr(error.value)) == (resource, repr(quantity))  # repr: nan != nan
    assert str(error).startswith(f"invalid quantity for {resource!r}: {quantity!r} (")
    assert why in error.why


@given(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, MAX_QUANTITY // 1000 - 1))
def test_canonical_fast_path_agrees_with_exact_parsing(resource: str, amount: int) -> None:
    exact = parse_quantity(resource, f"{amount}.0")  # not canonical: takes the exact-fraction path

    assert parse_quantity(resource, str(amount)) == exact
    assert parse_quantity(resource, amount) == exact
    if resource == "cpu":
        assert parse_quantity("cpu", f"{amount}m") == parse_quantity("cpu", f"{amount}.0m")


def test_resource_list_is_parsed_whole_and_sorted() -> None:
    parsed = parse_resources({"nvidia.com/gpu": 8, "memory": "64Gi", "cpu": "7500m"})

    assert parsed == {"cpu": 7500, "memory": 64 * 2**30, "nvidia.com/gpu": 8}
    assert list(parsed) == ["cpu", "memory", "nvidia.com/gpu"]
    assert parse_resources(None) == {}


def test_a_resource_list_must_be_a_mapping() -> None:
    with pytest.raises(QuantityError, match=r"invalid quantity for 'resources': '8Gi' \(expected a mapping"):
        parse_resources("8Gi")


def test_canonical_form_round_trips() -> None:
    units = {"cpu": 7500, "memory": 64 * 2**30, "nvidia.com/gpu": 8, "pods": 0}

    assert format_resources(units) == {
        "cpu": "7500m",
        "memory": "68719476736",
        "nvidia.com/gpu": "8",
        "pods": "0",
    }
    assert parse_resources(format_resources(units)) == units
    assert format_quantity("cpu", 2000) == "2"


def test_models_reject_a_bad_quantity_with_its_resource() -> None:
    with pytest.raises(ValidationError) as caught:
        TaskSpec(name="worker", replicas=1, resources={"cpu": "lots"})

    (error,) = caught.value.errors()
    assert error["loc"] == ("resources",)
    assert isinstance(error["ctx"]["error"], QuantityError)
    assert "invalid quantity for 'cpu': 'lots'" in error["msg"]
