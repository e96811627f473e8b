"""Build hook: compile the scheduling core and the per-event hot paths with mypyc, once.

The project's metadata lives in pyproject.toml; this file only adds a build
step.  Importing it is cheap: pip's metadata steps (requirements, egg_info)
never compile.  mypyc runs inside ``build_ext`` (:class:`BuildMypyc`), the step
that builds extensions, and prints one line saying what it compiles.  Three
units, each compiled as its own mypyc group (edit the tuples below to change
what is compiled):

* ``scheduler/core``, every module but the packages' ``__init__``: about 1.7x
  faster sessions (bench/session.py);
* the projector's decode + fold + archive + prepare path
  (:data:`PROJECTOR_MODULES`): about 20 % fewer instructions per event;
* the events' per-event helpers (:data:`EVENTS_MODULES`): the canonical
  encoder and its JSON form, which the projector runs for every event it
  archives, and the resource quantities, which pydantic calls for every
  resource list an event holds.

Python's normal import picks an extension over the ``.py`` beside it; nothing
at import time chooses or checks.  Hence:

* ``TEPHRA_COMPILE=0`` compiles nothing, and an in-place build (``pip install -e``)
  then removes the extensions an earlier build left beside the sources.
* The extensions are optional: without a C compiler the install still
  succeeds and the sources run.
* An in-place build writes :data:`STAMP` beside the extensions: the build's key
  (the compiled sources, this file, Python and mypy versions), the SHA-256 of
  every compiled source and the extensions built.  The next in-place build
  with the same key keeps the extensions and compiles nothing, so the
  README's two ``pip install -e`` commands compile once.  tests/conftest.py
  reads the per-source hashes to stop a test run whose extensions are older
  than their sources.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import time
from importlib.metadata import version
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# One tuple per unit: the modules compiled together as one mypyc group.
# scheduler/core compiles every module it has (listed at build time, see core_modules).
CORE = "scheduler/core"
# The projector's modules on the per-event path, none of which holds a coroutine.  The
# others (service, migrate, reconstruct, ...) spend their time waiting on Kafka and
# PostgreSQL.  writer and projection keep only the batch's I/O, so they hold coroutines
# and stay Python: a full test run with them compiled died once of a segmentation
# fault while asyncio's debug mode printed a finished task's result, and mypyc's
# coroutines are the youngest part of it.
PROJECTOR_MODULES = (
    "projector/archive.py",
    "projector/fold.py",
    "projector/plan.py",
    "projector/projection_rows.py",
    "projector/state_json.py",
    "projector/state.py",
    "projector/storable.py",
)
# The rest of events is models (pydantic does their work), the wire format and schemas.
EVENTS_MODULES = ("events/canonical.py", "events/jsonform.py", "events/quantity.py")

#: The in-place build's record (gitignored), read back by the next build and by tests/conftest.py.
STAMP = Path("mypyc_build.json")
#: Where in-place extensions of the compiled units can lie (a stale one would load).
EXTENSION_FOLDERS = ("scheduler", "projector", "events")
#: Measured on a 2-core machine (compiling the three units is most of an install).
ESTIMATE = "about 2 minutes on 2 cores"
SWITCH = "TEPHRA_COMPILE"


def core_modules() -> tuple[str, ...]:
    # Package __init__ modules stay interpreted: they hold no per-session work.
    return tuple(sorted(str(p) for p in Path(CORE).rglob("*.py") if p.name != "__init__.py"))


def compiled_units() -> dict[str, tuple[str, ...]]:
    """Each unit's short name -> its modules (one mypyc group per unit)."""
    return {
        "scheduler/core": core_modules(),
        "projector per-event path": PROJECTOR_MODULES,
        "events per-event helpers": EVENTS_MODULES,
    }


def source_hashes(units: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {
        module: hashlib.sha256(Path(module).read_bytes()).hexdigest()
        for modules in units.values()
        for module in modules
    }


def build_key(sources: dict[str, str]) -> str:
    """What a build's output depends on: the compiled sources, this file, Python, mypy."""
    key = {
        "sources": sources,
        "setup.py": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "python": sys.version,
        "extension suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "mypy": version("mypy"),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def tell(line: str) -> None:
    """Print ``line`` where the user sees it.

    pip hides a build's output unless it fails or runs with ``-v``; the
    controlling terminal, when there is one, still shows the line.
    """
    print(line, flush=True)
    if sys.stdout.isatty():
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write("\n" + line + "\n")  # off the line of pip's spinner
    except OSError:
        pass  # no terminal (CI, containers): pip -v shows the printed line


def mypyc_extensions(modules: tuple[str, ...]) -> list[Extension]:
    # Imported here: a build requirement (pyproject.toml) only needed when compiling.
    from mypyc.build import mypycify  # noqa: PLC0415

    # Only the mypy options compilation needs: the project's strict configuration
    # (pyproject.toml) is enforced by CI's mypy step, and its pydantic plugin is not
    # a build requirement.
    extensions: list[Extension] = mypycify(
        ["--config-file=", "--ignore-missing-imports", *modules], opt_level="3"
    )
    for extension in extensions:
        extension.optional = True  # no C compiler: install anyway, run the sources
    return extensions


class BuildMypyc(build_ext):
    """``build_ext`` that runs mypyc here, and in place only when the compiled sources changed.

    setuptools prepares a command's extensions when it finalizes it, which pip's
    metadata steps already do (with the placeholder); the extensions mypyc
    makes are built by a fresh ``build_ext`` with this one's options.
    """

    builder: build_ext | None = None

    def run(self) -> None:
        if os.environ.get(SWITCH, "1") == "0":
            self.distribution.ext_modules = []
            if self.inplace:
                self.remove_in_place_extensions()
            tell(f"tephra: {SWITCH}=0, nothing compiled: every module runs from its source")
            return
        units = compiled_units()
        sources = source_hashes(units)
        key = build_key(sources)
        if self.inplace and self.up_to_date(key):
            tell("tephra: compiled modules up to date (mypyc skipped)")
            return
        count = sum(map(len, units.values()))
        tell(
            f"tephra: compiling {count} modules with mypyc ({', '.join(units)}), {ESTIMATE}; {SWITCH}=0 skips"
        )
        start = time.monotonic()
        self.distribution.ext_modules = [e for modules in units.values() for e in mypyc_extensions(modules)]
        if self.inplace:
            self.remove_in_place_extensions()
        self.builder = builder = build_ext(self.distribution)
        for option in ("inplace", "editable_mode", "build_lib", "build_temp", "force", "parallel"):
            setattr(builder, option, getattr(self, option))
        builder.ensure_finalized()
        builder.run()
        print(f"tephra: mypyc build took {time.monotonic() - start:.0f} s", flush=True)
        names = [e.name for e in self.distribution.ext_modules]
        if self.inplace and all(Path(self.get_ext_filename(name)).exists() for name in names):
            record = {"key": key, "sources": sources, "extensions": names}
            STAMP.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        # (not when a C compiler was missing: the next build tries again)

    def get_outputs(self) -> list[str]:
        return self.builder.get_outputs() if self.builder else []

    def get_output_mapping(self) -> dict[str, str]:
        return self.builder.get_output_mapping() if self.builder else {}

    def up_to_date(self, key: str) -> bool:
        """Whether the stamp's build matches ``key`` and its extensions are all in place."""
        try:
            record = json.loads(STAMP.read_text())
            current = record["key"] == key
            extensions: list[str] = record["extensions"]
        except (OSError, ValueError, KeyError, TypeError):
            return False
        # Packages live at the project root (pyproject.toml), so a module's
        # in-place file is its build path relative to the root.
        if not current or not all(Path(self.get_ext_filename(name)).exists() for name in extensions):
            return False
        # The editable install maps top-level modules (mypyc's shared libraries)
        # from this list, so it names the kept extensions.
        self.distribution.ext_modules = [Extension(name, []) for name in extensions]
        return True

    def remove_in_place_extensions(self) -> None:
        """Delete extensions an earlier in-place build left (they would load before the sources)."""
        STAMP.unlink(missing_ok=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        stale = [p for folder in EXTENSION_FOLDERS for p in Path(folder).rglob("*" + suffix)]
        stale += Path().glob("*__mypyc" + suffix)
        for path in stale:
            path.unlink()


if __name__ == "__main__":  # pip's backend runs this file as __main__; tests import it
    setup(
        # A placeholder so that setuptools schedules build_ext (and tags the wheel for
        # this platform); BuildMypyc.run replaces it.  No mypyc here: pip runs this
        # file for every step, metadata included.
        ext_modules=[Extension("tephra_mypyc_units", [])],
        cmdclass={"build_ext": BuildMypyc},
    )
