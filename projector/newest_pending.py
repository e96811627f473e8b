"""The newest session's pending list as the rows of ``newest_pending``, written as a change.

A backlog leaves most jobs pending with the same reasons from one session to
the next, and the fold keeps those entries' objects (projector.fold).  Writing
the list whole with the session's row cost PostgreSQL 24.4 MiB of JSON per
session at 92k pending jobs; here a session writes the entries that differ
from the list the table holds, and deletes the jobs that left it.  Readers look
a job up by id (api/views.py, api/demo.py, kube/bridge/status.py), and the load
reads the rows back in job order (projector.projection).

Pure like :mod:`projector.projection_rows`: the writes are built from the state
when a batch is prepared, and the table's content is tracked as of the newest
prepared batch (batches commit in that order; a failed commit ends the writer).
"""

from __future__ import annotations

from typing import Final

from events.jsonform import json_form
from events.models import PendingJob
from projector.projection_rows import ProjectionWrite, StagedRows, document_json
from projector.state import ClusterState

__all__ = ["NewestPendingRows"]

_UPSERT: Final = (
    "INSERT INTO newest_pending (job, entry) SELECT job, entry FROM tephra_stage_pending"
    " ON CONFLICT (job) DO UPDATE SET entry = EXCLUDED.entry"
)


class NewestPendingRows:
    """What ``newest_pending`` holds after the batches prepared so far, and the writes of the next."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        #: job -> entry the table holds; None until written once (then the table is rewritten whole,
        #: whatever a previous projector or an older version left in it).
        self._held: dict[str, PendingJob] | None = None

    def writes(self, state: ClusterState) -> list[ProjectionWrite]:
        """The writes that bring the table to the state's newest session's list (empty when it is None).

        Call it when the batch recorded a session: otherwise the newest list is
        unchanged.  Unchanged entries are the same objects as in the previous
        list, so most are told apart by identity; a new object is compared by value.
        """
        newest = next(reversed(state.sessions.values()), None)
        pending = () if newest is None or newest.pending is None else newest.pending
        now = {entry.job: entry for entry in pending}
        held, self._held = self._held, now
        out: list[ProjectionWrite] = []
        if held is None:
            out.append(("DELETE FROM newest_pending", ()))
            changed = list(now.values())
        else:
            if cleared := sorted(job for job in held if job not in now):
                out.append(("DELETE FROM newest_pending WHERE job = ANY($1::text[])", (cleared,)))
            changed = [e for job, e in now.items() if (old := held.get(job)) is not e and old != e]
        if changed:
            rows = [(e.job, document_json(json_form(e))) for e in changed]
            out.append(StagedRows("tephra_stage_pending", ("job", "entry"), rows, _UPSERT))
        return out
