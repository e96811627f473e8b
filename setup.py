"""Build hook: compile the pure scheduling core and the projector's hot path with mypyc.

The project's metadata lives in pyproject.toml; this file only adds the
compiled modules.  mypyc turns type-annotated modules into C extensions with
the same semantics as the sources; the test suite runs both forms
(tests/core/test_compiled_core.py, tests/projector/test_compiled_projector.py,
tests/events/test_compiled_events.py).  Three units, each compiled as its own
mypyc group:

* ``scheduler/core``, every module: about 1.7x faster sessions (bench/session.py);
* the projector's decode + fold + archive + prepare path (:data:`PROJECTOR_MODULES`):
  about 20 % fewer instructions per event (bench/projector.py, docs/projector.md);
* ``events/quantity.py`` (:data:`EVENTS_MODULES`): pydantic calls it for every
  resource list an event holds, when it decodes and when the archive serialises.

* ``TEPHRA_COMPILE_CORE=0`` skips the compilation of all three (pure Python install).
* The extensions are optional: without a C compiler the install still
  succeeds and the sources run.
* Each unit's ``compiled_sources.json`` records the hash of every source
  compiled and the shared library they load; ``events/native.py`` loads a
  unit's sources instead of its extensions when one of them no longer matches
  (an edit since the last install) or an extension is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from setuptools import Extension, setup

CORE = Path("scheduler/core")
PROJECTOR = Path("projector")
# The projector's modules on the per-event path, none of which holds a coroutine.  The
# others (service, migrate, reconstruct, ...) spend their time waiting on Kafka and
# PostgreSQL.  writer and projection keep only the batch's I/O, so they hold coroutines
# and stay Python: a full test run with them compiled died once of a segmentation
# fault while asyncio's debug mode printed a finished task's result, and mypyc's
# coroutines are the youngest part of it.  Their per-event work moved to plan and
# projection_rows to be compiled (docs/projector.md).
PROJECTOR_MODULES = (
    "archive.py", "fold.py", "jsonform.py", "plan.py", "projection_rows.py", "state.py", "storable.py",
)  # fmt: skip
EVENTS = Path("events")
# The rest of events is models (pydantic does their work), the wire format and schemas.
EVENTS_MODULES = ("quantity.py",)
MANIFEST = "compiled_sources.json"


def compiled_units() -> dict[Path, list[Path]]:
    """Each unit's folder -> the modules compiled in it (one mypyc group per unit)."""
    # Package __init__ modules stay interpreted: they choose between the compiled
    # and the source form of the others (events/native.py).
    core = sorted(p for p in CORE.rglob("*.py") if p.name != "__init__.py")
    return {
        CORE: core,
        PROJECTOR: [PROJECTOR / name for name in PROJECTOR_MODULES],
        EVENTS: [EVENTS / name for name in EVENTS_MODULES],
    }


def compile_unit(root: Path, modules: list[Path]) -> list[Extension]:
    # Imported here: a build requirement (pyproject.toml) only needed when compiling.
    from mypyc.build import mypycify  # noqa: PLC0415

    # Only the mypy options compilation needs: the project's strict configuration
    # (pyproject.toml) is enforced by CI's mypy step, and its pydantic plugin is not
    # a build requirement.
    extensions: list[Extension] = mypycify(
        ["--config-file=", "--ignore-missing-imports", *map(str, modules)],
        opt_level="3",
    )
    for extension in extensions:
        extension.optional = True  # no C compiler: install anyway, run the sources
    record = {
        "sources": {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in modules},
        # The shared library every module's extension loads (mypyc compiles a unit's
        # modules as one group): a build that produced the modules' shims but not it
        # must not be taken for compiled.
        "libraries": sorted(e.name for e in extensions if e.name.endswith("__mypyc")),
    }
    (root / MANIFEST).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return extensions


def extensions() -> list[Extension]:
    units = compiled_units()
    if os.environ.get("TEPHRA_COMPILE_CORE", "1") == "0":
        for root in units:
            (root / MANIFEST).unlink(missing_ok=True)
        return []
    return [extension for root, modules in units.items() for extension in compile_unit(root, modules)]


setup(ext_modules=extensions())
