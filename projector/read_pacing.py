"""Reading the three topics in step by event time while the projector drains a backlog.

A fetch brings about as many bytes of every partition, and the topics' events
differ in size, so a backlog drained unpaced reads one topic hours of event
time ahead of another: the state then holds the jobs whose observations and
decisions are still unread, and observations read after their job retired
expire (``observation-expired``) though in step they would have applied.

Before each batch the runner asks :class:`ReadPacer` which partitions to
read.  A partition is *behind* when the broker holds records past its
position (``highwater``); the pace is the earliest clock of the roles whose
topics have a partition behind (the fold's ``role_clocks``, the newest event
time folded per topic role); a partition behind whose role is more than
``max_skew`` past that is held back, until the pace comes within
``max_skew``: the runner's ``getmany`` names the other partitions only.  Not
``consumer.pause()``: a paused partition's records fetched ahead are dropped
and fetched again once it resumes, and a backlog drained with pauses fetched
its topics again and again (over 1M events: 8 µs of the broker's CPU per
event against 5 held back, 1,001 MiB peak RSS against 300); held back, a
partition keeps what it fetched (aiokafka fetches no more for a partition
whose records wait) until it is read again.  The role that sets the pace is
never held back, and a partition at its end holds nothing back.  The fold
does not depend on it: this only chooses the reading order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["ReadPacer", "ahead"]


def ahead(behind: Mapping[TopicPartition, datetime], max_skew: timedelta) -> set[TopicPartition]:
    """The partitions of ``behind`` (each with its role's clock) more than ``max_skew`` past the earliest."""
    if not behind:
        return set()
    pace = min(behind.values())
    return {tp for tp, clock in behind.items() if clock - pace > max_skew}


class ReadPacer:
    """Which partitions to read next (see the module's docstring)."""

    def __init__(self, roles: Mapping[str, int], max_skew: timedelta) -> None:
        #: Topic -> its index in the fold's ``role_clocks``.
        self._roles = dict(roles)
        self._max_skew = max_skew
        #: Times a partition was held back after it had been read (each hold counts once).
        self.held_back = 0
        self._held: set[TopicPartition] = set()

    def readable(
        self,
        consumer: AIOKafkaConsumer,
        positions: Mapping[tuple[str, int], int],
        role_clocks: Sequence[datetime],
    ) -> tuple[TopicPartition, ...]:
        """The partitions to read now: every assigned one but those behind whose role is too far ahead.

        Empty when none is held back (``getmany()`` then reads them all).
        """
        behind: dict[TopicPartition, datetime] = {}
        assigned = consumer.assignment()
        for tp in assigned:
            role = self._roles.get(tp.topic)
            highwater = consumer.highwater(tp)
            if role is None or highwater is None or highwater <= positions.get((tp.topic, tp.partition), 0):
                continue
            behind[tp] = role_clocks[role]
        held = ahead(behind, self._max_skew)
        self.held_back += len(held - self._held)
        self._held = held
        if not held:
            return ()
        return tuple(sorted(assigned - held))
