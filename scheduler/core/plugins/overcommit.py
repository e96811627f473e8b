"""overcommit: admit jobs while Σ minResources fits ``total × factor − used``.

The factor (argument ``overcommit-factor``, default 1.2, values below 1 fall
back to 1.2) is kept as an exact ``Fraction`` of its decimal text, so the
comparison ``inqueue + request <= total × factor − used`` is exact.
"""

from __future__ import annotations

from fractions import Fraction

from scheduler.core.config import PluginName
from scheduler.core.framework import PERMIT, REJECT, Session
from scheduler.core.plugins.base import PluginBase
from scheduler.core.plugins.queue_accounting import (
    add_into,
    allocated_task_num,
    describe,
    requested_dims,
)
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PodGroupPhase
from scheduler.core.state import JobState, sub_positive

__all__ = ["OvercommitPlugin"]

_DEFAULT_FACTOR = Fraction(6, 5)


class OvercommitPlugin(PluginBase):
    name = PluginName.OVERCOMMIT

    def on_session_open(self, ssn: Session) -> None:
        self.ssn = ssn
        try:
            factor = Fraction(str(self.argument("overcommit-factor", "1.2")))
        except (ValueError, ZeroDivisionError):
            factor = _DEFAULT_FACTOR
        self.factor = factor if factor >= 1 else _DEFAULT_FACTOR
        nodes = ssn.nodes
        used_vec = (nodes.allocatable - nodes.idle).sum(axis=0) if len(nodes) else None
        self.used = {
            name: int(used_vec[i]) if used_vec is not None else 0 for i, name in enumerate(ssn.dims.names)
        }
        self.total = dict(ssn.total)
        self.inqueue: dict[str, int] = {}
        for job in ssn.jobs.values():
            if job.min_resources is None:
                continue
            if job.phase is PodGroupPhase.INQUEUE:
                add_into(self.inqueue, job.min_resources)
            elif job.phase is PodGroupPhase.RUNNING and allocated_task_num(job) >= job.min_member:
                add_into(self.inqueue, sub_positive(job.min_resources, job.allocated))
        ssn.add_job_enqueueable(self, self._enqueueable)
        ssn.add_job_enqueued(self, self._enqueued)

    def _idle(self, name: str) -> Fraction:
        return self.total.get(name, 0) * self.factor - self.used.get(name, 0)

    def _enqueueable(self, job: JobState) -> int:
        if job.min_resources is None:
            return PERMIT
        short = {}
        for d in requested_dims(job.min_resources):
            idle = self._idle(d)
            want = self.inqueue.get(d, 0) + job.min_resources[d]
            if want > idle:
                short[d] = {
                    "inqueue": self.inqueue.get(d, 0),
                    "request": job.min_resources[d],
                    "total": self.total.get(d, 0),
                    "used": self.used.get(d, 0),
                    "factor": float(self.factor),
                    "idle": float(idle),
                }
        if not short:
            return PERMIT
        names = ", ".join(f"overused {d}" for d in short)
        numbers = "; ".join(
            f"{d}: inqueue {describe(v['inqueue'], d)} + request {describe(v['request'], d)} > "  # type: ignore[arg-type]
            f"total {describe(v['total'], d)} x {float(self.factor):g} - used {describe(v['used'], d)}"  # type: ignore[arg-type]
            for d, v in short.items()
        )
        self.ssn.explain(
            job.uid,
            Reason(
                "enqueue-rejected",
                f"resource in cluster is overused: {names} ({numbers})",
                {"plugin": self.name, "resources": short},
            ),
        )
        return REJECT

    def _enqueued(self, job: JobState) -> None:
        if job.min_resources is not None:
            add_into(self.inqueue, job.min_resources)
