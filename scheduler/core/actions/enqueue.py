"""enqueue: move Pending PodGroups to Inqueue (Volcano ``actions/enqueue``).

Queues in queue order, round-robin; each Pending job of a queue is tried once
per session in job order.  A job without minResources is admitted without
asking any plugin; otherwise every JobEnqueueable vote must allow it.  A
rejected job does not block the jobs after it.
"""

from __future__ import annotations

from scheduler.core.actions.common import QueueRotation, job_heaps
from scheduler.core.config import ActionName
from scheduler.core.decisions import Enqueue
from scheduler.core.framework import Session
from scheduler.core.reasons import Reason
from scheduler.core.snapshot import PodGroupPhase
from scheduler.core.trace import EnqueueVerdict

__all__ = ["EnqueueAction"]


class EnqueueAction:
    name = ActionName.ENQUEUE

    def execute(self, ssn: Session) -> None:
        # A queue without Pending jobs would be dropped at its first pick, changing nothing.
        heaps = job_heaps(ssn, [job for job in ssn.jobs.values() if job.phase is PodGroupPhase.PENDING])
        rotation = QueueRotation(ssn, [ssn.queues[name] for name in sorted(heaps)])
        while rotation:
            queue = rotation.best()
            heap = heaps[queue.name]
            if not heap:
                rotation.drop(queue)
                continue
            job = heap.pop()
            if job.min_resources is None or ssn.job_enqueueable(job):
                ssn.job_enqueued(job)
                ssn.set_phase(job, PodGroupPhase.INQUEUE)
                ssn.forget(job.uid, "enqueue-rejected", "queue-closed")
                ssn.decisions.append(Enqueue(job.uid))
                ssn.step(EnqueueVerdict(job.uid, True))
            else:
                had_reasons = job.uid in ssn.reasons
                bucket = ssn.job_reasons(job.uid)
                if "enqueue-rejected" not in bucket and "queue-closed" not in bucket:
                    ssn.explain(
                        job.uid,
                        Reason("enqueue-rejected", "an enqueue plugin rejected the job", {}),
                    )
                    if had_reasons:  # the trace names a plugin's own reason only
                        bucket = ssn.job_reasons(job.uid)
                reason = bucket.get("enqueue-rejected") or bucket.get("queue-closed")
                ssn.step(
                    EnqueueVerdict(
                        job.uid,
                        False,
                        str(reason.detail.get("plugin", "")) if reason else "",
                        reason.message if reason else "",
                    )
                )
