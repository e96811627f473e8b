"""Whole pending lists in job order, changed a session at a time (``SessionCommittedData.pending_base``).

A big backlog restates a session's pending list as a change from the one
before: a 64th of the list and the jobs whose reasons changed, against 92k
entries at the goal's backlog.  Read naively, each change walks the whole
list (its entries' jobs into a dict, a sort, a new tuple): in the projector
that was half of its CPU per session (bench/projector_sql.py --sessions).
Here the last change is kept, with the jobs of the list it made: the next
change to that list finds its jobs by bisection and copies the rest in C, and
the projector writes the change to ``newest_pending`` without a walk of the
list (projector.newest_pending).
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from events.models import PendingJob

__all__ = ["PendingChange", "changed_pending", "in_job_order", "last_change"]

_job_of: Final = operator.attrgetter("job")


@dataclass(frozen=True, slots=True)
class PendingChange:
    """What :func:`changed_pending` did last: ``made`` from ``base``, by putting in ``put`` (the
    entries it holds from the change, in job order) and removing the ``removed`` jobs (in job
    order).  ``jobs`` are ``made``'s, in order: the next change is usually to it."""

    base: tuple[PendingJob, ...]
    made: tuple[PendingJob, ...]
    jobs: list[str]
    put: list[PendingJob]
    removed: list[str]


class _Last:
    """The last change made (one object, replaced whole: a reader in another thread sees one change)."""

    __slots__ = ("change",)

    def __init__(self) -> None:
        self.change = PendingChange((), (), [], [], [])


_LAST: Final = _Last()


def last_change(base: tuple[PendingJob, ...], made: tuple[PendingJob, ...]) -> PendingChange | None:
    """How :func:`changed_pending` made ``made`` from ``base``, when that was the last list it made."""
    change = _LAST.change
    return change if change.made is made and change.base is base else None


def changed_pending(
    base: Iterable[PendingJob], changed: Iterable[PendingJob], cleared: Iterable[str]
) -> tuple[PendingJob, ...]:
    """A whole pending list (in job order) from its base's and a session's change: the base's
    entries less the ``cleared`` jobs, with ``changed`` put in (the last entry of a job wins)."""
    base = tuple(base)
    last = _LAST.change
    if last.made is base:
        jobs = last.jobs
    else:
        jobs = list(map(_job_of, base))
        if not _strictly_ordered(jobs):
            return _by_dict(base, changed, cleared)
    entries = list(base)
    removed: set[int] = set()
    put: dict[str, PendingJob] = {}
    added: dict[str, PendingJob] = {}
    for job in cleared:
        if (index := _index(jobs, job)) is not None:
            removed.add(index)
    for entry in changed:
        put[entry.job] = entry
        if (index := _index(jobs, entry.job)) is not None:
            entries[index] = entry
            removed.discard(index)
        else:
            added[entry.job] = entry
    gone = [jobs[index] for index in sorted(removed)]
    if removed or added:
        entries, jobs = _spliced(entries, jobs, removed, added)
    made = tuple(entries)
    _LAST.change = PendingChange(base, made, jobs, [put[job] for job in sorted(put)], gone)
    return made


def in_job_order(pending: Sequence[PendingJob]) -> bool:
    """Whether ``pending`` names each job once, in job order (what :func:`changed_pending` makes)."""
    return pending is _LAST.change.made or _strictly_ordered(list(map(_job_of, pending)))


def _strictly_ordered(jobs: list[str]) -> bool:
    return all(map(operator.lt, jobs, islice(jobs, 1, None)))


def _index(jobs: list[str], job: str) -> int | None:
    index = bisect_left(jobs, job)
    return index if index < len(jobs) and jobs[index] == job else None


def _spliced(
    entries: list[PendingJob], jobs: list[str], removed: set[int], added: dict[str, PendingJob]
) -> tuple[list[PendingJob], list[str]]:
    """``entries`` (at ``jobs``) less the ``removed`` positions, with ``added`` put in job order."""
    # (position, 0 = insert before it | 1 = remove it, job): an insert at a position goes before
    # the entry there (bisect_left), so it sorts first.
    marks = sorted(
        [(bisect_left(jobs, job), 0, job) for job in added] + [(index, 1, "") for index in removed]
    )
    out_entries: list[PendingJob] = []
    out_jobs: list[str] = []
    start = 0
    for position, kind, job in marks:
        out_entries += entries[start:position]
        out_jobs += jobs[start:position]
        if kind == 0:
            out_entries.append(added[job])
            out_jobs.append(job)
            start = position
        else:
            start = position + 1
    out_entries += entries[start:]
    out_jobs += jobs[start:]
    return out_entries, out_jobs


def _by_dict(
    base: tuple[PendingJob, ...], changed: Iterable[PendingJob], cleared: Iterable[str]
) -> tuple[PendingJob, ...]:
    """:func:`changed_pending` of a base out of job order, or naming a job twice."""
    jobs = {p.job: p for p in base}
    for job in cleared:
        jobs.pop(job, None)
    for entry in changed:
        jobs[entry.job] = entry
    return tuple(jobs[job] for job in sorted(jobs))
