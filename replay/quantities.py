"""Amounts in explain's answers as Kubernetes quantities (``512Gi``, ``500m``, ``8``).

The core counts in integer units (millicores, bytes); people and tools read
quantities.  A reason's ``detail`` holds amounts beside the resource they are
of (``resource`` + ``request``/``limit``/..., or ``resources: {name: {...}}``);
those become quantity strings, every other number (counts, ratios such as
the overcommit ``factor``) stays a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.reasons import format_amount

__all__ = ["detail_quantities", "resource_quantities"]

#: Detail keys that hold an amount of the reason's resource.
_AMOUNTS = frozenset(
    {"allocated", "capability", "deserved", "elastic", "idle", "inqueue", "limit", "request", "total", "used"}
)


def resource_quantities(values: Mapping[str, int | float]) -> dict[str, str]:
    """``{resource: amount}`` as ``{resource: quantity}``, keys sorted."""
    return {r: format_amount(r, values[r]) for r in sorted(values)}


def _amounts(resource: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: format_amount(resource, v) if k in _AMOUNTS and isinstance(v, int | float) else v
        for k, v in values.items()
    }


def detail_quantities(detail: Mapping[str, Any]) -> dict[str, Any]:
    """A reason's detail with its amounts as quantities (see the module docstring)."""
    out = dict(detail)
    resource = out.get("resource")
    if isinstance(resource, str):
        out = _amounts(resource, out)
    resources = out.get("resources")
    if isinstance(resources, Mapping):
        out["resources"] = {
            r: _amounts(r, v) if isinstance(v, Mapping) else v for r, v in sorted(resources.items())
        }
    return out
