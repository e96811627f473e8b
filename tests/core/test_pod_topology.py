"""Inter-pod affinity and topology spread: the cases the scenarios FID-11..15 do not reach."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from scheduler.core.config import parse_scheduler_config
from scheduler.core.decisions import Bind
from scheduler.core.session import run_session
from scheduler.core.snapshot import (
    LabelSelector,
    NodeSelectorRequirement,
    PodAffinityTerm,
    Task,
    TaskStatus,
    TopologySpreadConstraint,
)
from tests.core.builders import job, node, snapshot, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = parse_scheduler_config(
    {"actions": "allocate", "tiers": [{"plugins": [{"name": "gang"}, {"name": "predicates"}]}]}
)
APP_DB = LabelSelector(match_labels=(("app", "db"),))


def _with(t: Task, **fields: object) -> Task:
    return replace(t, **fields)  # type: ignore[arg-type]


def _binds(nodes: list[object], jobs: list[object]) -> dict[str, str]:
    result = run_session(snapshot(nodes, jobs), CONFIG, NOW)  # type: ignore[arg-type]
    return {d.task: d.node for d in result.decisions if isinstance(d, Bind)}


def test_the_first_pod_of_a_group_that_selects_itself_may_go_anywhere_with_the_key() -> None:
    term = PodAffinityTerm("zone", APP_DB)
    db = _with(task("db", 0), labels={"app": "db"}, pod_affinity=(term,))
    other = _with(task("o", 0), labels={"app": "other"}, pod_affinity=(term,))
    nodes = [node("n1"), node("n2", zone="b")]
    # No db pod exists yet: a db pod may start the group (on a node with the key), another may not.
    assert _binds(nodes, [job("db", [db], min_member=1)]) == {"ns/db-w-0": "n2"}
    assert _binds(nodes, [job("o", [other], min_member=1)]) == {}


def test_affinity_terms_look_in_their_own_namespace_unless_they_list_others() -> None:
    db = _with(task("db", 0, ns="data", status=TaskStatus.RUNNING, on="n2"), labels={"app": "db"})
    nodes = [node("n1", zone="a"), node("n2", zone="b")]
    own_namespace = _with(task("api", 0), pod_affinity=(PodAffinityTerm("zone", APP_DB),))
    listed = _with(task("api", 0), pod_affinity=(PodAffinityTerm("zone", APP_DB, ("data",)),))
    running = job("db", [db], ns="data", min_member=1)
    assert _binds(nodes, [running, job("api", [own_namespace], min_member=1)]) == {}
    assert _binds(nodes, [running, job("api", [listed], min_member=1)]) == {"ns/api-w-0": "n2"}


def test_min_domains_counts_missing_domains_as_empty() -> None:
    """Two zones exist but minDomains is 3: the minimum is 0, so each zone takes at most maxSkew."""
    spread = TopologySpreadConstraint(
        max_skew=1,
        topology_key="zone",
        selector=LabelSelector(match_expressions=(NodeSelectorRequirement("app", "In", ("x",)),)),
        min_domains=3,
    )
    pods = [_with(task("x", i), labels={"app": "x"}, topology_spread=(spread,)) for i in range(3)]
    placed = _binds([node("n1", zone="a"), node("n2", zone="b")], [job("x", pods, min_member=1)])
    assert sorted(placed.values()) == ["n1", "n2"]  # the third would make a zone hold 2 > 0 + 1
