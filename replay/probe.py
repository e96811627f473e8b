"""Re-running one recorded session on changed inputs, within a time budget.

Explain's two searches — the blockers hidden behind the first refusal
(:mod:`replay.blockers`) and what would have let the job fit
(:mod:`replay.counterfactual`) — both ask the same question many times: "run
the recorded session again on this modified snapshot (or config); is the job
placed, and if not, why not?".  :class:`Probe` answers it, counts the
re-runs, reports progress, and stops the search when its wall-clock budget is
spent (:class:`OutOfBudget`), so an explain on a large backlog answers in
seconds with what it found so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from replay import engine
from scheduler.core.config import SchedulerConfig
from scheduler.core.reasons import Reason
from scheduler.core.session import SessionResult
from scheduler.core.snapshot import ClusterSnapshot, Job, TaskStatus

__all__ = ["DEFAULT_BUDGET_SECONDS", "PLACED", "OutOfBudget", "Outcome", "Probe", "Progress", "placed_tasks"]

#: The search budget when none is given (``replay explain --budget``, ``TEPHRA_EXPLAIN_BUDGET``).
DEFAULT_BUDGET_SECONDS = 5.0

#: ``(re-runs so far, seconds spent, budget in seconds or None)``.
Progress = Callable[[int, float, float | None], None]

#: Statuses that count as "placed" for the gang minimum after the session.
PLACED = frozenset({TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING, TaskStatus.ALLOCATED})


class OutOfBudget(Exception):
    """The search's time budget is spent: stop and report what was found."""


def placed_tasks(snapshot: ClusterSnapshot, result: SessionResult, job_id: str) -> int:
    """Tasks of ``job_id`` placed after the session: already on a node, plus this session's binds."""
    job = next((j for j in snapshot.jobs if j.uid == job_id), None)
    already = sum(1 for t in job.tasks if t.status in PLACED) if job is not None else 0
    bound = sum(1 for d in engine.decisions_of(result) if d.kind == "bind" and d.job == job_id)
    return already + bound


@dataclass(frozen=True, slots=True)
class Outcome:
    """One re-run as far as the job is concerned."""

    fits: bool
    #: The job's ranked reasons in the re-run (empty when it fits).
    reasons: tuple[Reason, ...]
    result: SessionResult


class Probe:
    """Re-runs the session of ``snapshot`` / ``config`` / ``now`` on modified inputs, for ``job``."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: SchedulerConfig,
        now: datetime,
        flags: Iterable[str],
        job: Job,
        *,
        budget: float | None = DEFAULT_BUDGET_SECONDS,
        progress: Progress | None = None,
        clock: Callable[[], float] = time.monotonic,
        pace: float = 0.0,
    ) -> None:
        """``pace``: how long one re-run is expected to take (e.g. the caller's own re-run)."""
        self.snapshot = snapshot
        self.config = config
        self.now = now
        self.flags = tuple(flags)
        self.job = job
        self.budget = budget
        self.runs = 0
        self.cut = False
        self._progress = progress
        self._clock = clock
        self._began = clock()
        self._slowest = pace

    @property
    def elapsed(self) -> float:
        return self._clock() - self._began

    def outcome(self, snapshot: ClusterSnapshot, result: SessionResult) -> Outcome:
        """What ``result`` (a run of ``snapshot``) did for the job."""
        fits = placed_tasks(snapshot, result, self.job.uid) >= max(self.job.min_member, 1)
        reasons = () if fits else tuple(result.pending.get(self.job.uid, ()))
        return Outcome(fits, reasons, result)

    def run(self, snapshot: ClusterSnapshot, config: SchedulerConfig | None = None) -> Outcome:
        """Re-run the session on ``snapshot`` (and ``config``, default the recorded one).

        Raises:
            OutOfBudget: this run would not end within the budget (the search stops).
        """
        # A run is started only if it can end within the budget, at the pace of the slowest so far.
        began = self.elapsed
        if self.budget is not None and began + self._slowest > self.budget:
            self.cut = True
            raise OutOfBudget
        result = engine.run(snapshot, config or self.config, self.now, self.flags)
        self._slowest = max(self._slowest, self.elapsed - began)
        self.runs += 1
        if self._progress is not None:
            self._progress(self.runs, self.elapsed, self.budget)
        return self.outcome(snapshot, result)
