"""conformance: never evict critical pods (system-*-critical, kube-system)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.core.config import PluginName
from scheduler.core.framework import Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.state import TaskState

__all__ = ["ConformancePlugin"]

_CRITICAL = ("system-cluster-critical", "system-node-critical")


def _evictable(preemptor: TaskState, candidates: Sequence[TaskState]) -> list[TaskState]:
    del preemptor
    return [t for t in candidates if t.priority_class not in _CRITICAL and t.namespace != "kube-system"]


class ConformancePlugin(PluginBase):
    name = PluginName.CONFORMANCE

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_preemptable(self, _evictable)
        ssn.add_reclaimable(self, _evictable)
