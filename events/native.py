"""Which form of a compiled unit runs: its mypyc extensions or its sources.

``pip install`` compiles three units with mypyc (setup.py): the scheduling
core (``scheduler.core``, every module), the projector's per-event path (seven
``projector`` modules, setup.py's ``PROJECTOR_MODULES``) and the events'
resource quantities (``events.quantity``, which pydantic calls for every
resource list it validates or serialises).  For each it records the hash of
every source it compiled.  Python's import system prefers an extension module to the ``.py``
beside it, so an edited source would silently lose to its stale extension;
:func:`choose_form`, called by the unit's package ``__init__`` before it
imports any of the unit's modules, therefore loads the unit's sources instead
whenever

* ``TEPHRA_INTERPRETED_CORE=1`` asks for them (for every unit), or
* one of the unit's sources differs from what was compiled, or a module was
  added to a unit that compiles all of its modules (reinstall to compile it).

A unit is all or nothing: its modules form one mypyc group, whose compiled
calls between them bypass the import system, so an edited module must take
the other modules of its unit with it.  Each unit chooses on its own.  Both
forms compute the same results (tests/core/test_compiled_core.py,
tests/projector/test_compiled_projector.py, tests/events/test_compiled_events.py);
the compiled one is faster.  The returned form says which one is in use and
why; bench scripts print it.

This module lives in ``events`` because that is the lowest package with a
compiled unit: every other package may import it, and it imports nothing of
Tephra's.
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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "CompiledUnit", "choose_form", "compiled_state", "loaded_compiled"]

COMPILED = "compiled (mypyc)"
MANIFEST = "compiled_sources.json"


@dataclass(frozen=True, slots=True)
class CompiledUnit:
    """Modules setup.py compiles as one mypyc group, and where its build record is.

    ``package`` is the dotted name of the folder ``root``; ``every_module`` says
    whether setup.py compiles all its modules (then a new module makes the build
    stale) or the ones its build record lists.  Package ``__init__`` modules are
    never compiled.
    """

    package: str
    root: Path
    every_module: bool

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def display(self, relative: str) -> str:
        return f"{self.package.replace('.', '/')}/{relative}"


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of the units it holds as their ``.py`` sources, never as extensions.

    Each unit comes with the modules it may still load compiled (none when the
    unit runs from its sources): an extension left beside a module that the
    current build did not compile (an older build's) is never loaded.
    """

    def __init__(self) -> None:
        self.units: list[tuple[CompiledUnit, frozenset[str]]] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        del path, target
        for unit, compiled in self.units:
            prefix = unit.package + "."
            if not fullname.startswith(prefix):
                continue
            base = unit.root.joinpath(*fullname[len(prefix) :].split("."))
            if (base / "__init__.py").is_file():
                return None  # packages are never compiled: the normal finders load them
            source = base.with_suffix(".py")
            if not source.is_file() or str(source.relative_to(unit.root)) in compiled:
                return None
            return importlib.util.spec_from_file_location(fullname, source)
        return None


def _source_finder() -> _SourceFinder:
    """The one source finder on ``sys.meta_path`` (installed on first use, first in line)."""
    for finder in sys.meta_path:
        if isinstance(finder, _SourceFinder):
            return finder
    finder = _SourceFinder()
    sys.meta_path.insert(0, finder)
    return finder


def _has_extension(unit: CompiledUnit, relative: str) -> bool:
    stem = unit.root / relative[: -len(".py")]
    return any(
        stem.with_name(stem.name + suffix).exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def compiled_state(unit: CompiledUnit) -> tuple[bool, str]:
    """(whether the unit's compiled extensions are current, why not)."""
    try:
        record = json.loads(unit.manifest.read_text())
        recorded: dict[str, str] = record["sources"]
        libraries: list[str] = record["libraries"]
    except FileNotFoundError:
        return False, "not compiled (install with pip to compile it)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"unreadable build record {unit.manifest}: {exc!r}"
    missing = sorted(name for name in recorded if not _has_extension(unit, name))
    missing += [name for name in libraries if importlib.util.find_spec(name) is None]
    if missing:
        return False, f"not compiled (no extension for {missing[0]}: no C compiler at install?)"
    for name in sorted(recorded):
        try:
            digest = hashlib.sha256((unit.root / name).read_bytes()).hexdigest()
        except OSError:
            digest = ""
        if digest != recorded[name]:
            return False, f"{unit.display(name)} changed since it was compiled (reinstall: pip install -e .)"
    if unit.every_module:
        current = {str(p.relative_to(unit.root)) for p in unit.root.rglob("*.py") if p.name != "__init__.py"}
        added = sorted(current - set(recorded))
        if added:
            return False, f"{unit.display(added[0])} is newer than the build (reinstall: pip install -e .)"
    return True, ""


def choose_form(unit: CompiledUnit) -> str:
    """Load the unit's sources unless its compiled form is current; says which form and why.

    Call it before importing any of the unit's modules; later calls report the
    choice already made.
    """
    if unit in _forms:
        return _forms[unit]
    if os.environ.get("TEPHRA_INTERPRETED_CORE", "") == "1":
        compiled, why = False, "TEPHRA_INTERPRETED_CORE=1"
    else:
        compiled, why = compiled_state(unit)
    if compiled:
        form = COMPILED
        if not unit.every_module:  # the modules outside the build load from source
            _source_finder().units.append((unit, _recorded(unit)))
    elif any(_in_unit(unit, module) for module in list(sys.modules.values())):
        # Too late to choose (something imported the unit's modules first): report
        # what is loaded rather than mix both forms.
        form = f"as loaded ({why})"
    else:
        _source_finder().units.append((unit, frozenset()))
        form = f"interpreted: {why}"
    _forms[unit] = form
    return form


def _recorded(unit: CompiledUnit) -> frozenset[str]:
    """The modules the unit's build record lists (read before, by compiled_state)."""
    return frozenset(json.loads(unit.manifest.read_text())["sources"])


def _in_unit(unit: CompiledUnit, module: ModuleType) -> bool:
    """Whether ``module`` is one of the modules the unit may compile."""
    name = getattr(module, "__name__", "")
    return (
        name.startswith(unit.package + ".")
        and name != __name__
        and not hasattr(module, "__path__")  # a package
    )


def loaded_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension rather than its source."""
    return not (module.__file__ or "").endswith(".py")


# Each unit's form, chosen once per process.
_forms: dict[CompiledUnit, str] = {}
