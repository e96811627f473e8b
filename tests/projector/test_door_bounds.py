"""The door's task bounds hold for tasks added to a job as for a job's submission (pure)."""

from __future__ import annotations

from events.models import TasksAdded, TaskSpec
from projector.door import Door, refusal
from tests.events.samples import tasks_added


def _adding(*replicas: int) -> TasksAdded:
    sample = tasks_added()
    specs = [TaskSpec(name=f"t{i}", replicas=n) for i, n in enumerate(replicas)]
    return sample.model_copy(update={"data": sample.data.model_copy(update={"tasks": specs})})


def test_tasks_added_beyond_the_bounds_are_refused_with_the_submissions_codes() -> None:
    door = Door(max_replicas_per_task=10, max_tasks_per_job=15)
    assert refusal(door, _adding(10, 5)) is None
    refused = refusal(door, _adding(11))
    assert refused is not None
    assert refused[0] == "too-many-replicas"
    refused = refusal(door, _adding(10, 6))
    assert refused is not None
    assert refused[0] == "too-many-tasks"
