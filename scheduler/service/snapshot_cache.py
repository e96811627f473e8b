"""Reuse what did not change: each job's snapshot and canonical form, across sessions.

A busy cluster changes a few jobs per session while it holds thousands, so
rebuilding every job (and canonicalising it for the digest) each session is
most of the shell's cost.  The projection reader reports what each folded
event touched (the fold's ``touched`` keys); a job is rebuilt when it or one
of its tasks was touched, everything when a priority class changed (pod
priorities are resolved from them) or the state was reloaded whole.

The result is exactly :func:`~scheduler.snapshot_builder.build_snapshot`
and :func:`~scheduler.service.digest.input_digest` of the state (the tests
compare them after every fold), only cheaper.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Final

from projector.state import ClusterState
from scheduler.core.snapshot import ClusterSnapshot, Job
from scheduler.service.digest import SPECIALISED, JobText, digest_of_texts, input_digest, job_text
from scheduler.snapshot_builder import build_snapshot, global_default, job_snapshot, snapshot_of

__all__ = ["SnapshotCache"]

_job: Final = operator.itemgetter(0)
_text: Final = operator.itemgetter(1)


class SnapshotCache:
    def __init__(self) -> None:
        #: job id -> (its snapshot or None when it is left out, its sort key and canonical JSON)
        self._jobs: dict[str, tuple[Job | None, JobText | None]] = {}
        #: task id -> job id, for tasks the fold touched after they left the state.
        self._task_jobs: dict[str, str] = {}
        self._job_tasks: dict[str, tuple[str, ...]] = {}
        self._dirty: set[str] = set()
        self._everything = True

    def invalidate(self) -> None:
        """Forget everything (the state was read afresh)."""
        self._everything = True

    def touched(self, state: ClusterState, keys: Iterable[tuple[str, str]]) -> None:
        """Note what one folded event changed (call after the fold, with the state it left)."""
        for kind, key in keys:
            if kind == "job":
                self._dirty.add(key)
            elif kind == "task":
                task = state.tasks.get(key)
                job = task.job if task is not None else self._task_jobs.get(key)
                if job is not None:
                    self._dirty.add(job)
            elif kind == "priority_class":
                self._everything = True

    def build(self, state: ClusterState) -> tuple[ClusterSnapshot, str]:
        """The snapshot of ``state`` and its input digest."""
        if not SPECIALISED:
            snapshot = build_snapshot(state)
            return snapshot, input_digest(snapshot)
        if self._everything:
            self._jobs.clear()
            self._task_jobs.clear()
            self._job_tasks.clear()
        else:
            for job_id in self._dirty:
                self._forget(job_id)
        self._dirty.clear()
        self._everything = False

        default_class = global_default(state.priority_classes)
        cached = self._jobs
        for job_id in sorted(state.jobs.keys() - cached.keys()):
            built = job_snapshot(state, state.jobs[job_id], default_class)
            cached[job_id] = (built, None if built is None else job_text(built))
            # The job's tasks as of now: a task the fold removes later is touched by
            # that event, before the next build forgets the job and its tasks.
            self._job_tasks[job_id] = tasks = tuple(state.jobs[job_id].tasks)
            for task_id in tasks:
                self._task_jobs[task_id] = job_id
        for gone in sorted(cached.keys() - state.jobs.keys()):
            self._forget(gone)
        # In the state's order; a job left out has no text.  Each pass runs in C: at 100k jobs
        # a loop of Python statements per job cost more than the rest of the build.
        kept = list(filter(_text, map(cached.__getitem__, state.jobs)))
        snapshot = snapshot_of(state, tuple(map(_job, kept)))
        return snapshot, digest_of_texts(snapshot, list(map(_text, kept)))

    def held(self) -> tuple[frozenset[str], frozenset[str]]:
        """The job ids and task ids the cache keeps anything about (at most the state's)."""
        jobs = {*self._jobs, *self._job_tasks, *self._task_jobs.values()}
        return frozenset(jobs), frozenset(self._task_jobs)

    def _forget(self, job_id: str) -> None:
        """Drop the job's entry and its tasks' (a retired job leaves no trace)."""
        self._jobs.pop(job_id, None)
        for task_id in self._job_tasks.pop(job_id, ()):
            if self._task_jobs.get(task_id) == job_id:
                del self._task_jobs[task_id]
