"""The gang checks of a job's working state against their definitions (Volcano's CheckTaskValid,
CheckTaskReady, CheckTaskPipelined), read from the tasks themselves.

``JobState`` keeps its per-role minimums sorted and totalled once per session and its counters
incrementally; whatever the roles, minimums and task statuses, the answers must be the ones
counted task by task.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from scheduler.core.snapshot import PodGroupPhase, TaskStatus
from scheduler.core.state import READY_STATUSES, JobState, TaskState

ROLES = ("ps", "worker", "chief")
VALID = READY_STATUSES | {TaskStatus.PIPELINED, TaskStatus.PENDING}


def _task(job: JobState, number: int, role: str, status: TaskStatus, best_effort: bool) -> TaskState:
    vec = np.zeros(3, dtype=np.int64)
    return TaskState(
        f"t{number}", f"t{number}", "ns", job, role, {}, vec, (0, 0, 0), (), status, -1, 1, False,
        best_effort, None, None, (), (), (), 0.0, None, (), 0,
    )  # fmt: skip


def _role_count(tasks: list[TaskState], role: str, statuses: frozenset[TaskStatus]) -> int:
    return sum(1 for t in tasks if t.role == role and t.status in statuses)


def _pending_best_effort(tasks: list[TaskState], role: str) -> int:
    return sum(1 for t in tasks if t.role == role and t.best_effort and t.status is TaskStatus.PENDING)


@given(
    minimums=st.dictionaries(st.sampled_from(ROLES), st.integers(0, 3), max_size=3),
    min_member=st.integers(0, 6),
    tasks=st.lists(
        st.tuples(st.sampled_from(ROLES), st.sampled_from(list(TaskStatus)), st.booleans()), max_size=8
    ),
    moves=st.lists(st.tuples(st.integers(0, 7), st.sampled_from(list(TaskStatus))), max_size=6),
)
def test_the_gang_checks_equal_their_definitions(
    minimums: dict[str, int],
    min_member: int,
    tasks: list[tuple[str, TaskStatus, bool]],
    moves: list[tuple[int, TaskStatus]],
) -> None:
    job = JobState(
        uid="ns/j", namespace="ns", name="j", queue="q", min_member=min_member, min_task_member=minimums,
        min_resources=None, priority=0, phase=PodGroupPhase.INQUEUE, created=0.0, priority_class=None,
    )  # fmt: skip
    for number, (role, status, best_effort) in enumerate(tasks):
        job.add_task(_task(job, number, role, status, best_effort))
    for index, status in moves:  # counters kept incrementally as tasks change status
        if index < len(job.tasks):
            job.set_status(job.tasks[index], status)
    members = job.tasks
    applies = bool(minimums) and min_member >= sum(minimums.values())
    valid = not applies or all(
        _role_count(members, role, VALID) >= need for role, need in minimums.items() if need > 0
    )
    ready = not applies or all(
        _role_count(members, role, READY_STATUSES) + _pending_best_effort(members, role) >= need
        for role, need in minimums.items()
    )
    pipelined = not applies or all(
        _role_count(members, role, READY_STATUSES | {TaskStatus.PIPELINED})
        + _pending_best_effort(members, role)
        >= need
        for role, need in minimums.items()
    )
    assert job.task_min_total == sum(minimums.values())
    assert job.check_task_valid() is valid
    assert job.check_task_ready() is ready
    assert job.check_task_pipelined() is pipelined
