"""Network topology manifests: ``topology.volcano.sh/v1alpha1`` HyperNode documents and the
``spec.networkTopology`` of a VolcanoJob or PodGroup, read into the snapshot's model.

Kept apart from the rest of the manifest reading so that both doors (``tephra simulate``
scenario files, ``tephra submit``) share one reader.  Checks follow Volcano's CRD and
admission rules (a HyperNode has at least one member; a member has exactly one selector;
an exactMatch name and a regexMatch pattern are required, the pattern must compile;
``highestTierAllowed`` and ``highestTierName`` are not set together); every problem is a
:class:`~scheduler.podspec.PodSpecError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from scheduler.core.snapshot import HyperNode, HyperNodeMember, NetworkTopology
from scheduler.podspec import PodSpecError, label_selector

__all__ = [
    "HYPERNODE_API_VERSION",
    "hypernode_from_manifest",
    "network_topology_from_spec",
    "network_topology_warnings",
]

HYPERNODE_API_VERSION: Final = "topology.volcano.sh/v1alpha1"
_MODES: Final = ("hard", "soft")
_SELECTORS: Final = ("exactMatch", "regexMatch", "labelMatch")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(path, "expected a mapping", value)
    return value


def _only(raw: Mapping[str, Any], keys: tuple[str, ...], path: str) -> None:
    unknown = sorted(str(k) for k in raw if k not in keys)
    if unknown:
        raise PodSpecError(f"{path}.{unknown[0]}", "unknown field; expected one of: " + ", ".join(keys))


def _tier(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PodSpecError(path, "expected an integer >= 0", value)
    return value


def network_topology_from_spec(value: Any, path: str) -> NetworkTopology | None:
    """``spec.networkTopology`` (absent: None).  ``mode`` defaults to hard, as in the CRD."""
    if value is None:
        return None
    raw = _mapping(value, path)
    _only(raw, ("mode", "highestTierAllowed", "highestTierName"), path)
    mode = raw.get("mode") or "hard"
    if mode not in _MODES:
        raise PodSpecError(f"{path}.mode", "expected hard or soft", mode)
    tier = raw.get("highestTierAllowed")
    name = raw.get("highestTierName") or ""
    if not isinstance(name, str):
        raise PodSpecError(f"{path}.highestTierName", "expected a string", name)
    if tier is not None and name:
        raise PodSpecError(path, "highestTierAllowed and highestTierName cannot be set simultaneously")
    return NetworkTopology(
        mode=str(mode),
        highest_tier_allowed=None if tier is None else _tier(tier, f"{path}.highestTierAllowed"),
        highest_tier_name=name,
    )


def network_topology_warnings(value: Any, path: str) -> list[tuple[str, str]]:
    """What a valid ``networkTopology`` asks for that placement will not enforce."""
    if not isinstance(value, Mapping):
        return []
    mode = value.get("mode") or "hard"
    if mode == "hard" and value.get("highestTierAllowed") is None and not value.get("highestTierName"):
        return [
            (
                path,
                "hard mode without highestTierAllowed or highestTierName: Volcano, and Tephra, place "
                "the job without a topology constraint",
            )
        ]
    return []


def hypernode_from_manifest(body: Mapping[str, Any]) -> HyperNode:
    """A HyperNode document (``apiVersion``/``kind`` already checked by the caller)."""
    meta = _mapping(body.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise PodSpecError("metadata.name", "expected a non-empty string", name)
    spec = _mapping(body.get("spec"), "spec")
    _only(spec, ("tier", "tierName", "members"), "spec")
    if "tier" not in spec:
        raise PodSpecError("spec.tier", "required (an integer >= 0)")
    tier_name = spec.get("tierName") or ""
    if not isinstance(tier_name, str):
        raise PodSpecError("spec.tierName", "expected a string", tier_name)
    raw_members = spec.get("members")
    if not isinstance(raw_members, list) or not raw_members:
        raise PodSpecError("spec.members", "member must have at least one member", raw_members)
    members = tuple(_member(raw, f"spec.members[{i}]") for i, raw in enumerate(raw_members))
    tier = _tier(spec.get("tier"), "spec.tier")
    return HyperNode(name=name, tier=tier, members=members, tier_name=tier_name)


def _member(raw: Any, path: str) -> HyperNodeMember:
    member = _mapping(raw, path)
    _only(member, ("type", "selector"), path)
    kind = member.get("type")
    if kind not in ("Node", "HyperNode"):
        raise PodSpecError(f"{path}.type", "expected Node or HyperNode", kind)
    selector = _mapping(member.get("selector"), f"{path}.selector")
    _only(selector, _SELECTORS, f"{path}.selector")
    given = [key for key in _SELECTORS if selector.get(key) is not None]
    if len(given) != 1:
        why = "member selector must have exactly one of exactMatch, regexMatch, or labelMatch"
        raise PodSpecError(f"{path}.selector", why)
    where = f"{path}.selector.{given[0]}"
    if given[0] == "exactMatch":
        exact = _mapping(selector["exactMatch"], where)
        _only(exact, ("name",), where)
        name = exact.get("name")
        if not isinstance(name, str) or not name:
            raise PodSpecError(f"{where}.name", "member exactMatch name is required", name)
        return HyperNodeMember(kind=str(kind), exact=name)
    if kind == "HyperNode":
        # Volcano resolves hyperNode members by exact name only and skips the others silently.
        raise PodSpecError(where, "a HyperNode member is selected by exactMatch only")
    if given[0] == "regexMatch":
        regex = _mapping(selector["regexMatch"], where)
        _only(regex, ("pattern",), where)
        pattern = regex.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise PodSpecError(f"{where}.pattern", "member regexMatch pattern is required", pattern)
        try:
            re.compile(pattern)
        except re.error as exc:
            why = f"member regexMatch pattern is invalid: {exc}"
            raise PodSpecError(f"{where}.pattern", why, pattern) from exc
        return HyperNodeMember(kind=str(kind), regex=pattern)
    return HyperNodeMember(kind=str(kind), labels=label_selector(selector["labelMatch"], where))
