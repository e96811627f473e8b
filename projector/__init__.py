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
* :mod:`projector.reconstruct` — ``state_at``, ``load_projection``, ``rebuild_projection``, ``verify_chain``;
* :mod:`projector.progress` — read-your-writes: ``wait_for_session``, ``wait_for_event``, ``wait_for_seq``;
* :mod:`projector.service` — the consumer service (``run_projector``), run by ``tephra projector``;
* :mod:`projector.settings` — its settings; :mod:`projector.heap` — the collector policy;

The scheduler builds its snapshot from :class:`~projector.state.ClusterState`
(``load_projection`` at the live seq, ``state_at`` for replay) and, after
publishing a SessionCommitted, calls ``wait_for_session`` before its next
session.

Importing the package first decides whether the per-event modules (archive,
fold, jsonform, plan, projection_rows, state, storable), compiled by ``pip install``, run
compiled or from their sources; :data:`PROJECTOR_FORM` says which and why.
"""

from pathlib import Path

from events.native import CompiledUnit, choose_form, loaded_compiled

PROJECTOR = CompiledUnit("projector", Path(__file__).resolve().parent, every_module=False)
"""The compiled unit: the modules setup.py lists (its build record names them)."""

PROJECTOR_FORM = choose_form(PROJECTOR)

# After the choice: these load the chosen form.
from projector.fold import FoldOutcome, apply  # noqa: E402
from projector.state import ClusterState  # noqa: E402


def projector_compiled() -> bool:
    """Whether the loaded per-event modules are the compiled extensions."""
    from projector import fold  # noqa: PLC0415 - the question is about what this loads

    return loaded_compiled(fold)


__all__ = ["PROJECTOR_FORM", "ClusterState", "FoldOutcome", "apply", "projector_compiled"]
