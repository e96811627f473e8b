"""The mypyc-compiled projector (setup.py): same plans as its sources, one unit.

Staleness (an edited source beside its old extension) is checked before the
test session (tests/conftest.py) and tested in tests/core/test_compiled_core.py.
"""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import projector
from tests.compiled_forms import load_setup, run_python


def _require_compiled() -> None:
    if not projector.compiled():
        pytest.skip("the projector is not compiled here (TEPHRA_COMPILE=0 or no C compiler); CI compiles it")


def test_one_unit_one_form() -> None:
    """Every per-event module runs in the form that ``projector.compiled()`` reports."""
    names = [path.removesuffix(".py").replace("/", ".") for path in load_setup().PROJECTOR_MODULES]
    assert "projector.fold" in names  # the module projector.compiled() looks at
    modules = {name: importlib.import_module(name) for name in names}
    loaded = {name: module.__file__.endswith(tuple(EXTENSION_SUFFIXES)) for name, module in modules.items()}
    assert loaded == dict.fromkeys(names, projector.compiled())


def test_the_copy_runs_the_sources(source_copy: Path) -> None:
    out = run_python(
        "-c", "import projector; print(projector.compiled(), projector.fold.__file__)", sources=source_copy
    )
    assert out.split() == ["False", str(source_copy / "projector/fold.py")]


def test_compiled_and_interpreted_plans_are_identical(source_copy: Path) -> None:
    _require_compiled()
    compiled = run_python("-m", "tests.projector.prepare_digest").splitlines()
    interpreted = run_python("-m", "tests.projector.prepare_digest", sources=source_copy).splitlines()
    assert compiled[1].endswith("projector compiled")
    assert interpreted[1].endswith("projector interpreted")
    assert len(compiled[0]) == 64
    # The digest of every plan and the chain heads.
    assert compiled[0] == interpreted[0]
    assert compiled[1].split(";")[0] == interpreted[1].split(";")[0]
