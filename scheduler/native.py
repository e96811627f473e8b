"""Which form of the scheduling core runs: mypyc-compiled extensions or the sources.

``pip install`` compiles ``scheduler/core`` with mypyc (setup.py) and records
the hash of every source it compiled.  Python's import system prefers an
extension module to the ``.py`` beside it, so an edited source would silently
lose to its stale extension; :func:`choose_core_form` (run when the
``scheduler`` package is imported, before any core module) therefore loads
the sources instead whenever

* ``TEPHRA_INTERPRETED_CORE=1`` asks for them, or
* a source differs from what was compiled (reinstall to compile it again).

Both forms compute byte-identical sessions (tests/core/test_compiled_core.py);
the compiled one is faster.  :data:`CORE_FORM` says which one is in use and
why; bench scripts print it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["CORE_FORM", "choose_core_form", "core_compiled"]

_CORE = Path(__file__).resolve().parent / "core"
_MANIFEST = _CORE / "compiled_sources.json"
_PREFIX = "scheduler.core."


class _CoreSourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``scheduler.core.*`` modules as their ``.py`` sources, never as extensions."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        del path, target
        if not fullname.startswith(_PREFIX):
            return None
        base = _CORE.joinpath(*fullname[len(_PREFIX) :].split("."))
        if (base / "__init__.py").is_file():
            return None  # packages are never compiled: the normal finders load them
        source = base.with_suffix(".py")
        if not source.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def _has_extension(relative: str) -> bool:
    stem = _CORE / relative[: -len(".py")]
    return any(
        stem.with_name(stem.name + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _compiled_state() -> tuple[bool, str]:
    """(whether the compiled extensions are current, why not)."""
    try:
        record = json.loads(_MANIFEST.read_text())
        recorded: dict[str, str] = record["sources"]
        libraries: list[str] = record["libraries"]
    except FileNotFoundError:
        return False, "not compiled (install with pip to compile it)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"unreadable build record {_MANIFEST}: {exc!r}"
    missing = sorted(name for name in recorded if not _has_extension(name))
    missing += [name for name in libraries if importlib.util.find_spec(name) is None]
    if missing:
        return False, f"not compiled (no extension for {missing[0]}: no C compiler at install?)"
    for name in sorted(recorded):
        try:
            digest = hashlib.sha256((_CORE / name).read_bytes()).hexdigest()
        except OSError:
            digest = ""
        if digest != recorded[name]:
            return False, f"scheduler/core/{name} changed since it was compiled (reinstall: pip install -e .)"
    current = {str(p.relative_to(_CORE)) for p in _CORE.rglob("*.py") if p.name != "__init__.py"}
    added = sorted(current - set(recorded))
    if added:
        return False, f"scheduler/core/{added[0]} is newer than the build (reinstall: pip install -e .)"
    return True, ""


def choose_core_form() -> str:
    """Load the core's sources unless its compiled form is current; says which form and why."""
    if any(isinstance(finder, _CoreSourceFinder) for finder in sys.meta_path):
        return CORE_FORM
    if os.environ.get("TEPHRA_INTERPRETED_CORE", "") == "1":
        compiled, why = False, "TEPHRA_INTERPRETED_CORE=1"
    else:
        compiled, why = _compiled_state()
    if compiled:
        return "compiled (mypyc)"
    if any(name.startswith(_PREFIX) for name in sys.modules):
        # Too late to choose (something imported core modules before this package):
        # report what is loaded rather than mix both forms.
        return f"as loaded ({why})"
    sys.meta_path.insert(0, _CoreSourceFinder())
    return f"interpreted: {why}"


def core_compiled() -> bool:
    """Whether the loaded core modules are the compiled extensions."""
    from scheduler.core import session  # noqa: PLC0415 - the question is about what this loads

    return not (session.__file__ or "").endswith(".py")


CORE_FORM = choose_core_form()
