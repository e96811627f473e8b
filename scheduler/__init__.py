"""scheduler: the session engine (``core``, pure) and the service that runs it.

``pip install`` may compile every module of the core with mypyc (setup.py);
:func:`core_compiled` says whether the extensions are what runs.
"""

from importlib.machinery import EXTENSION_SUFFIXES

__all__ = ["core_compiled"]


def core_compiled() -> bool:
    """Whether the scheduling core runs as mypyc extensions rather than its sources."""
    from scheduler.core import session  # noqa: PLC0415 - importing scheduler need not load the core

    return session.__file__.endswith(tuple(EXTENSION_SUFFIXES))
