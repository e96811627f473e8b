"""The plugin and action registry, built in one place.

No import-time registration: :func:`build_registry` returns the name →
factory maps, so tests can assemble any plugin set and the configuration can
be validated against them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.actions.allocate import AllocateAction
from scheduler.core.actions.backfill import BackfillAction
from scheduler.core.actions.enqueue import EnqueueAction
from scheduler.core.actions.preempt import PreemptAction
from scheduler.core.actions.reclaim import ReclaimAction
from scheduler.core.config import ACTION_NAMES, PLUGIN_NAMES, PluginOption
from scheduler.core.framework import Action, Plugin
from scheduler.core.plugins.binpack import BinpackPlugin
from scheduler.core.plugins.capacity import CapacityPlugin
from scheduler.core.plugins.conformance import ConformancePlugin
from scheduler.core.plugins.drf import DrfPlugin
from scheduler.core.plugins.gang import GangPlugin
from scheduler.core.plugins.nodeorder import NodeOrderPlugin
from scheduler.core.plugins.overcommit import OvercommitPlugin
from scheduler.core.plugins.predicates import PredicatesPlugin
from scheduler.core.plugins.priority import PriorityPlugin
from scheduler.core.plugins.proportion import ProportionPlugin
from scheduler.core.plugins.sla import SlaPlugin

__all__ = ["Registry", "build_registry"]

PluginFactory = Callable[[PluginOption, int], Plugin]
ActionFactory = Callable[[], Action]


@dataclass(frozen=True, slots=True)
class Registry:
    plugins: dict[str, PluginFactory]
    actions: dict[str, ActionFactory]


def build_registry() -> Registry:
    plugins: dict[str, PluginFactory] = {
        "binpack": BinpackPlugin,
        "capacity": CapacityPlugin,
        "conformance": ConformancePlugin,
        "drf": DrfPlugin,
        "gang": GangPlugin,
        "nodeorder": NodeOrderPlugin,
        "overcommit": OvercommitPlugin,
        "predicates": PredicatesPlugin,
        "priority": PriorityPlugin,
        "proportion": ProportionPlugin,
        "sla": SlaPlugin,
    }
    actions: dict[str, ActionFactory] = {
        "enqueue": EnqueueAction,
        "allocate": AllocateAction,
        "backfill": BackfillAction,
        "preempt": PreemptAction,
        "reclaim": ReclaimAction,
    }
    # The config module validates names against these tuples; keep them in step.
    if sorted(plugins) != sorted(PLUGIN_NAMES) or sorted(actions) != sorted(ACTION_NAMES):
        raise RuntimeError("registry and config.PLUGIN_NAMES / ACTION_NAMES disagree")
    return Registry(plugins=plugins, actions=actions)
