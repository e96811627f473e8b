"""Whether a partition still holds what the projector consumed from it: a broker that lost its data is caught.

A broker restarted empty (the embedded Tansu keeps topics in memory) serves
new topics under the old names.  The stored position alone cannot tell: once
more records than it were produced, the new log reaches past it, and resuming
there would silently skip the new records below it.  So before resuming a
partition at a stored position, the projector re-reads the newest record it
archived from that partition and compares event ids: the same id there means
the same log; another id, or no record, means the broker lost its data and
the partition is read again from its start (archived ids are skipped as
duplicates; the archive and the projection stay as they are).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

import asyncpg

from events.serde import EventDecodeError, decode
from projector.plan import id_hint

__all__ = ["IdentityCheck", "Verdict", "identity_check"]

# The newest archived record of the partition below the stored position; the backward scan of
# the seq index stops at it (a start-up query, once per partition).
_NEWEST_ARCHIVED: Final = (
    "SELECT kafka_offset, event_id FROM event_log"
    " WHERE topic = $1 AND partition = $2 AND kafka_offset < $3 ORDER BY seq DESC LIMIT 1"
)


class Verdict(Enum):
    SAME_LOG = "same-log"
    LOST = "lost"
    #: The log starts past the record (retention deleted it): nothing to compare with.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class IdentityCheck:
    """Read ``offset`` first: it must hold ``event_id``; then resume at ``resume``."""

    offset: int
    event_id: str
    resume: int

    def verdict(self, first_offset: int, value: bytes | None) -> Verdict:
        """What the first record the broker returned from ``offset`` on says."""
        if first_offset > self.offset:
            return Verdict.UNKNOWN
        return Verdict.SAME_LOG if _holds(value, self.event_id) else Verdict.LOST

    def ended_before(self, highwater: int) -> bool:
        """Whether a partition ending at ``highwater`` lacks the record (lost, as far back as that)."""
        return highwater <= self.offset


def _holds(value: bytes | None, event_id: str) -> bool:
    """Whether the record ``value`` is the event ``event_id`` (its bytes' id hint, else decoded)."""
    if value is None:
        return False
    if id_hint(value) == event_id:
        return True
    try:
        return decode(value).id == event_id
    except EventDecodeError:
        return False


async def identity_check(
    conn: asyncpg.Connection, topic: str, partition: int, position: int
) -> IdentityCheck | None:
    """The check to run before resuming ``topic[partition]`` at ``position`` (None: nothing archived)."""
    if position <= 0:
        return None
    row = await conn.fetchrow(_NEWEST_ARCHIVED, topic, partition, position)
    if row is None:
        return None
    return IdentityCheck(offset=row["kafka_offset"], event_id=row["event_id"], resume=position)
