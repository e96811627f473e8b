"""Combination rules of the extension points (semantics.md §2) and the statement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from scheduler.core.config import PluginOption, parse_scheduler_config
from scheduler.core.framework import ABSTAIN, PERMIT, REJECT, Session
from scheduler.core.snapshot import TaskStatus
from scheduler.core.state import TaskState
from scheduler.core.statement import Statement
from tests.core.builders import job, node, snapshot, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = parse_scheduler_config({"actions": "allocate", "tiers": []})


def session() -> Session:
    running = [task("a", i, status=TaskStatus.RUNNING, on="n1") for i in range(3)]
    return Session(
        snapshot([node("n1"), node("n2")], [job("a", running, min_member=1), job("b", [task("b", 0)])]),
        CONFIG,
        NOW,
    )


@dataclass(frozen=True)
class Slot:
    """A plugin's place in the configuration (PluginSlot), without a plugin."""

    option: PluginOption
    tier: int


def opt(name: str, tier: int = 0, **flags: bool) -> Slot:
    return Slot(PluginOption(name, flags), tier)


def test_first_plugin_that_orders_wins_then_identity() -> None:
    ssn = session()
    a, b = ssn.jobs["ns/a"], ssn.jobs["ns/b"]
    ssn.add_job_order(opt("p1"), lambda j: 0)  # cannot tell them apart
    ssn.add_job_order(opt("p2", 1), lambda j: 0 if j is b else 1)  # b first
    ssn.add_job_order(opt("p3", 1), lambda j: 0 if j is a else 1)  # would say a
    assert sorted([a, b], key=ssn.job_key) == [b, a]


def test_ordering_falls_back_to_identity() -> None:
    ssn = session()
    a, b = ssn.jobs["ns/a"], ssn.jobs["ns/b"]
    assert sorted([b, a], key=ssn.job_key) == [a, b]


def test_disabled_flag_means_not_registered() -> None:
    ssn = session()
    ssn.add_job_ready(opt("p", enableJobReady=False), lambda j: False)
    assert ssn.job_ready(ssn.jobs["ns/a"])


def test_victims_intersect_within_a_tier() -> None:
    ssn = session()
    tasks = ssn.jobs["ns/a"].tasks
    ssn.add_preemptable(opt("x"), lambda p, c: list(c[:2]))
    ssn.add_preemptable(opt("y"), lambda p, c: list(c[1:]))
    verdict = ssn.preemptable(ssn.jobs["ns/b"].tasks[0], tasks)
    assert [t.uid for t in verdict.victims] == [tasks[1].uid]
    assert verdict.rule == "x+y"


def test_empty_vote_falls_through_to_next_tier() -> None:
    ssn = session()
    tasks = ssn.jobs["ns/a"].tasks
    ssn.add_preemptable(opt("x"), lambda p, c: list(c))
    ssn.add_preemptable(opt("veto"), lambda p, c: [])
    ssn.add_preemptable(opt("abstain", 1), lambda p, c: None)
    ssn.add_preemptable(opt("z", 1), lambda p, c: [c[2]])
    verdict = ssn.preemptable(ssn.jobs["ns/b"].tasks[0], tasks)
    assert [t.uid for t in verdict.victims] == [tasks[2].uid]
    assert verdict.rule == "z"


def test_no_voter_means_no_victims() -> None:
    ssn = session()
    assert ssn.preemptable(ssn.jobs["ns/b"].tasks[0], ssn.jobs["ns/a"].tasks).victims == ()


@pytest.mark.parametrize(
    ("tiers", "expected"),
    [
        ([[ABSTAIN]], True),  # nobody decides
        ([[PERMIT, REJECT]], False),  # a reject in the tier wins
        ([[PERMIT], [REJECT]], True),  # a permit decides at the end of its tier
        ([[ABSTAIN], [REJECT]], False),
    ],
)
def test_votes(tiers: list[list[int]], expected: bool) -> None:
    ssn = session()
    for t, votes in enumerate(tiers):
        for i, vote in enumerate(votes):
            ssn.add_job_pipelined(opt(f"p{t}{i}", t), lambda j, v=vote: v)
    assert ssn.job_pipelined(ssn.jobs["ns/a"]) is expected


def test_starving_decided_by_first_tier_with_functions() -> None:
    ssn = session()
    ssn.add_job_starving(opt("a", 1), lambda j: True)
    ssn.add_job_starving(opt("b", 1), lambda j: False)
    ssn.add_job_starving(opt("c", 2), lambda j: True)
    assert ssn.job_starving(ssn.jobs["ns/a"]) is False


def test_starving_defaults_to_false() -> None:
    assert session().job_starving(session().jobs["ns/a"]) is False


def test_statement_discard_undoes_in_reverse_order() -> None:
    ssn = session()
    seen: list[tuple[str, str]] = []
    ssn.on_allocate(lambda t: seen.append(("alloc", t.uid)))
    ssn.on_deallocate(lambda t: seen.append(("dealloc", t.uid)))
    pending: TaskState = ssn.jobs["ns/b"].tasks[0]
    victim = ssn.jobs["ns/a"].tasks[0]
    idle_before = ssn.nodes.idle.copy()
    stmt = Statement(ssn)
    stmt.evict(victim, action="preempt", preemptor=pending, rule="r")
    stmt.pipeline(pending, 0)
    assert victim.status is TaskStatus.RELEASING
    assert pending.status is TaskStatus.PIPELINED
    seen.clear()
    stmt.discard()
    assert seen == [("dealloc", pending.uid), ("alloc", victim.uid)]
    assert victim.status is TaskStatus.RUNNING
    assert pending.status is TaskStatus.PENDING
    assert (ssn.nodes.idle == idle_before).all()
    assert not ssn.nodes.releasing.any()
    assert not ssn.nodes.pipelined.any()
    assert ssn.decisions == []


def test_statement_commit_emits_bind_and_evict() -> None:
    ssn = session()
    pending = ssn.jobs["ns/b"].tasks[0]
    stmt = Statement(ssn)
    stmt.evict(ssn.jobs["ns/a"].tasks[0], action="reclaim", preemptor=pending, rule="gang")
    stmt.allocate(pending, 1)
    stmt.commit()
    kinds = [type(d).__name__ for d in ssn.decisions]
    assert kinds == ["Evict", "Bind"]
    assert pending.status is TaskStatus.BINDING
    assert ssn.decisions[1].to_event().node == "n2"
