"""A networkTopology the configuration does not enforce is named, never silently dropped."""

from __future__ import annotations

import dataclasses

from scheduler.core.config import parse_scheduler_config
from scheduler.core.snapshot import Job, NetworkTopology
from scheduler.service.topology_check import unenforced_topologies
from tests.core.builders import job, task

WITHOUT = {"actions": "enqueue, allocate", "tiers": [{"plugins": [{"name": "gang"}, {"name": "predicates"}]}]}
WITH = {
    "actions": "enqueue, allocate",
    "tiers": [{"plugins": [{"name": "gang"}, {"name": "predicates"}, {"name": "network-topology-aware"}]}],
}


def _jobs() -> list[Job]:
    plain = job("plain", [task("plain", 0)])
    tight = dataclasses.replace(job("tight", [task("tight", 0)]), network_topology=NetworkTopology("hard", 1))
    loose = dataclasses.replace(job("loose", [task("loose", 0)]), network_topology=NetworkTopology("soft"))
    return [tight, plain, loose]


def test_jobs_with_a_topology_are_named_when_the_plugin_is_not_configured() -> None:
    jobs = _jobs()
    assert unenforced_topologies(jobs, parse_scheduler_config(WITHOUT)) == tuple(
        sorted(j.uid for j in jobs if j.network_topology is not None)
    )
    assert len(unenforced_topologies(jobs, parse_scheduler_config(WITHOUT))) == 2


def test_nothing_is_named_when_the_plugin_enforces_them() -> None:
    assert unenforced_topologies(_jobs(), parse_scheduler_config(WITH)) == ()
