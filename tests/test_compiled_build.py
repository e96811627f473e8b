"""setup.py's build step: mypyc only inside build_ext, and not again for an unchanged tree.

The builds here run in a copy of the project and never compile: what they
check is which way the build goes.  The real compile is CI's install, which
must have compiled every unit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import events
import projector
import scheduler
from tests.compiled_forms import EXTENSION, REPO, STAMP, copy_sources, load_setup

# pyproject.toml's license field needs setuptools 77; pip's build gets it from the build
# requirements, `pip install -e '.[test]'` installs it for these tests.
needs_setuptools = pytest.mark.skipif(
    int(version("setuptools").split(".")[0]) < 77, reason="needs setuptools>=77 (the test extra has it)"
)

_NO_MYPYC = "print('mypyc imported:', any(name.startswith('mypyc') for name in sys.modules))"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's build inputs."""
    copy_sources(tmp_path)
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    return tmp_path


def _setup_py(project: Path, *args: str, compile_env: str | None = None) -> str:
    """stdout of ``setup.py *args`` run in ``project``, then whether it imported mypyc."""
    script = (
        "import runpy, sys; sys.argv = ['setup.py', *sys.argv[1:]];"
        f" runpy.run_path('setup.py', run_name='__main__'); {_NO_MYPYC}"
    )
    env = {k: v for k, v in os.environ.items() if k != "TEPHRA_COMPILE"}
    if compile_env is not None:
        env["TEPHRA_COMPILE"] = compile_env
    result = subprocess.run(  # noqa: S603 - our own interpreter and setup.py
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        check=True,
        timeout=120,
        # No controlling terminal: setup.py also writes its line to /dev/tty when it has one.
        start_new_session=True,
    )
    return result.stdout


def test_ci_runs_every_unit_compiled() -> None:
    if os.environ.get("CI") != "true" or os.environ.get("TEPHRA_COMPILE") == "0":
        pytest.skip("only CI promises a C compiler at install; elsewhere the sources are a valid form")
    assert (scheduler.core_compiled(), projector.compiled(), events.compiled()) == (True, True, True)


@needs_setuptools
def test_metadata_steps_do_not_compile(project: Path) -> None:
    assert _setup_py(project, "--name").splitlines() == ["tephra", "mypyc imported: False"]
    out = _setup_py(project, "-q", "egg_info", "--egg-base", str(project))
    assert out.splitlines()[-1] == "mypyc imported: False"


@needs_setuptools
def test_an_unchanged_tree_is_not_compiled_again(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    setup = load_setup(project)
    sources = setup.source_hashes(setup.compiled_units())
    extensions = ["scheduler.core.session", "0123abcd__mypyc"]
    for path in (project / f"scheduler/core/session{EXTENSION}", project / f"0123abcd__mypyc{EXTENSION}"):
        path.write_bytes(b"")
    record = {"key": setup.build_key(sources), "sources": sources, "extensions": extensions}
    (project / STAMP).write_text(json.dumps(record))

    out = _setup_py(project, "-q", "build_ext", "--inplace")

    assert out.splitlines() == [
        "tephra: compiled modules up to date (mypyc skipped)",
        "mypyc imported: False",
    ]
    assert (project / f"scheduler/core/session{EXTENSION}").exists()


@needs_setuptools
def test_compile_off_removes_the_extensions_an_earlier_build_left(project: Path) -> None:
    leftovers = [
        project / f"scheduler/core/session{EXTENSION}",
        project / f"projector/fold{EXTENSION}",
        project / f"0123abcd__mypyc{EXTENSION}",
        project / STAMP,
    ]
    for path in leftovers:
        path.write_bytes(b"")

    out = _setup_py(project, "-q", "build_ext", "--inplace", compile_env="0")

    assert out.splitlines() == [
        "tephra: TEPHRA_COMPILE=0, nothing compiled: every module runs from its source",
        "mypyc imported: False",
    ]
    assert [path for path in leftovers if path.exists()] == []
