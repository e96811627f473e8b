"""Job working states carried from one session to the next (an optional cache the caller owns).

Building a job's :class:`~scheduler.core.state.JobState` and its tasks is a fifth of a session
at 100,000 pending jobs, and a waiting job's snapshot is the same object session after session
(the service's snapshot cache keeps unchanged jobs).  :class:`CarriedJobs` keeps, for each
job whose tasks were all Pending, the working state a session built, and the next session
takes it instead of building it again when:

* the snapshot's job is the *same object* (a snapshot is immutable; the entry holds the job,
  so its identity cannot be reused by another);
* the session that used it last left it exactly as built (:meth:`CarriedJob.as_built`): phase,
  every task Pending, off every node, never placed, nothing allocated;
* the resource dimensions are the same (tasks' vectors and shape ids come from them: the
  :class:`~scheduler.core.state.ResourceDims` is carried with the states, so a shape keeps its
  id and a new shape gets a new one).

What a state reads from the rest of the snapshot is set again on every take (the job's
priority, from the priority classes; its rank among the session's jobs), so a carried state is
what a fresh build would give, field for field; shape ids are cache keys only.  A session
takes the states at its start and gives back those it left as built at its end: one that fails
half-way leaves the cache empty, and the next builds everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from scheduler.core.snapshot import Job, PodGroupPhase, Task, TaskStatus
from scheduler.core.state import JobState, ResourceDims

__all__ = ["CarriedJob", "CarriedJobs"]

#: Past this many interned shapes the carried dimensions are dropped with every state (a
#: shape's id lives as long as the dimensions; shapes of jobs long gone would pile up).
_MAX_SHAPES: Final = 65_536


class CarriedJob:
    """One job's working state as its session built it, with what the session reads of it."""

    __slots__ = ("job", "labels", "phase", "state", "task_uids", "terms")

    def __init__(
        self,
        job: Job,
        state: JobState,
        labels: tuple[tuple[str, Mapping[str, str]], ...],
        terms: tuple[tuple[str, Task], ...],
    ) -> None:
        #: the snapshot's job (kept alive: a carried state is taken only for this very object).
        self.job = job
        self.state = state
        #: the phase it was built with (the snapshot's).
        self.phase: PodGroupPhase = state.phase
        self.task_uids: tuple[str, ...] = tuple(t.uid for t in state.tasks)
        #: (task uid, labels) of its tasks with labels; (task uid, task) of those with pod terms.
        self.labels = labels
        self.terms = terms

    def as_built(self) -> bool:
        """Whether the session left the state as it was built (every change a session makes to
        a job with only Pending tasks shows in one of these fields)."""
        state = self.state
        if state.phase is not self.phase or state.allocated or len(state.tasks) != len(self.task_uids):
            return False
        for task in state.tasks:
            if (
                task.status is not TaskStatus.PENDING
                or task.node != -1
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
