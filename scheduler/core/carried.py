"""Job working states carried from one session to the next (an optional cache the caller owns).

Building a job's :class:`~scheduler.core.state.JobState` and its tasks is a fifth of a session
at 100,000 pending jobs, and a job's snapshot is the same object session after session while
nothing happens to it (the service's snapshot cache keeps unchanged jobs): the waiting backlog
and the running jobs alike.  :class:`CarriedJobs` keeps each job's working state as a session
built it, and the next session takes it instead of building it again when:

* the snapshot's job is the *same object* (a snapshot is immutable; the entry holds the job,
  so its identity cannot be reused by another);
* the session that used it last left it exactly as built (:meth:`CarriedJob.as_built`): phase,
  every task in the status it was built with, none placed or tentatively placed, no resource
  name newly counted in the job's totals;
* the resource dimensions are the same (tasks' vectors and shape ids come from them: the
  :class:`~scheduler.core.state.ResourceDims` is carried with the states, so a shape keeps its
  id and a new shape gets a new one).

What a state reads from the rest of the snapshot is set again on every take (the job's
priority, from the priority classes; its rank among the session's jobs; the node rows of its
tasks on nodes, which the session's node table accounts again), so a carried state is what a
fresh build would give, field for field; shape ids are cache keys only.  A session takes the
states at its start and gives back those it left as built at its end: one that fails half-way
leaves the cache empty, and the next builds everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from scheduler.core.snapshot import Job, PodGroupPhase, Task, TaskStatus
from scheduler.core.state import JobState, ResourceDims, TaskState

__all__ = ["CarriedJob", "CarriedJobs"]

#: Past this many interned shapes the carried dimensions are dropped with every state (a
#: shape's id lives as long as the dimensions; shapes of jobs long gone would pile up).
_MAX_SHAPES: Final = 65_536


class CarriedJob:
    """One job's working state as its session built it, with what the session reads of it."""

    __slots__ = (
        "allocated_names",
        "best_effort_roles",
        "job",
        "labels",
        "on_node",
        "phase",
        "state",
        "tasks",
        "terms",
    )

    def __init__(
        self,
        job: Job,
        state: JobState,
        labels: tuple[tuple[str, Mapping[str, str]], ...],
        terms: tuple[tuple[str, Task], ...],
        on_node: tuple[tuple[TaskState, str], ...],
    ) -> None:
        #: the snapshot's job (kept alive: a carried state is taken only for this very object).
        self.job = job
        self.state = state
        #: the phase it was built with (the snapshot's), and its tasks: (uid, state, status).
        self.phase: PodGroupPhase = state.phase
        self.tasks: tuple[tuple[str, TaskState, TaskStatus], ...] = tuple(
            (t.uid, t, t.status) for t in state.tasks
        )
        #: how many names the job's allocated totals and pending BestEffort counts by role had
        #: (a session only ever adds names to them: the same count is the same names).
        self.allocated_names = len(state.allocated)
        self.best_effort_roles = len(state.role_pending_best_effort)
        #: (task uid, labels) of its tasks with labels; (task uid, task) of those with pod terms.
        self.labels = labels
        self.terms = terms
        #: (task, node name) of its tasks on a node, in task order: each session finds their
        #: rows in its own node table and accounts them there.
        self.on_node = on_node

    def as_built(self) -> bool:
        """Whether the session left the state as it was built (every change a session makes to
        a job shows in one of these fields: the gang counters and the allocated totals follow
        from the tasks' statuses, and a task changes node only when placed, which sets its
        ``placed_seq``)."""
        state = self.state
        if (
            state.phase is not self.phase
            or len(state.allocated) != self.allocated_names
            or len(state.role_pending_best_effort) != self.best_effort_roles
            or len(state.tasks) != len(self.tasks)
        ):
            return False
        for _, task, status in self.tasks:
            if (
                task.status is not status
                or task.placed_seq != -1
                or task.tentative
                or task.schedulable_on is not None
            ):
                return False
        return True


class CarriedJobs:
    """The cache: pass the same instance to every session of one scheduler (never two at once)."""

    def __init__(self) -> None:
        self._dims: ResourceDims | None = None
        self._jobs: dict[str, CarriedJob] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def dims(self, names: set[str]) -> ResourceDims:
        """The session's dimensions: the carried ones when the names are the same (the states
        were built with them), else new ones and nothing carried."""
        dims = self._dims
        fresh = ResourceDims(names)
        if dims is None or dims.names != fresh.names or len(dims.shape_ids) > _MAX_SHAPES:
            self.drop()
            self._dims = dims = fresh
        return dims

    def take(self) -> dict[str, CarriedJob]:
        """Every carried state, by job uid; the cache holds none until :meth:`give_back`."""
        jobs, self._jobs = self._jobs, {}
        return jobs

    def give_back(self, jobs: dict[str, CarriedJob]) -> None:
        for entry in self._jobs.values():  # only if another session gave some back meanwhile
            release(entry.state)
        self._jobs = jobs

    def drop(self) -> None:
        for entry in self._jobs.values():
            release(entry.state)
        self._jobs = {}
        self._dims = None


def release(state: JobState) -> None:
    """Cut the cycle between a state and its tasks, so reference counting frees them at once."""
    state.tasks.clear()
