"""The mypyc-compiled core (setup.py): same sessions as its sources, and never stale."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import scheduler
from tests.compiled_forms import EXTENSION, REPO, STAMP, run_python, stale_extensions

_DIGEST = "import scheduler, tests.core.session_digest as d; print(scheduler.core_compiled(), d.digest())"


def _require_compiled() -> None:
    if not scheduler.core_compiled():
        pytest.skip("the core is not compiled here (TEPHRA_COMPILE=0 or no C compiler); CI compiles it")


def test_the_copy_runs_the_sources(source_copy: Path) -> None:
    out = run_python("-c", "import scheduler.core.session as s; print(s.__file__)", sources=source_copy)
    assert out.strip() == str(source_copy / "scheduler/core/session.py")


def test_compiled_and_interpreted_sessions_are_byte_identical(source_copy: Path) -> None:
    _require_compiled()
    compiled = run_python("-c", _DIGEST).split()
    interpreted = run_python("-c", _DIGEST, sources=source_copy).split()
    assert compiled[0] == "True"
    assert interpreted[0] == "False"
    assert len(compiled[1]) == 64
    assert compiled[1] == interpreted[1]


def test_conformance_output_is_byte_identical_in_both_forms(source_copy: Path) -> None:
    _require_compiled()
    scenarios = sorted(map(str, (REPO / "tests/conformance/scenarios").glob("*.yaml")))
    args = ("-m", "api.cli", "simulate", *scenarios, "--format", "json")
    compiled = run_python(*args)
    assert compiled
    assert compiled == run_python(*args, sources=source_copy)


# ---------------------------------------------------------------- staleness, on a fake build


@pytest.fixture
def fake_build(tmp_path: Path) -> Path:
    """A tree with two compiled core modules, their shared library and the stamp setup.py writes."""
    core = tmp_path / "scheduler/core"
    (core / "plugins").mkdir(parents=True)
    names = {
        "scheduler/core/session.py": "scheduler.core.session",
        "scheduler/core/plugins/gang.py": "scheduler.core.plugins.gang",
    }
    for source, module in names.items():
        path = tmp_path / source
        path.write_text(f"# {module}\n")
        path.with_name(path.stem + EXTENSION).write_bytes(b"")
    (tmp_path / ("0123abcd__mypyc" + EXTENSION)).write_bytes(b"")
    record = {
        "key": "k",
        "sources": {n: hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in names},
        "extensions": [*names.values(), "0123abcd__mypyc"],
    }
    (tmp_path / STAMP).write_text(json.dumps(record))
    return tmp_path


def test_a_current_build_is_not_stale(fake_build: Path) -> None:
    assert stale_extensions(fake_build) == []


def test_an_edited_source_is_stale(fake_build: Path) -> None:
    (fake_build / "scheduler/core/plugins/gang.py").write_text("# edited\n")
    assert stale_extensions(fake_build) == ["scheduler/core/plugins/gang.py changed since it was compiled"]


def test_a_deleted_source_is_stale(fake_build: Path) -> None:
    (fake_build / "scheduler/core/session.py").unlink()
    assert stale_extensions(fake_build) == ["scheduler/core/session.py changed since it was compiled"]


def test_an_extension_the_build_did_not_make_is_stale(fake_build: Path) -> None:
    (fake_build / "scheduler/core/extra.py").write_text("")
    (fake_build / ("scheduler/core/extra" + EXTENSION)).write_bytes(b"")
    assert stale_extensions(fake_build) == [f"scheduler/core/extra{EXTENSION} is not from the last build"]


def test_extensions_without_a_stamp_are_stale(fake_build: Path) -> None:
    (fake_build / STAMP).unlink()
    assert stale_extensions(fake_build) == [
        f"0123abcd__mypyc{EXTENSION} has no build stamp ({STAMP})",
        f"scheduler/core/plugins/gang{EXTENSION} has no build stamp ({STAMP})",
        f"scheduler/core/session{EXTENSION} has no build stamp ({STAMP})",
    ]


def test_an_unreadable_stamp_is_reported(fake_build: Path) -> None:
    (fake_build / STAMP).write_text('{"sources": {}}')
    [problem] = stale_extensions(fake_build)
    assert problem.startswith(f"unreadable build stamp {STAMP}")


def test_a_tree_without_extensions_is_not_stale(tmp_path: Path) -> None:
    (tmp_path / "scheduler/core").mkdir(parents=True)
    (tmp_path / "scheduler/core/session.py").write_text("")
    assert stale_extensions(tmp_path) == []
