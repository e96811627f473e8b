"""The mypyc-compiled ``events.quantity`` (setup.py, events/native.py): same results, reported form."""

from __future__ import annotations

import json
import os

import pytest

import events
from events import native, quantity
from tests.compiled_forms import run_python

# Every outcome of quantity's functions for the parity table and awkward input, as text:
# the value, or the error's class and message.
_OUTCOMES = """
import json
from events import EVENTS_FORM
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
print(EVENTS_FORM)
print(json.dumps(rows))
"""


def test_the_reported_form_is_the_loaded_one() -> None:
    compiled = native.loaded_compiled(quantity)
    assert compiled == events.EVENTS_FORM.startswith("compiled"), events.EVENTS_FORM


def test_ci_runs_the_compiled_quantities() -> None:
    if os.environ.get("CI") != "true" or os.environ.get("TEPHRA_COMPILE_CORE") == "0":
        pytest.skip("only CI promises a C compiler at install; elsewhere the sources are a valid form")
    assert native.loaded_compiled(quantity), events.EVENTS_FORM


def test_interpreted_form_on_request() -> None:
    out = run_python("-c", "import events; print(events.EVENTS_FORM)", interpreted=True)
    assert out.strip() == "interpreted: TEPHRA_INTERPRETED_CORE=1"


def test_compiled_and_interpreted_quantities_are_identical() -> None:
    if not native.loaded_compiled(quantity):
        pytest.skip(f"events.quantity is not compiled here ({events.EVENTS_FORM}); CI compiles it")
    compiled_form, compiled = run_python("-c", _OUTCOMES, interpreted=False).splitlines()
    interpreted_form, interpreted = run_python("-c", _OUTCOMES, interpreted=True).splitlines()
    assert (compiled_form, interpreted_form) == ("compiled (mypyc)", "interpreted: TEPHRA_INTERPRETED_CORE=1")
    assert json.loads(compiled) == json.loads(interpreted)
    assert len(json.loads(compiled)) > 100


def test_the_real_build_record_lists_quantity() -> None:
    if not events.EVENTS.manifest.exists():
        pytest.skip(f"events.quantity is not compiled here ({events.EVENTS_FORM})")
    record = json.loads(events.EVENTS.manifest.read_text())
    assert sorted(record["sources"]) == ["quantity.py"]
