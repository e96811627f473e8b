"""How long a simulated task runs: the ``tephra.dev/sim-runtime`` job annotation.

The value is a Go-style duration (``30s``, ``1m30s``, ``1.5h``, ``250ms``), the
format Kubernetes users already write for timeouts.  A job without the
annotation runs until it is evicted or cancelled.  The parser lives apart from
the simulator so ``tephra submit`` can reject a bad value before anything is
produced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["SIM_RUNTIME_ANNOTATION", "SimRuntimeError", "parse_duration", "sim_runtime"]

SIM_RUNTIME_ANNOTATION = "tephra.dev/sim-runtime"

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


class SimRuntimeError(ValueError):
    """A duration string that is not a Go-style duration."""


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration string such as ``1m30s``.

    >>> parse_duration("1m30s"), parse_duration("250ms")
    (90.0, 0.25)
    """
    value = text.strip()
    position = 0
    total = 0.0
    while position < len(value):
        match = _PART_RE.match(value, position)
        if match is None:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not value or position != len(value):
        raise SimRuntimeError(f"expected a duration such as '30s', '1m30s' or '2h', got {text!r}")
    return total


def sim_runtime(annotations: Mapping[str, str]) -> float | None:
    """The simulated runtime in seconds of a job with these annotations, or None (runs until stopped)."""
    raw = annotations.get(SIM_RUNTIME_ANNOTATION)
    if raw is None:
        return None
    return parse_duration(raw)
