"""The mypyc-compiled ``events.quantity`` (setup.py): same results as its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import events
from tests.compiled_forms import run_python

# Every outcome of quantity's functions for the parity table and awkward input, as text:
# the value, or the error's class and message.
_OUTCOMES = """
import json
from events import compiled
from events.quantity import format_resources, parse_quantity, parse_resources
from tests.events.test_quantity import PARITY

def outcome(call, *args):
    try:
        return repr(call(*args))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

values = [value for _, value, _ in PARITY] + [
    "", " 1 ", "1.", "-1", "1Gi ", "0x10", "1e31", "1e-31", "1.5e", "NaN", "١", "8Gi", "2**64",
    True, -1, 1.5, float("nan"), float("inf"), None, [], 2**70,
]
names = ("cpu", "memory", "nvidia.com/gpu", "Bad Name")
rows = [outcome(parse_quantity, name, value) for name in names for value in values]
rows.append(outcome(parse_resources, {"memory": "1Gi", "cpu": "250m", "pods": 3}))
rows.append(outcome(parse_resources, ["cpu"]))
rows.append(outcome(parse_resources, {1: "2"}))
rows.append(outcome(format_resources, {"memory": 2**30, "cpu": 2500, "pods": 0, "cpu2": 1000}))
print(compiled())
print(json.dumps(rows))
"""


def test_the_copy_runs_the_source(source_copy: Path) -> None:
    out = run_python(
        "-c", "import events; print(events.compiled(), events.quantity.__file__)", sources=source_copy
    )
    assert out.split() == ["False", str(source_copy / "events/quantity.py")]


def test_compiled_and_interpreted_quantities_are_identical(source_copy: Path) -> None:
    if not events.compiled():
        pytest.skip(
            "events.quantity is not compiled here (TEPHRA_COMPILE=0 or no C compiler); CI compiles it"
        )
    compiled_form, compiled = run_python("-c", _OUTCOMES).splitlines()
    interpreted_form, interpreted = run_python("-c", _OUTCOMES, sources=source_copy).splitlines()
    assert (compiled_form, interpreted_form) == ("True", "False")
    assert json.loads(compiled) == json.loads(interpreted)
    assert len(json.loads(compiled)) > 100
