"""The mypyc-compiled core (setup.py, events/native.py): same sessions, and never stale."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import scheduler
from events import native
from events.native import CompiledUnit
from scheduler.native import core_compiled
from tests.compiled_forms import EXTENSION, REPO, run_python


def test_the_reported_form_is_the_loaded_one() -> None:
    assert core_compiled() == scheduler.CORE_FORM.startswith("compiled"), scheduler.CORE_FORM


def test_ci_runs_the_compiled_core() -> None:
    if os.environ.get("CI") != "true" or os.environ.get("TEPHRA_COMPILE_CORE") == "0":
        pytest.skip("only CI promises a C compiler at install; elsewhere the sources are a valid form")
    assert core_compiled(), scheduler.CORE_FORM


def test_interpreted_form_on_request() -> None:
    assert (
        run_python("-c", "import scheduler; print(scheduler.CORE_FORM)", interpreted=True).strip()
        == "interpreted: TEPHRA_INTERPRETED_CORE=1"
    )


def test_compiled_and_interpreted_sessions_are_byte_identical() -> None:
    if not core_compiled():
        pytest.skip(f"the core is not compiled here ({scheduler.CORE_FORM}); CI compiles it")
    compiled = run_python("-m", "tests.core.session_digest", interpreted=False)
    interpreted = run_python("-m", "tests.core.session_digest", interpreted=True)
    assert len(compiled.strip()) == 64
    assert compiled == interpreted


def test_conformance_output_is_byte_identical_in_both_forms() -> None:
    if not core_compiled():
        pytest.skip(f"the core is not compiled here ({scheduler.CORE_FORM}); CI compiles it")
    scenarios = sorted(map(str, (REPO / "tests/conformance/scenarios").glob("*.yaml")))
    args = ("-m", "api.cli", "simulate", *scenarios, "--format", "json")
    compiled = run_python(*args, interpreted=False)
    assert compiled
    assert compiled == run_python(*args, interpreted=True)


# ---------------------------------------------------------------- staleness, on a fake build


@pytest.fixture
def fake_core(tmp_path: Path) -> CompiledUnit:
    """A core folder with two compiled modules and the build record setup.py writes."""
    (tmp_path / "plugins").mkdir()
    for name in ("session.py", "plugins/gang.py"):
        source = tmp_path / name
        source.write_text(f"# {name}\n")
        source.with_name(source.stem + EXTENSION).write_bytes(b"")
    (tmp_path / "__init__.py").write_text("")
    sources = {
        n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("session.py", "plugins/gang.py")
    }
    # A library that importlib finds (any importable top-level module will do).
    record = {"sources": sources, "libraries": ["json"]}
    (tmp_path / "compiled_sources.json").write_text(json.dumps(record))
    return CompiledUnit("scheduler.core", tmp_path, every_module=True)


def test_a_current_build_is_used(fake_core: CompiledUnit) -> None:
    assert native.compiled_state(fake_core) == (True, "")


def test_an_edited_source_is_loaded_from_source(fake_core: CompiledUnit) -> None:
    (fake_core.root / "plugins/gang.py").write_text("# edited\n")
    compiled, why = native.compiled_state(fake_core)
    assert not compiled
    assert why == "scheduler/core/plugins/gang.py changed since it was compiled (reinstall: pip install -e .)"


def test_a_new_module_is_loaded_from_source(fake_core: CompiledUnit) -> None:
    (fake_core.root / "extra.py").write_text("")
    assert native.compiled_state(fake_core) == (
        False,
        "scheduler/core/extra.py is newer than the build (reinstall: pip install -e .)",
    )


def test_a_missing_extension_means_sources(fake_core: CompiledUnit) -> None:
    (fake_core.root / ("session" + EXTENSION)).unlink()
    compiled, why = native.compiled_state(fake_core)
    assert not compiled
    assert "no extension for session.py" in why


def test_a_missing_shared_library_means_sources(fake_core: CompiledUnit) -> None:
    record = json.loads((fake_core.root / "compiled_sources.json").read_text())
    record["libraries"] = ["tephra_no_such_library__mypyc"]
    (fake_core.root / "compiled_sources.json").write_text(json.dumps(record))
    compiled, why = native.compiled_state(fake_core)
    assert not compiled
    assert "no extension for tephra_no_such_library__mypyc" in why


def test_a_build_record_of_another_shape_means_sources(fake_core: CompiledUnit) -> None:
    (fake_core.root / "compiled_sources.json").write_text('{"session.py": "abc"}')
    compiled, why = native.compiled_state(fake_core)
    assert not compiled
    assert why.startswith("unreadable build record")


def test_no_build_record_means_sources(fake_core: CompiledUnit) -> None:
    (fake_core.root / "compiled_sources.json").unlink()
    assert native.compiled_state(fake_core) == (False, "not compiled (install with pip to compile it)")


def test_the_source_finder_skips_packages_and_other_modules(fake_core: CompiledUnit) -> None:
    finder = native._SourceFinder()
    finder.units.append((fake_core, frozenset()))
    spec = finder.find_spec("scheduler.core.plugins.gang", None)
    assert spec is not None
    assert spec.origin == str(fake_core.root / "plugins/gang.py")
    assert finder.find_spec("scheduler.core.plugins", None) is None
    assert finder.find_spec("scheduler.service.loop", None) is None
    assert finder.find_spec("scheduler.core.absent", None) is None
