"""The projector: Kafka topics -> the hash-chained archive and the projected cluster state.

Modules, one responsibility each:

* :mod:`projector.state` — ``ClusterState`` (mutable on purpose, equal by value) and its JSON form;
* :mod:`projector.fold` — ``apply(state, seq, event)``, THE pure fold;
* :mod:`projector.archive` — the archived row format and the hash chain;
* :mod:`projector.migrate` — versioned SQL migrations under an advisory lock;
* :mod:`projector.projection_rows` — the projection's rows and statements as of a state;
* :mod:`projector.projection` — the projection tables: run those statements, load back;
* :mod:`projector.plan` — decode a batch, fold it, plan every value its commit writes;
* :mod:`projector.writer` — one batch of records -> one PostgreSQL transaction;
* :mod:`projector.checkpoints` — signed checkpoints of the committed chain head, published;
* :mod:`projector.reconstruct` — ``state_at``, ``load_projection``, ``rebuild_projection``, ``verify_chain``;
* :mod:`projector.progress` — read-your-writes: ``wait_for_session``, ``wait_for_event``, ``wait_for_seq``;
* :mod:`projector.service` — the consumer service (``run_projector``), run by ``tephra projector``;
* :mod:`projector.settings` — its settings; :mod:`projector.heap` — the collector policy;

The scheduler builds its snapshot from :class:`~projector.state.ClusterState`
(``load_projection`` at the live seq, ``state_at`` for replay) and, after
publishing a SessionCommitted, calls ``wait_for_session`` before its next
session.

``pip install`` may compile the per-event modules with mypyc (setup.py's
``PROJECTOR_MODULES``, one unit); :func:`compiled` says whether they run as
extensions.
"""

from importlib.machinery import EXTENSION_SUFFIXES

from projector import fold
from projector.fold import FoldOutcome, apply
from projector.state import ClusterState


def compiled() -> bool:
    """Whether the projector's per-event modules run as mypyc extensions rather than their sources."""
    return fold.__file__.endswith(tuple(EXTENSION_SUFFIXES))


__all__ = ["ClusterState", "FoldOutcome", "apply", "compiled"]
