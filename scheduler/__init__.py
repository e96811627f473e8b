"""scheduler: the session engine (``core``, pure) and the service that runs it.

Importing the package first decides whether the core's compiled (mypyc) or
source form is loaded (:mod:`scheduler.native`).
"""

from scheduler.native import CORE_FORM

__all__ = ["CORE_FORM"]
