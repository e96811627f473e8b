"""Which form of the scheduling core runs: mypyc-compiled extensions or the sources.

``pip install`` compiles every module of ``scheduler/core`` with mypyc
(setup.py).  :mod:`events.native` chooses, once per process and before any
core module is imported (the ``scheduler`` package imports this module
first), between the compiled form and the sources: the sources when
``TEPHRA_INTERPRETED_CORE=1`` asks for them or a core source changed since it
was compiled.  :data:`CORE_FORM` says which form is in use and why; bench
scripts print it.
"""

from __future__ import annotations

from pathlib import Path

from events.native import CompiledUnit, choose_form, loaded_compiled

__all__ = ["CORE", "CORE_FORM", "choose_core_form", "core_compiled"]

CORE = CompiledUnit("scheduler.core", Path(__file__).resolve().parent / "core", every_module=True)
"""The compiled unit: every module of ``scheduler/core`` but its packages' ``__init__``."""


def choose_core_form() -> str:
    """Load the core's sources unless its compiled form is current; says which form and why."""
    return choose_form(CORE)


def core_compiled() -> bool:
    """Whether the loaded core modules are the compiled extensions."""
    from scheduler.core import session  # noqa: PLC0415 - the question is about what this loads

    return loaded_compiled(session)


CORE_FORM = choose_core_form()
