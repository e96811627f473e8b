"""The plugin and action registry, built in one place.

No import-time registration: :func:`build_registry` returns the name →
factory maps.  The names are declared once, as :class:`~scheduler.core.config.PluginName`
and :class:`~scheduler.core.config.ActionName` (the configuration is validated
against them); the maps must cover every member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.core.actions.allocate import AllocateAction
from scheduler.core.actions.backfill import BackfillAction
from scheduler.core.actions.enqueue import EnqueueAction
from scheduler.core.actions.preempt import PreemptAction
from scheduler.core.actions.reclaim import ReclaimAction
from scheduler.core.config import ActionName, PluginName, PluginOption
from scheduler.core.framework import Action, Plugin
from scheduler.core.plugins.binpack import BinpackPlugin
from scheduler.core.plugins.capacity import CapacityPlugin
from scheduler.core.plugins.conformance import ConformancePlugin
from scheduler.core.plugins.drf import DrfPlugin
from scheduler.core.plugins.gang import GangPlugin
from scheduler.core.plugins.network_topology_aware import NetworkTopologyAwarePlugin
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
    plugins: dict[PluginName, PluginFactory]
    actions: dict[ActionName, ActionFactory]

    def plugin(self, option: PluginOption, tier: int) -> Plugin:
        """The plugin ``option`` names (a validated :class:`PluginName` value) at ``tier``."""
        return self.plugins[PluginName(option.name)](option, tier)

    def action(self, name: str) -> Action:
        return self.actions[ActionName(name)]()


def build_registry() -> Registry:
    plugins: dict[PluginName, PluginFactory] = {
        PluginName.BINPACK: BinpackPlugin,
        PluginName.CAPACITY: CapacityPlugin,
        PluginName.CONFORMANCE: ConformancePlugin,
        PluginName.DRF: DrfPlugin,
        PluginName.GANG: GangPlugin,
        PluginName.NETWORK_TOPOLOGY_AWARE: NetworkTopologyAwarePlugin,
        PluginName.NODEORDER: NodeOrderPlugin,
        PluginName.OVERCOMMIT: OvercommitPlugin,
        PluginName.PREDICATES: PredicatesPlugin,
        PluginName.PRIORITY: PriorityPlugin,
        PluginName.PROPORTION: ProportionPlugin,
        PluginName.SLA: SlaPlugin,
    }
    actions: dict[ActionName, ActionFactory] = {
        ActionName.ENQUEUE: EnqueueAction,
        ActionName.ALLOCATE: AllocateAction,
        ActionName.BACKFILL: BackfillAction,
        ActionName.PREEMPT: PreemptAction,
        ActionName.RECLAIM: ReclaimAction,
    }
    if len(plugins) != len(PluginName) or len(actions) != len(ActionName):
        raise RuntimeError("the registry lacks a declared plugin or action")
    return Registry(plugins=plugins, actions=actions)
