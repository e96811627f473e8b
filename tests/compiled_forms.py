"""The compiled units' two forms, for their tests, and the stale-extension check.

``pip install`` may compile three units with mypyc (setup.py); Python's normal
import then loads their extensions.  The sources are the other form: the tests
run the same code in a subprocess from a copy of the repository's packages that
holds no extension (the ``source_copy`` fixture; tests/conftest.py loads this
module as a plugin), where Python can only find the ``.py`` files.

An in-place build (``pip install -e .``) leaves the extensions beside the
sources, so an edited source would silently lose to its old extension.
:func:`stale_extensions` compares the build stamp setup.py wrote with the
sources at the start of a test session (tests/conftest.py), never at import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
#: What a subprocess may import: Tephra's packages and the tests.
PACKAGES = ("api", "events", "kube", "projector", "replay", "scheduler", "tests")
#: setup.py's record of an in-place build (its STAMP).
STAMP = "mypyc_build.json"
#: The packages holding compiled units (setup.py's EXTENSION_FOLDERS).
EXTENSION_FOLDERS = ("scheduler", "projector", "events")
#: The file suffix of this interpreter's extension modules (what setup.py builds).
EXTENSION = sysconfig.get_config_var("EXT_SUFFIX")


def load_setup(project: Path = REPO) -> ModuleType:
    """``project``'s setup.py as a module (its ``setup()`` call runs only as ``__main__``)."""
    spec = importlib.util.spec_from_file_location("tephra_setup", project / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_sources(target: Path) -> Path:
    """Copy the packages to ``target`` without any extension module; returns ``target``."""
    skip = shutil.ignore_patterns("__pycache__", *(f"*{suffix}" for suffix in EXTENSION_SUFFIXES))
    for package in PACKAGES:
        shutil.copytree(REPO / package, target / package, ignore=skip)
    return target


@pytest.fixture(scope="session")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packages without extensions: every unit's source form (a fixture)."""
    return copy_sources(tmp_path_factory.mktemp("sources"))


def run_python(*args: str, sources: Path | None = None) -> str:
    """stdout of ``python *args``: in the repository as installed, or from ``sources`` (a copy)."""
    env = dict(os.environ)
    cwd = REPO
    if sources is not None:
        # The copy first on the path: Python's import finds its packages before the install's.
        env["PYTHONPATH"] = str(sources)
        cwd = sources
    result = subprocess.run(  # noqa: S603 - our own interpreter and modules
        [sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, check=True, timeout=300
    )
    return result.stdout


def _extension_file(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_name(module.rpartition(".")[2] + EXTENSION)


def stale_extensions(root: Path = REPO) -> list[str]:
    """Why extensions under ``root`` would run code other than the sources (empty: none would)."""
    found = {p for folder in EXTENSION_FOLDERS for p in (root / folder).rglob(f"*{EXTENSION}")}
    found |= set(root.glob(f"*__mypyc{EXTENSION}"))
    stamp = root / STAMP
    if not stamp.exists():
        return [f"{p.relative_to(root)} has no build stamp ({STAMP})" for p in sorted(found)]
    try:
        record = json.loads(stamp.read_text())
        sources: dict[str, str] = record["sources"]
        built = {_extension_file(root, name) for name in record["extensions"]}
    except (ValueError, KeyError, TypeError) as exc:
        return [f"unreadable build stamp {STAMP}: {exc!r}"]
    problems = []
    for name, digest in sorted(sources.items()):
        path = root / name
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(f"{name} changed since it was compiled")
    problems += [f"{p.relative_to(root)} is not from the last build" for p in sorted(found - built)]
    return problems
