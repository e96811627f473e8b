"""Build hook: compile the pure scheduling core (``scheduler/core``) with mypyc.

The project's metadata lives in pyproject.toml; this file only adds the
compiled modules.  mypyc turns the type-annotated core into C extensions
(about 1.7x faster sessions, bench/session.py), with the same semantics as the
sources: the test suite runs both forms (tests/core/test_compiled_core.py).

* ``TEPHRA_COMPILE_CORE=0`` skips the compilation (pure Python install).
* The extensions are optional: without a C compiler the install still
  succeeds and the core runs from its sources.
* ``scheduler/core/compiled_sources.json`` records the hash of every source
  compiled and the shared library they load; ``scheduler/native.py`` loads
  the sources instead of the extensions when a source no longer matches (an
  edit since the last install) or an extension is missing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from setuptools import Extension, setup

CORE = Path("scheduler/core")
MANIFEST = CORE / "compiled_sources.json"


def core_modules() -> list[Path]:
    # Package __init__ modules stay interpreted: the top one chooses between the
    # compiled and the source form of the others.
    return sorted(p for p in CORE.rglob("*.py") if p.name != "__init__.py")


def core_extensions() -> list[Extension]:
    if os.environ.get("TEPHRA_COMPILE_CORE", "1") == "0":
        MANIFEST.unlink(missing_ok=True)
        return []
    # Imported here: a build requirement (pyproject.toml) only needed when compiling.
    from mypyc.build import mypycify  # noqa: PLC0415

    modules = core_modules()
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
        "sources": {str(p.relative_to(CORE)): hashlib.sha256(p.read_bytes()).hexdigest() for p in modules},
        # The shared library every module's extension loads (mypyc compiles the modules
        # as one group): a build that produced the modules' shims but not it must not be
        # taken for compiled.
        "libraries": sorted(e.name for e in extensions if e.name.endswith("__mypyc")),
    }
    MANIFEST.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return extensions


setup(ext_modules=core_extensions())
