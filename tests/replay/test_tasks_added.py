"""A TasksAdded in the archive: ``replay audit actions`` names who added what, ``replay explain``'s
timeline shows it (pure: archived events built in memory)."""

from __future__ import annotations

from replay.actions import actions_of
from replay.archive import ArchivedEvent
from replay.explain import timeline
from tests.events.samples import job_submitted, tasks_added


def _history() -> list[ArchivedEvent]:
    added = tasks_added().model_copy(update={"principal": "kube-bridge:default"})
    return [ArchivedEvent(1, job_submitted()), ArchivedEvent(2, added)]


def test_audit_actions_lists_the_tasks_added_to_a_job_and_who_added_them() -> None:
    rows = list(actions_of(_history(), job="research/llm-pretrain-7b"))
    assert [(r.seq, r.principal, r.action, r.object, r.detail) for r in rows] == [
        (1, None, "submit", "job/research/llm-pretrain-7b", "queue research"),
        (2, "kube-bridge:default", "add-tasks", "job/research/llm-pretrain-7b", "evaluator x1"),
    ]


def test_the_timeline_shows_the_tasks_that_joined() -> None:
    entries = timeline("research/llm-pretrain-7b", _history())
    assert [(e.kind, e.seq, e.text) for e in entries] == [
        ("submitted", 1, "submitted to queue research: 5 task(s), minAvailable 5"),
        ("tasks-added", 2, "tasks added: evaluator x1"),
    ]
