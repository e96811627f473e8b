"""Scheduler configuration in the volcano-scheduler.conf shape.

``actions`` (comma-separated string or list), ``tiers[].plugins[]`` with the
``enable*`` switches and ``arguments``, and ``configurations[]`` (per-action
arguments).  As in a real Volcano config file every extension-point flag
defaults to *true*; mode flags (``enableHierarchy``) default to false.

Volcano spells most flags ``enableX`` but a few ``enabledX``
(Allocatable, Overused, ClusterOrder, Victim, HyperNodeOrder, …); both
spellings are accepted for every flag and normalised to ``enableX``.
Unknown plugin, action, flag or top-level key names raise :class:`ConfigError`
naming the culprit and listing what is valid.

New configurations (:func:`parse_scheduler_config`, what every door calls) are
also held to the rule "honoured, refused, or warned — never dropped":

* a plugin argument Tephra does not read is an error listing the plugin's
  known arguments (:data:`PLUGIN_ARGUMENTS`); so is a value of the wrong type;
* an action ``configurations:`` entry is an error listing the action's known
  keys (:data:`ACTION_ARGUMENTS`; Volcano's topology-aware preemption is
  refused when turned on, since Tephra does not implement it);
* ``drf`` with ``enableHierarchy`` together with ``proportion`` is refused, as
  Volcano refuses it ("proportion and drf with hierarchy enabled conflicts");
  ``enableHierarchy`` is honoured on ``capacity`` and refused on every other
  plugin (Tephra has no hierarchical drf);
* a top-level ``metrics:`` (Volcano's metrics source for the usage plugin) is
  accepted and has no effect: :func:`config_warnings` names it.

Configurations already archived are read back by :meth:`SchedulerConfig.from_spec`
without these checks, so an archive recorded before them still replays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from events.models import ActionConfiguration, PluginSpec, SchedulerConfigSpec, TierSpec

__all__ = [
    "ACTION_ARGUMENTS",
    "DEFAULT_CONFIG",
    "EXTENSION_FLAGS",
    "MODE_FLAGS",
    "OFF_ONLY_ARGUMENTS",
    "PLUGIN_ARGUMENTS",
    "ActionName",
    "ConfigError",
    "PluginName",
    "PluginOption",
    "SchedulerConfig",
    "Tier",
    "config_problem",
    "config_warnings",
    "parse_scheduler_config",
]


class ActionName(StrEnum):
    """Every action; the one declaration the config, the registry and the trace use."""

    ENQUEUE = "enqueue"
    ALLOCATE = "allocate"
    BACKFILL = "backfill"
    PREEMPT = "preempt"
    RECLAIM = "reclaim"


class PluginName(StrEnum):
    """Every plugin; the one declaration the config, the registry and the trace use."""

    BINPACK = "binpack"
    CAPACITY = "capacity"
    CONFORMANCE = "conformance"
    DRF = "drf"
    GANG = "gang"
    NETWORK_TOPOLOGY_AWARE = "network-topology-aware"
    NODEORDER = "nodeorder"
    OVERCOMMIT = "overcommit"
    PREDICATES = "predicates"
    PRIORITY = "priority"
    PROPORTION = "proportion"
    SLA = "sla"


_ACTION_VALUES: frozenset[str] = frozenset(ActionName)
_PLUGIN_VALUES: frozenset[str] = frozenset(PluginName)
_VALID_ACTIONS = ", ".join(ActionName)
_VALID_PLUGINS = ", ".join(PluginName)

#: Every extension-point switch of Volcano's ``PluginOption`` (default true).
EXTENSION_FLAGS: tuple[str, ...] = (
    "enableJobOrder",
    "enableNamespaceOrder",
    "enableJobReady",
    "enableJobPipelined",
    "enableTaskOrder",
    "enablePreemptable",
    "enableReclaimable",
    "enablePreemptive",
    "enableQueueOrder",
    "enableClusterOrder",
    "enablePredicate",
    "enableBestNode",
    "enableNodeOrder",
    "enableTargetJob",
    "enableReservedNodes",
    "enableJobEnqueued",
    "enableVictim",
    "enableJobStarving",
    "enableOverused",
    "enableAllocatable",
    "enableHyperNodeOrder",
    "enableHyperNodeGradient",
    "enableSubJobReady",
    "enableSubJobPipelined",
    "enableSubJobOrder",
)
#: Mode switches (default false).
MODE_FLAGS: tuple[str, ...] = ("enableHierarchy",)

_ALL_FLAGS = EXTENSION_FLAGS + MODE_FLAGS


class ConfigError(ValueError):
    """An invalid scheduler configuration; ``where`` names the offending part."""

    def __init__(self, where: str, why: str) -> None:
        self.where = where
        self.why = why
        super().__init__(f"{where}: {why}")


def _canonical_flag(key: str) -> str | None:
    if key.startswith("enabled"):
        key = "enable" + key[len("enabled") :]
    return key if key in _ALL_FLAGS else None


@dataclass(frozen=True, slots=True)
class PluginOption:
    """One plugin of a tier with every flag resolved."""

    #: a :class:`PluginName` value (checked by the parser), kept as the plain text.
    name: str
    flags: Mapping[str, bool] = field(default_factory=dict)
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def enabled(self, flag: str) -> bool:
        """Whether extension point ``flag`` (e.g. ``"enableJobOrder"``) is on."""
        value = self.flags.get(flag)
        if value is None:
            return flag not in MODE_FLAGS
        return value


@dataclass(frozen=True, slots=True)
class Tier:
    plugins: tuple[PluginOption, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    actions: tuple[str, ...]
    tiers: tuple[Tier, ...]
    configurations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def action_arguments(self, action: str) -> Mapping[str, Any]:
        return self.configurations.get(action, {})

    def plugin_names(self) -> tuple[str, ...]:
        return tuple(p.name for t in self.tiers for p in t.plugins)

    @classmethod
    def from_spec(cls, spec: SchedulerConfigSpec) -> SchedulerConfig:
        """An archived configuration, read back without the checks new ones get (it was accepted)."""
        return _parse(
            {
                "actions": list(spec.actions),
                "tiers": [
                    {
                        "plugins": [
                            {"name": p.name, **dict(p.flags), "arguments": dict(p.arguments)}
                            for p in tier.plugins
                        ]
                    }
                    for tier in spec.tiers
                ],
                "configurations": [
                    {"name": c.name, "arguments": dict(c.arguments)} for c in spec.configurations
                ],
            }
        )

    def to_spec(self) -> SchedulerConfigSpec:
        """The event form; only flags that differ from their default are written."""
        return SchedulerConfigSpec(
            actions=list(self.actions),
            tiers=[
                TierSpec(
                    plugins=[
                        PluginSpec(
                            name=p.name,
                            flags={k: v for k, v in sorted(p.flags.items()) if v != (k not in MODE_FLAGS)},
                            arguments=dict(p.arguments),
                        )
                        for p in tier.plugins
                    ]
                )
                for tier in self.tiers
            ],
            configurations=[
                ActionConfiguration(name=name, arguments=dict(args))
                for name, args in self.configurations.items()
            ],
        )


def _parse_actions(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        names = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, Sequence):
        names = []
        for item in value:
            if not isinstance(item, str):
                raise ConfigError("actions", f"expected action names, got {item!r}")
            names.append(item.strip())
    else:
        raise ConfigError("actions", "expected a comma-separated string or a list of action names")
    if not names:
        raise ConfigError("actions", "at least one action is required")
    for name in names:
        if name not in _ACTION_VALUES:
            raise ConfigError("actions", f"unknown action {name!r}; valid actions: {_VALID_ACTIONS}")
    return tuple(names)


def _parse_plugin(where: str, raw: object) -> PluginOption:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, "expected a mapping with at least 'name'")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name", "expected a plugin name")
    if name not in _PLUGIN_VALUES:
        raise ConfigError(f"{where}.name", f"unknown plugin {name!r}; valid plugins: {_VALID_PLUGINS}")
    flags: dict[str, bool] = {}
    arguments: dict[str, Any] = {}
    for key in raw:
        if key == "name":
            continue
        value = raw[key]
        if key == "arguments":
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.arguments", "expected a mapping")
            arguments = {str(k): value[k] for k in value}
            continue
        flag = _canonical_flag(str(key))
        if flag is None:
            raise ConfigError(
                f"{where}.{key}",
                f"unknown plugin option {key!r} for plugin {name!r}; valid options: name, arguments, "
                + ", ".join(_ALL_FLAGS)
                + " (the 'enabled…' spelling is accepted too)",
            )
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}", f"expected true or false, got {value!r}")
        flags[flag] = value
    resolved = {f: flags.get(f, f not in MODE_FLAGS) for f in _ALL_FLAGS}
    return PluginOption(name=name, flags=resolved, arguments=arguments)


def parse_scheduler_config(mapping: Mapping[str, Any]) -> SchedulerConfig:
    """Parse and check a new volcano-scheduler.conf / scenario ``spec.config``."""
    config = _parse(mapping)
    _check(config)
    return config


def config_warnings(mapping: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(path, message)`` for each accepted key of ``mapping`` that has no effect."""
    warnings: list[tuple[str, str]] = []
    if "metrics" in mapping:
        warnings.append(("metrics", "accepted as in Volcano's config; no effect in Tephra (no usage plugin)"))
    warnings.extend(_network_topology_warnings(mapping.get("tiers")))
    return warnings


def _network_topology_warnings(tiers: object) -> list[tuple[str, str]]:
    """What network-topology-aware does in Volcano that Tephra does not (yet) do."""
    out: list[tuple[str, str]] = []
    if not isinstance(tiers, Sequence) or isinstance(tiers, str):
        return out
    for i, tier in enumerate(tiers):
        plugins = tier.get("plugins") if isinstance(tier, Mapping) else None
        if not isinstance(plugins, Sequence) or isinstance(plugins, str):
            continue
        for j, plugin in enumerate(plugins):
            if not isinstance(plugin, Mapping) or plugin.get("name") != PluginName.NETWORK_TOPOLOGY_AWARE:
                continue
            where = f"tiers[{i}].plugins[{j}]"
            args = plugin.get("arguments") or {}
            args = args if isinstance(args, Mapping) else {}
            out.append(
                (
                    where,
                    "network-topology-aware: hyperNode gradients, hyperNode order and the node order of "
                    "topology jobs are honoured; the hyperNode binpacking node score of pods without a "
                    "topology (hypernode.binpack.normal-pod.*) is not applied",
                )
            )
            if "hypernode.gradient.evict.max-hypernodes" in args:
                out.append(
                    (
                        f"{where}.arguments.hypernode.gradient.evict.max-hypernodes",
                        "no effect: Tephra has no gangpreempt / gangreclaim",
                    )
                )
    return out


#: The arguments each plugin reads; ``binpack.resources.<name>`` is a family (see ``_known_argument``).
PLUGIN_ARGUMENTS: Mapping[str, Mapping[str, str]] = {
    PluginName.BINPACK: {
        "binpack.weight": "int",
        "binpack.cpu": "int",
        "binpack.memory": "int",
        "binpack.resources": "str",
        "binpack.resources.<name>": "int",
    },
    PluginName.NODEORDER: {
        "leastrequested.weight": "int",
        "mostrequested.weight": "int",
        "balancedresource.weight": "int",
        "tainttoleration.weight": "int",
        "podtopologyspread.weight": "int",
    },
    PluginName.PREDICATES: {
        "predicate.NodeAffinityEnable": "bool",
        "predicate.TaintTolerationEnable": "bool",
        "predicate.PodAffinityEnable": "bool",
        "predicate.PodTopologySpreadEnable": "bool",
    },
    PluginName.OVERCOMMIT: {"overcommit-factor": "number"},
    PluginName.NETWORK_TOPOLOGY_AWARE: {
        "weight": "int",
        "hypernode.binpack.cpu": "int",
        "hypernode.binpack.memory": "int",
        "hypernode.binpack.resources": "str",
        "hypernode.binpack.resources.<name>": "int",
        # Accepted and named by config_warnings: read by parts Tephra does not implement.
        "hypernode.binpack.normal-pod.enable": "bool",
        "hypernode.binpack.normal-pod.fading": "number",
        "hypernode.gradient.evict.max-hypernodes": "int",
    },
    PluginName.CAPACITY: {"ancestorReclaimLevel": "int"},
    PluginName.SLA: {"sla-waiting-time": "str"},
}
#: Volcano arguments for features Tephra does not implement: accepted only at the value that
#: turns the feature off (what Tephra does anyway), refused otherwise.
OFF_ONLY_ARGUMENTS: Mapping[str, Mapping[str, object]] = {
    # nodeorder scorers Tephra does not have (preferred node affinity, preferred inter-pod
    # affinity, image locality): weight 0 disables them in Volcano too.
    PluginName.NODEORDER: {
        "nodeaffinity.weight": 0,
        "podaffinity.weight": 0,
        "imagelocality.weight": 0,
    },
}
#: The ``configurations:`` keys each action reads, with the only value Tephra honours.
ACTION_ARGUMENTS: Mapping[str, Mapping[str, bool]] = {
    # Volcano's preempt: topology-aware preemption (off by default) is not implemented.
    ActionName.PREEMPT: {"enableTopologyAwarePreemption": False},
}


def _known_argument(plugin: str, key: str) -> str | None:
    """The type of argument ``key`` of ``plugin``, None when the plugin does not read it."""
    known = PLUGIN_ARGUMENTS.get(plugin, {})
    if key in known:
        return known[key]
    if plugin == PluginName.BINPACK and key.startswith("binpack.resources.") and len(key) > 18:
        return known["binpack.resources.<name>"]
    family = "hypernode.binpack.resources."
    if plugin == PluginName.NETWORK_TOPOLOGY_AWARE and key.startswith(family) and len(key) > len(family):
        return known["hypernode.binpack.resources.<name>"]
    return None


def _type_ok(kind: str, value: object) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float | str) and not isinstance(value, bool) and _is_number(value)
    return isinstance(value, str)


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True


def _check(config: SchedulerConfig) -> None:
    """Refuse what Tephra would otherwise accept and ignore (module docstring)."""
    for i, tier in enumerate(config.tiers):
        for j, plugin in enumerate(tier.plugins):
            for key in sorted(plugin.arguments):
                _check_argument(plugin, key, f"tiers[{i}].plugins[{j}].arguments.{key}")
    _check_hierarchy(config)
    for action in sorted(config.configurations):
        known_keys = ACTION_ARGUMENTS.get(action, {})
        for key in sorted(config.configurations[action]):
            where = f"configurations[{action}].arguments.{key}"
            if key not in known_keys:
                known = ", ".join(known_keys) or "none"
                raise ConfigError(
                    where, f"unknown argument {key!r} for action {action!r}; known arguments: {known}"
                )
            value = config.configurations[action][key]
            if value != known_keys[key]:
                raise ConfigError(
                    where, f"only {known_keys[key]!r} is supported (not implemented by Tephra), got {value!r}"
                )


def _check_argument(plugin: PluginOption, key: str, where: str) -> None:
    value = plugin.arguments[key]
    off_only = OFF_ONLY_ARGUMENTS.get(plugin.name, {})
    if key in off_only:
        if value != off_only[key]:
            raise ConfigError(
                where,
                f"only {off_only[key]!r} is supported: Tephra does not implement what it switches on; "
                f"got {value!r}",
            )
        return
    kind = _known_argument(plugin.name, key)
    if kind is None:
        known = ", ".join([*PLUGIN_ARGUMENTS.get(plugin.name, {}), *off_only]) or "none"
        raise ConfigError(
            where, f"unknown argument {key!r} for plugin {plugin.name!r}; known arguments: {known}"
        )
    if not _type_ok(kind, value):
        raise ConfigError(where, f"expected {_KIND_TEXT[kind]}, got {value!r}")


def _check_hierarchy(config: SchedulerConfig) -> None:
    hierarchical_drf = any(
        p.name == PluginName.DRF and p.enabled("enableHierarchy") for t in config.tiers for p in t.plugins
    )
    if hierarchical_drf and PluginName.PROPORTION in config.plugin_names():
        raise ConfigError(
            "tiers", "proportion and drf with hierarchy enabled conflicts (Volcano refuses it too)"
        )
    for i, tier in enumerate(config.tiers):
        for j, plugin in enumerate(tier.plugins):
            if plugin.enabled("enableHierarchy") and plugin.name != PluginName.CAPACITY:
                raise ConfigError(
                    f"tiers[{i}].plugins[{j}].enableHierarchy",
                    f"hierarchical mode of {plugin.name!r} is not implemented by Tephra (capacity's "
                    "is); remove it or set it to false",
                )


_KIND_TEXT: Final = {"bool": "true or false", "int": "an integer", "number": "a number", "str": "a string"}


def _parse(mapping: Mapping[str, Any]) -> SchedulerConfig:  # noqa: PLR0912 - one validation per key
    """Parse the volcano-scheduler.conf / scenario ``spec.config`` shape (no argument checks)."""
    if not isinstance(mapping, Mapping):
        raise ConfigError("config", "expected a mapping with 'actions' and 'tiers'")
    allowed = ("actions", "tiers", "configurations", "metrics")
    for key in mapping:
        if key not in allowed:
            raise ConfigError(str(key), f"unknown config key; valid keys: {', '.join(allowed)}")
    if "metrics" in mapping and not isinstance(mapping["metrics"], Mapping):
        raise ConfigError("metrics", "expected a mapping (Volcano's metrics source: type, address, interval)")
    if "actions" not in mapping:
        raise ConfigError("actions", "missing; e.g. 'enqueue, allocate, backfill'")
    actions = _parse_actions(mapping["actions"])
    raw_tiers = mapping.get("tiers") or []
    if not isinstance(raw_tiers, Sequence) or isinstance(raw_tiers, str):
        raise ConfigError("tiers", "expected a list of {plugins: [...]}")
    tiers = []
    for i, raw_tier in enumerate(raw_tiers):
        if not isinstance(raw_tier, Mapping):
            raise ConfigError(f"tiers[{i}]", "expected a mapping with 'plugins'")
        extra = [k for k in raw_tier if k != "plugins"]
        if extra:
            raise ConfigError(f"tiers[{i}].{extra[0]}", "unknown tier key; valid keys: plugins")
        plugins = raw_tier.get("plugins") or []
        if not isinstance(plugins, Sequence) or isinstance(plugins, str):
            raise ConfigError(f"tiers[{i}].plugins", "expected a list of plugins")
        tiers.append(Tier(tuple(_parse_plugin(f"tiers[{i}].plugins[{j}]", p) for j, p in enumerate(plugins))))
    configurations: dict[str, Mapping[str, Any]] = {}
    raw_confs = mapping.get("configurations") or []
    if not isinstance(raw_confs, Sequence) or isinstance(raw_confs, str):
        raise ConfigError("configurations", "expected a list of {name, arguments}")
    for i, conf in enumerate(raw_confs):
        if not isinstance(conf, Mapping) or not isinstance(conf.get("name"), str):
            raise ConfigError(f"configurations[{i}]", "expected a mapping with 'name' and 'arguments'")
        cname = conf["name"]
        if cname not in _ACTION_VALUES:
            raise ConfigError(
                f"configurations[{i}].name", f"unknown action {cname!r}; valid actions: {_VALID_ACTIONS}"
            )
        args = conf.get("arguments") or {}
        if not isinstance(args, Mapping):
            raise ConfigError(f"configurations[{i}].arguments", "expected a mapping")
        configurations[cname] = {str(k): args[k] for k in args}
    return SchedulerConfig(actions=actions, tiers=tuple(tiers), configurations=configurations)


#: Volcano's Helm chart default (installer/helm/chart/volcano/config/volcano-scheduler.conf).
DEFAULT_CONFIG: SchedulerConfig = parse_scheduler_config(
    {
        "actions": "enqueue, allocate, backfill",
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {
                "plugins": [
                    {"name": "overcommit"},
                    {"name": "drf", "enablePreemptable": False},
                    {"name": "predicates"},
                    {"name": "proportion"},
                    {"name": "nodeorder"},
                    {"name": "binpack"},
                ]
            },
        ],
    }
)


def config_problem(spec: SchedulerConfigSpec) -> str | None:
    """What makes ``spec`` a configuration a session cannot run with, or None.

    The projector refuses such a SchedulerConfigured at its door (``invalid-config``):
    folded, it would be the config in force, and every session would fail on it.
    """
    try:
        SchedulerConfig.from_spec(spec)
    except (ConfigError, TypeError, ValueError) as exc:
        return str(exc)
    return None
