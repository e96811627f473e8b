"""Kubernetes resource quantities as exact integer units.

Kubernetes serialises resources as *quantities* (``500m``, ``2``, ``1G``,
``1Gi``, ``1.5e3``).  Tephra stores every resource as an ``int`` in a fixed
unit so that sums never depend on order and no float ever enters the core:

* ``cpu`` — millicores (``"500m"`` → 500, ``"2"`` → 2000);
* every other resource (``memory``, ``pods``, ``ephemeral-storage``,
  ``nvidia.com/gpu`` …) — whole base units (bytes, counts), rounded **up** the
  way ``resource.Quantity.Value()`` does.

Every quantity is below :data:`MAX_QUANTITY` (2^50) in these units; a larger
one is refused, never saturated: it is a typo or hostile (2^50 bytes is 1 PiB,
2^50 millicores a trillion cores).  So a sum over a whole cluster of up to
:data:`MAX_CLUSTER_NODES` (8,192) nodes stays below 2^63, and a quantity times
100 (kube-scheduler's scores) far below it: the scheduler's int64 matrices
never overflow.

A malformed or out-of-range quantity raises :class:`QuantityError` (a
``ValueError``), which names the resource and the offending value.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Final

__all__ = [
    "CPU",
    "MAX_CLUSTER_NODES",
    "MAX_QUANTITY",
    "MEMORY",
    "PODS",
    "QuantityError",
    "format_quantity",
    "format_resources",
    "parse_quantity",
    "parse_resources",
]

CPU = "cpu"
#: Every quantity is below this, in Tephra's units (exclusive).
MAX_QUANTITY: Final = 2**50
#: Nodes whose quantities, each below MAX_QUANTITY, sum below 2^63 (the int64 bound).
MAX_CLUSTER_NODES: Final = 2**63 // MAX_QUANTITY
MEMORY = "memory"
PODS = "pods"

# Binary and decimal SI suffixes accepted by k8s.io/apimachinery/pkg/api/resource.
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<exp>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$",
    re.ASCII,  # Kubernetes digits are 0-9 only; str patterns' \d also matches other scripts' digits
)
# Resource names follow the Kubernetes qualified-name rule (optional DNS prefix).
_NAME_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# Names _NAME_RE accepted.  A cluster has a handful (cpu, memory, a few extended
# resources), so decoding checks the set, not the regex (a third of a quantity's
# parse).  Bounded: names from arbitrary input must not grow it without limit.
_VALID_NAMES: Final[set[str]] = set()
_MAX_VALID_NAMES: Final = 256
#: Characters of an offending value an error message shows.
_MAX_SHOWN: Final = 80


class QuantityError(ValueError):
    """A resource quantity or resource name that Kubernetes would not accept."""

    def __init__(self, resource: str, value: object, why: str) -> None:
        self.resource = resource
        self.value = value
        self.why = why
        shown = repr(value)
        if len(shown) > _MAX_SHOWN:  # the value is the input's: a message stays short whatever it holds
            shown = shown[: _MAX_SHOWN - 3] + "..."
        super().__init__(f"invalid quantity for {resource!r}: {shown} ({why})")


def _exact(resource: str, value: object) -> Fraction:
    if isinstance(value, bool):
        raise QuantityError(resource, value, "expected a quantity string or number, got a boolean")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        try:
            return Fraction(Decimal(repr(value)))
        except (InvalidOperation, ValueError, OverflowError) as exc:  # NaN, Infinity
            raise QuantityError(resource, value, "not a finite number") from exc
    if not isinstance(value, str):
        raise QuantityError(resource, value, "expected a quantity string such as '500m', '2' or '8Gi'")
    text = value.strip()
    m = _QUANTITY_RE.match(text)
    if not m:
        raise QuantityError(resource, value, "expected a number with an optional suffix such as m, k, Mi, Gi")
    number = Fraction(Decimal(m.group("num")))
    if m.group("exp"):
        exponent = int(m.group("exp")[1:])
        if abs(exponent) > 30:
            raise QuantityError(resource, value, "exponent out of range")
        return number * Fraction(10) ** exponent
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


def _ceil(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def _from_canonical(resource: str, value: object) -> int | None:
    """The forms :func:`format_quantity` writes, without the exact-fraction path; None otherwise.

    Plain ASCII digits (and ``<digits>m`` for cpu) or a non-negative int: every
    event Tephra encodes uses these, so decoding the log stays fast.
    """
    if isinstance(value, str) and value.isascii():
        if value.isdigit():
            return int(value) * 1000 if resource == CPU else int(value)
        if resource == CPU and value[-1:] == "m" and value[:-1].isdigit():
            return int(value[:-1])
    elif type(value) is int and value >= 0:  # not bool: type(True) is bool
        return value * 1000 if resource == CPU else value
    return None


def parse_quantity(resource: str, value: object) -> int:
    """Parse one quantity of ``resource`` into Tephra's integer unit.

    >>> parse_quantity("cpu", "500m"), parse_quantity("memory", "1Gi"), parse_quantity("memory", "1G")
    (500, 1073741824, 1000000000)

    ``value`` is whatever the input held: a string or a number is parsed,
    anything else raises :class:`QuantityError`.  (Typed ``object``: compiled
    with mypyc, a narrower annotation would raise TypeError at the call, which
    pydantic does not turn into a validation error.)
    """
    if resource not in _VALID_NAMES:
        if not _NAME_RE.match(resource):
            raise QuantityError(resource, value, "not a valid resource name")
        if len(_VALID_NAMES) < _MAX_VALID_NAMES:
            _VALID_NAMES.add(resource)
    amount = _from_canonical(resource, value)
    if amount is None:
        exact = _exact(resource, value)
        if exact < 0:
            raise QuantityError(resource, value, "must not be negative")
        amount = _ceil(exact * 1000) if resource == CPU else _ceil(exact)
    if amount >= MAX_QUANTITY:
        unit = "millicores" if resource == CPU else "base units"
        raise QuantityError(resource, value, f"must be below 2^50 {unit} ({MAX_QUANTITY})")
    return amount


def parse_resources(values: object, *, field: str = "resources") -> dict[str, int]:
    """Parse a Kubernetes ``ResourceList`` mapping into sorted integer units."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise QuantityError(field, values, "expected a mapping of resource name to quantity")
    out: dict[str, int] = {}
    for name in sorted(values):
        if not isinstance(name, str):
            raise QuantityError(str(name), values[name], "resource names must be strings")
        out[name] = parse_quantity(name, values[name])
    return out


def format_quantity(resource: str, amount: int) -> str:
    """Render an integer amount back as a canonical Kubernetes quantity string."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    return str(amount)


def format_resources(values: dict[str, int]) -> dict[str, str]:
    """Canonical quantity strings, keys sorted (the form events are encoded in)."""
    return {name: format_quantity(name, values[name]) for name in sorted(values)}
