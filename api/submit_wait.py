"""``tephra submit --wait``: what the projector made of each object produced.

A produced event is archived (its seq: the projection has folded it, in the
same transaction) or rejected with a code (``rejected_events``); the wait is
the projector's read-your-writes (:func:`projector.progress.wait_for_events`,
woken by its NOTIFY after each batch), never the broker's offsets.  It catches
what the checks before producing cannot see: a job of the same name
submitted by someone else since the projection was read (``duplicate-job``),
an event a deployment refuses (``unsigned``, ``not-permitted``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import asyncpg

from api.manifests import ManifestObject
from events.display import redact
from events.models import JobSubmitted
from projector.connections import DatabaseAccess, connect
from projector.errors import WaitTimeoutError
from projector.progress import EventFate, wait_for_events

__all__ = ["DEFAULT_WAIT_TIMEOUT", "ProjectionUnreachable", "fates_of", "rejection_text"]

#: Seconds ``--wait`` waits in all when ``--timeout`` is not given.
DEFAULT_WAIT_TIMEOUT: Final = 30.0


class ProjectionUnreachable(Exception):
    """The projection database cannot be read: what was produced cannot be followed."""


async def fates_of(
    database: DatabaseAccess | str, produced: Sequence[ManifestObject], timeout_s: float
) -> dict[str, EventFate]:
    """Each object's fate by event id, as far as the projector got within ``timeout_s``: an object
    it has neither archived nor rejected by then is absent."""
    try:
        conn = await connect(database)
    except (OSError, asyncpg.PostgresError) as exc:
        raise ProjectionUnreachable(f"cannot reach the projection database: {redact(str(exc))}") from None
    fates: dict[str, EventFate] = {}
    try:
        await wait_for_events(conn, [obj.event.id for obj in produced], timeout_s, fates=fates)
    except WaitTimeoutError:
        pass  # the caller names those still unknown
    except asyncpg.UndefinedTableError as exc:
        raise ProjectionUnreachable(
            f"the database has no projection yet ({exc}); run `tephra migrate`, then the projector"
        ) from None
    except (OSError, asyncpg.PostgresError) as exc:
        raise ProjectionUnreachable(f"lost the projection database: {redact(str(exc))}") from None
    finally:
        await conn.close()
    return fates


def rejection_text(obj: ManifestObject, fate: EventFate) -> str:
    """The projector's code and detail, and for a job whose name was taken the way out."""
    text = f"{fate.error}: {fate.detail}" if fate.detail else str(fate.error)
    if fate.error == "duplicate-job" and isinstance(obj.event, JobSubmitted):
        job_id = obj.event.data.job_id
        text += (
            f"; a job of that name had not finished when the projector came to it: cancel it with"
            f" `tephra cancel job {job_id}` and submit again once it has finished, wait for it to"
            " finish, or pick another name"
        )
    return text
