"""Jobs that ask for a network topology the scheduler configuration does not enforce.

Without the network-topology-aware plugin Volcano's allocate searches the cluster top alone, so
a job's ``networkTopology`` has no effect, and Tephra does the same (docs/scheduling.md,
Network topology).  The job is placed without a constraint it asked for: the live scheduler
says so in its log instead of dropping the field without a word.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.config import PluginName, SchedulerConfig
from scheduler.core.snapshot import Job

__all__ = ["unenforced_topologies"]


def unenforced_topologies(jobs: Iterable[Job], config: SchedulerConfig) -> tuple[str, ...]:
    """The uids, sorted, of the jobs with a ``networkTopology`` that ``config`` ignores."""
    if PluginName.NETWORK_TOPOLOGY_AWARE in config.plugin_names():
        return ()
    return tuple(sorted(j.uid for j in jobs if j.network_topology is not None))
