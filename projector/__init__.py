"""The projector: Kafka topics -> the hash-chained archive and the projected cluster state.

Modules, one responsibility each:

* :mod:`projector.state` — ``ClusterState`` (mutable on purpose, equal by value) and its JSON form;
* :mod:`projector.fold` — ``apply(state, seq, event)``, THE pure fold;
* :mod:`projector.archive` — the archived row format and the hash chain;
* :mod:`projector.migrate` — versioned SQL migrations under an advisory lock;
* :mod:`projector.projection` — the projection tables: write from the fold, load back;
* :mod:`projector.writer` — one batch of records -> one PostgreSQL transaction;
* :mod:`projector.reconstruct` — ``state_at``, ``load_projection``, ``verify_chain``;
* :mod:`projector.progress` — read-your-writes: ``wait_for_session``, ``wait_for_event``, ``wait_for_seq``;
* :mod:`projector.service` — the consumer service (``run_projector``); ``python -m projector``.

The scheduler builds its snapshot from :class:`~projector.state.ClusterState`
(``load_projection`` at the live seq, ``state_at`` for replay) and, after
publishing a SessionCommitted, calls ``wait_for_session`` before its next
session.
"""

from projector.fold import FoldOutcome, apply
from projector.state import ClusterState

__all__ = ["ClusterState", "FoldOutcome", "apply"]
