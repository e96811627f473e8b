"""The mypyc-compiled projector (setup.py, events/native.py): same plans, and never stale.

The core's test (tests/core/test_compiled_core.py) covers the guard's checks
in detail; the same code guards the projector's unit, which differs in that
only the modules its build record lists are compiled.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
from pathlib import Path

import pytest

import projector
from events import native
from events.native import CompiledUnit
from tests.compiled_forms import EXTENSION, run_python

COMPILED_MODULES = ("archive", "fold", "plan", "projection_rows", "state", "storable")


def test_the_reported_form_is_the_loaded_one() -> None:
    compiled = projector.projector_compiled()
    assert compiled == projector.PROJECTOR_FORM.startswith("compiled"), projector.PROJECTOR_FORM
    # One unit: all of its modules in the same form.
    modules = {name: importlib.import_module(f"projector.{name}") for name in COMPILED_MODULES}
    loaded = {name: native.loaded_compiled(module) for name, module in modules.items()}
    assert loaded == dict.fromkeys(COMPILED_MODULES, compiled)


def test_ci_runs_the_compiled_projector() -> None:
    if os.environ.get("CI") != "true" or os.environ.get("TEPHRA_COMPILE_CORE") == "0":
        pytest.skip("only CI promises a C compiler at install; elsewhere the sources are a valid form")
    assert projector.projector_compiled(), projector.PROJECTOR_FORM


def test_interpreted_form_on_request() -> None:
    out = run_python("-c", "import projector; print(projector.PROJECTOR_FORM)", interpreted=True)
    assert out.strip() == "interpreted: TEPHRA_INTERPRETED_CORE=1"


def test_compiled_and_interpreted_plans_are_identical() -> None:
    if not projector.projector_compiled():
        pytest.skip(f"the projector is not compiled here ({projector.PROJECTOR_FORM}); CI compiles it")
    compiled = run_python("-m", "tests.projector.prepare_digest", interpreted=False).splitlines()
    interpreted = run_python("-m", "tests.projector.prepare_digest", interpreted=True).splitlines()
    assert compiled[1].endswith("projector compiled (mypyc)")
    assert interpreted[1].endswith("projector interpreted: TEPHRA_INTERPRETED_CORE=1")
    assert len(compiled[0]) == 64
    # The digest of every plan and the chain heads.
    assert compiled[0] == interpreted[0]
    assert compiled[1].split(";")[0] == interpreted[1].split(";")[0]


# ---------------------------------------------------------------- staleness, on a fake build


@pytest.fixture
def fake_projector(tmp_path: Path) -> CompiledUnit:
    """A projector folder with two compiled modules of three, and its build record."""
    for name in ("fold.py", "state.py", "service.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    for name in ("fold", "state"):
        (tmp_path / (name + EXTENSION)).write_bytes(b"")
    (tmp_path / "__init__.py").write_text("")
    sources = {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("fold.py", "state.py")}
    record = {"sources": sources, "libraries": ["json"]}
    (tmp_path / "compiled_sources.json").write_text(json.dumps(record))
    return CompiledUnit("projector", tmp_path, every_module=False)


def test_a_current_build_is_used(fake_projector: CompiledUnit) -> None:
    assert native.compiled_state(fake_projector) == (True, "")


def test_an_edited_compiled_source_is_loaded_from_source(fake_projector: CompiledUnit) -> None:
    (fake_projector.root / "state.py").write_text("# edited\n")
    assert native.compiled_state(fake_projector) == (
        False,
        "projector/state.py changed since it was compiled (reinstall: pip install -e .)",
    )


def test_modules_that_are_not_compiled_do_not_matter(fake_projector: CompiledUnit) -> None:
    (fake_projector.root / "service.py").write_text("# edited\n")
    (fake_projector.root / "extra.py").write_text("")
    assert native.compiled_state(fake_projector) == (True, "")


def test_the_real_build_record_lists_the_compiled_modules() -> None:
    record_path = projector.PROJECTOR.manifest
    if not record_path.exists():
        pytest.skip(f"the projector is not compiled here ({projector.PROJECTOR_FORM})")
    record = json.loads(record_path.read_text())
    assert sorted(record["sources"]) == [f"{name}.py" for name in COMPILED_MODULES]


@pytest.fixture
def installed_copy(tmp_path: Path) -> Path:
    """A copy of the installed, compiled ``projector`` folder under ``tmp_path`` (returned)."""
    if not projector.projector_compiled():
        pytest.skip(f"the projector is not compiled here ({projector.PROJECTOR_FORM}); CI compiles it")
    copy = tmp_path / "projector"
    copy.mkdir()
    for path in projector.PROJECTOR.root.iterdir():
        if path.is_file():
            (copy / path.name).write_bytes(path.read_bytes())
    return copy


def test_an_edited_source_is_never_shadowed_by_its_stale_extension(installed_copy: Path) -> None:
    """End to end, in a copy of the installed tree: edit fold.py, the edit runs."""
    copy = installed_copy
    fold = copy / "fold.py"
    fold.write_text(fold.read_text() + "\nEDITED = True\n")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import projector, projector.fold as f;"
        " print(projector.PROJECTOR_FORM); print(getattr(f, 'EDITED', False), f.__file__)"
    )
    form, loaded = run_python("-c", script, str(copy.parent), interpreted=False).splitlines()
    assert form == (
        "interpreted: projector/fold.py changed since it was compiled (reinstall: pip install -e .)"
    )
    assert loaded == f"True {fold}"


def test_an_extension_of_a_module_the_build_did_not_compile_is_never_loaded(installed_copy: Path) -> None:
    """In a copy of the installed tree, a stray extension (an older build's) beside errors.py."""
    copy = installed_copy
    (copy / ("errors" + EXTENSION)).write_bytes(b"not a shared library")  # would fail to load
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import projector, projector.errors as s;"
        " import projector.fold as f; print(projector.PROJECTOR_FORM); print(s.__file__); print(f.__file__)"
    )
    form, errors, fold = run_python("-c", script, str(copy.parent), interpreted=False).splitlines()
    assert form == "compiled (mypyc)"
    assert errors == str(copy / "errors.py")
    assert fold == str(copy / ("fold" + EXTENSION))
