"""Upcasting: old event versions are rewritten to the current one on read.

The archive is never rewritten.  When :func:`events.serde.decode` meets a type
older than the catalogue's (``tephra.job.submitted.v0`` while the catalogue
knows ``v1``), it asks an :class:`UpcasterRegistry` to chain pure steps
``v0 -> v1 -> ... -> newest`` over the parsed JSON object, then validates the
result with the current model.

A step is a pure function ``dict -> dict`` registered for ``(base type,
from-version)``.  It receives the whole structured event (envelope and
``data``) of version N and returns the event of version N+1; it must not
mutate its argument.  The registry, not the step, rewrites ``type`` to the
next version, so a step cannot get its own version wrong.

Registries are immutable: build one with all its steps (``with_step`` returns
a new registry), pass it to ``decode(..., upcasters=...)``.  The steps
Tephra ships live in :data:`DEFAULT_UPCASTERS`, assembled in one place below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeAlias

__all__ = [
    "DEFAULT_UPCASTERS",
    "UpcastError",
    "Upcaster",
    "UpcasterRegistry",
    "split_type",
    "versioned_type",
]

JsonObject: TypeAlias = dict[str, Any]
#: One step: the structured event at version N -> the event at version N+1.
Upcaster: TypeAlias = Callable[[JsonObject], JsonObject]

_VERSIONED_TYPE = re.compile(r"(?P<base>[^\s]+)\.v(?P<version>0|[1-9][0-9]*)", re.ASCII)


def split_type(event_type: str) -> tuple[str, int] | None:
    """Split ``tephra.job.submitted.v1`` into ``("tephra.job.submitted", 1)``; None if unversioned."""
    m = _VERSIONED_TYPE.fullmatch(event_type)
    if m is None:
        return None
    return m.group("base"), int(m.group("version"))


def versioned_type(base: str, version: int) -> str:
    """The inverse of :func:`split_type`."""
    return f"{base}.v{version}"


class UpcastError(ValueError):
    """An old payload could not be brought to the wanted version.

    ``missing_step`` is True when no step is registered for some version on
    the way (the version is unsupported), False when a step rejected the
    payload (the old event itself is malformed).
    """

    def __init__(self, message: str, *, missing_step: bool) -> None:
        super().__init__(message)
        self.missing_step = missing_step


class UpcasterRegistry(Mapping[tuple[str, int], Upcaster]):
    """An immutable map ``(base type, from-version) -> step``."""

    __slots__ = ("_steps",)

    def __init__(self, steps: Mapping[tuple[str, int], Upcaster] | None = None) -> None:
        checked: dict[tuple[str, int], Upcaster] = {}
        for (base, from_version), step in (steps or {}).items():
            if split_type(base) is not None or not base or base != base.strip():
                raise ValueError(f"upcaster base type must be unversioned, got {base!r}")
            if from_version < 0:
                raise ValueError(f"upcaster from-version must be >= 0, got {from_version} for {base!r}")
            checked[(base, from_version)] = step
        self._steps: Mapping[tuple[str, int], Upcaster] = MappingProxyType(checked)

    def __getitem__(self, key: tuple[str, int]) -> Upcaster:
        return self._steps[key]

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(sorted(self._steps))

    def __len__(self) -> int:
        return len(self._steps)

    def __repr__(self) -> str:
        steps = ", ".join(f"{versioned_type(b, v)}->v{v + 1}" for b, v in self)
        return f"UpcasterRegistry([{steps}])"

    def with_step(self, base: str, from_version: int, step: Upcaster) -> UpcasterRegistry:
        """A new registry with one more (or one replaced) step."""
        return UpcasterRegistry({**self._steps, (base, from_version): step})

    def upcast(self, event: JsonObject, *, base: str, from_version: int, to_version: int) -> JsonObject:
        """Chain steps from ``from_version`` to ``to_version`` over one parsed event.

        Raises :class:`UpcastError` when a step is missing or a step fails on
        the payload (``AttributeError``, ``KeyError``, ``IndexError``, ``TypeError``, ``ValueError``:
        the old event is malformed).  Other exceptions are bugs and propagate.
        """
        current = event
        for version in range(from_version, to_version):
            step = self._steps.get((base, version))
            if step is None:
                raise UpcastError(
                    f"no upcaster from {versioned_type(base, version)} to v{version + 1}",
                    missing_step=True,
                )
            try:
                upgraded: object = step(current)
            except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
                raise UpcastError(
                    f"cannot upcast {versioned_type(base, version)} to v{version + 1}: {exc!r}",
                    missing_step=False,
                ) from exc
            if not isinstance(upgraded, dict):
                kind = type(upgraded).__name__
                raise TypeError(f"upcaster for {versioned_type(base, version)} returned {kind}, not dict")
            current = {**upgraded, "type": versioned_type(base, version + 1)}
        return current


# Every catalogue type is at v1, its first version: nothing to upcast yet.
# When a model changes shape, bump its ``type`` to v2 in events/models.py and
# register the v1 -> v2 step here, with a test that decodes a v1 payload.
DEFAULT_UPCASTERS = UpcasterRegistry({})
