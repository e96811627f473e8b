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
from events.pending_lists import last_change
from projector.projection_rows import ProjectionWrite, StagedRows, document_json
from projector.state import ClusterState

__all__ = ["NewestPendingRows"]

_UPSERT: Final = (
    "INSERT INTO newest_pending (job, entry) SELECT job, entry FROM tephra_stage_pending"
    " ON CONFLICT (job) DO UPDATE SET entry = EXCLUDED.entry"
)


class NewestPendingRows:
    """What ``newest_pending`` holds after the batches prepared so far, and the writes of the next."""

    __slots__ = ("_held", "_list")

    def __init__(self) -> None:
        #: job -> entry the table holds; None until written once (then the table is rewritten whole,
        #: whatever a previous projector or an older version left in it).
        self._held: dict[str, PendingJob] | None = None
        #: The list whose entries ``_held`` holds.
        self._list: tuple[PendingJob, ...] = ()

    def writes(self, state: ClusterState) -> list[ProjectionWrite]:
        """The writes that bring the table to the state's newest session's list (empty when it is None).

        Call it when the batch recorded a session: otherwise the newest list is
        unchanged.  A list the fold made from the held one by a change
        (events.pending_lists) is written from the change; another is compared
        with the held entries: unchanged entries are the same objects as in the
        previous list, so most are told apart by identity, a new object by value.
        """
        newest = next(reversed(state.sessions.values()), None)
        pending = () if newest is None or newest.pending is None else newest.pending
        held = self._held
        out: list[ProjectionWrite] = []
        if held is None:
            out.append(("DELETE FROM newest_pending", ()))
            held = self._held = {}
            changed, cleared = self._diff(held, pending)
        elif (change := last_change(self._list, pending)) is not None:
            changed = [e for e in change.put if held.get(e.job) != e]
            cleared = change.removed
            for job in cleared:
                del held[job]
            held.update({e.job: e for e in change.put})
        else:
            changed, cleared = self._diff(held, pending)
        self._list = pending
        if cleared:
            out.append(("DELETE FROM newest_pending WHERE job = ANY($1::text[])", (cleared,)))
        if changed:
            rows = [(e.job, document_json(json_form(e))) for e in changed]
            out.append(StagedRows("tephra_stage_pending", ("job", "entry"), rows, _UPSERT))
        return out

    def _diff(
        self, held: dict[str, PendingJob], pending: tuple[PendingJob, ...]
    ) -> tuple[list[PendingJob], list[str]]:
        """The entries of ``pending`` that differ from the held ones, the held jobs it does not
        name (in job order); ``pending`` is held from now on (the last entry of a job)."""
        now = {entry.job: entry for entry in pending}
        self._held = now
        changed = [e for job, e in now.items() if (old := held.get(job)) is not e and old != e]
        return changed, sorted(job for job in held if job not in now)
