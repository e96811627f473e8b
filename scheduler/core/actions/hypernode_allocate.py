"""allocate's visit of a job with a network topology (Volcano ``allocate.allocateForJob``).

For each gradient of hyperNodes (lowest tier first): dry-run the job's visit inside the
hyperNodes of the gradient (only its nodes are candidates), keep the hyperNodes where the gang
ends ready or pipelined, undo each dry run; if any fits, replay the best one (highest
hyperNode order score; Volcano breaks ties at random, Tephra takes the first name) into the
visit's statement and stop; else try the next gradient.  Volcano dry-runs every hyperNode of
the gradient before scoring; Tephra dry-runs them best-scored first and stops at the first
that fits, which is the same choice (``_best_fit``).  When no gradient fits, a hard-mode job
is explained with ``network-topology-unsatisfied``.

A dry run leaves no trace steps nor reasons behind: one ``HyperNodeTried`` step per hyperNode
says what happened there, and the chosen hyperNode's placements are traced as they are replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from scheduler.core.config import ActionName
from scheduler.core.framework import Session
from scheduler.core.reasons import Reason
from scheduler.core.state import JobState, TaskState
from scheduler.core.statement import Statement
from scheduler.core.trace import HyperNodeTried, TaskPlaced, TaskUnplaced

__all__ = ["visit_in_hypernodes"]

IntArray = npt.NDArray[np.int64]
#: ``visit(cursor, statement, allowed_rows, hypernode) -> ready``: the plain visit, confined.
Visit = Callable[[list[int], Statement, IntArray, str], bool]

_ACTION: Final = ActionName.ALLOCATE
#: hyperNodes named in the reason's message (all of them are in its detail).
_NAMED: Final = 4


@dataclass(slots=True)
class _Fit:
    hypernode: str
    operations: Sequence[tuple[str, TaskState, int]]
    cursor: int


def visit_in_hypernodes(
    ssn: Session,
    job: JobState,
    gradients: list[list[str]],
    *,
    cursor: list[int],
    stmt: Statement,
    visit: Visit,
) -> bool:
    """Place the job inside the best hyperNode of the first gradient that holds it, recording
    the placements in ``stmt`` and moving ``cursor`` as that visit did; returns JobReady."""
    tree = ssn.hypernodes
    failures: list[tuple[str, str]] = []
    for gradient in gradients:
        found = _best_fit(ssn, job, gradient, cursor[0], visit, failures)
        if found is None:
            continue
        best, score = found
        nodes = ssn.nodes
        for kind, task, row in best.operations:
            if kind == "allocate":
                stmt.allocate(task, row)
            else:
                stmt.pipeline(task, row)
            ssn.step(TaskPlaced(_ACTION, job.uid, task.uid, nodes.names[row], kind != "allocate"))
        cursor[0] = best.cursor
        placed = ssn.allocated_hypernodes.get(job.uid)
        ssn.allocated_hypernodes[job.uid] = tree.lca(placed, best.hypernode) or best.hypernode
        tier = tree.infos[best.hypernode].tier
        placed_now = len(best.operations)
        ssn.step(HyperNodeTried(_ACTION, job.uid, best.hypernode, tier, "chosen", placed_now, score))
        return ssn.job_ready(job)
    topology = ssn.topologies[job.uid]
    if topology.mode != "soft":
        ssn.explain(job.uid, _unsatisfied(ssn, job, failures))
    return False


def _best_fit(  # noqa: PLR0917 - the visit's inputs
    ssn: Session,
    job: JobState,
    gradient: list[str],
    start: int,
    visit: Visit,
    failures: list[tuple[str, str]],
) -> tuple[_Fit, float] | None:
    """The best hyperNode of ``gradient`` that holds the job, and its score; None if none does.

    Volcano dry-runs every hyperNode of the gradient, then scores those that fit.  A score is
    read from the state before the dry runs (each is undone), and depends on the other
    candidates only through the tie-break among the best-scored (the plugin adds each tied
    hyperNode's share of the job's tasks).  So the hyperNodes are dry-run best first, by
    their own score, then within a group of equal scores by the score the group gets scored
    together, then by name, and the first that holds the job is Volcano's choice (ties by
    name): most dry runs are saved.
    """
    alone = {name: ssn.hypernode_scores(job, [name])[name] for name in gradient}
    levels: dict[float, list[str]] = {}
    for name in sorted(gradient, key=lambda n: (-alone[n], n)):
        levels.setdefault(alone[name], []).append(name)
    for level in levels.values():
        together = ssn.hypernode_scores(job, level) if len(level) > 1 else {level[0]: alone[level[0]]}
        for name in sorted(level, key=lambda n: (-together[n], n)):
            fit, failure = _dry_run(ssn, job, name, start, visit)
            if fit is not None:
                return fit, together[name]
            failures.append((name, failure))
    return None


def _dry_run(ssn: Session, job: JobState, name: str, start: int, visit: Visit) -> tuple[_Fit | None, str]:
    """The visit inside hyperNode ``name``, undone: what it placed if the gang fits there,
    else why not."""
    info = ssn.hypernodes.infos[name]
    trial = Statement(ssn)
    local = [start]
    mark = len(ssn.trace)
    saved = dict(ssn.reasons.get(job.uid, {}))
    ready = visit(local, trial, info.index, name)
    fits = len(trial) > 0 and (ready or ssn.job_pipelined(job))
    failure = next((s.message for s in ssn.trace[mark:] if isinstance(s, TaskUnplaced) and s.message), "")
    if not failure and not fits:
        placeable = job.ready_num + job.waiting_num + job.pending_best_effort
        failure = (
            f"In hyperNode {name}: {placeable}/{len(job.tasks)} tasks in gang placeable, "
            f"minAvailable {job.min_member}"
        )
    operations = [(op.kind, op.task, op.node) for op in trial.operations]
    trial.discard()
    del ssn.trace[mark:]
    ssn.reasons[job.uid] = saved
    ssn.step(HyperNodeTried(_ACTION, job.uid, name, info.tier, "fits" if fits else "no-fit", len(operations)))
    return (_Fit(name, operations, local[0]) if fits else None), failure


def _unsatisfied(ssn: Session, job: JobState, failures: list[tuple[str, str]]) -> Reason:
    highest = ssn.highest_tier(job)
    head = f"network topology hard, highestTierAllowed {highest}: "
    if not failures:
        message = head + "no hyperNode of an allowed tier has the job's minResources idle"
    else:
        named = "; ".join(text for _, text in failures[:_NAMED])
        more = f"; {len(failures) - _NAMED} more hyperNodes" if len(failures) > _NAMED else ""
        message = f"{head}the gang fits in none of {len(failures)} hyperNodes tried: {named}{more}"
    return Reason(
        "network-topology-unsatisfied",
        message,
        {
            "highestTierAllowed": highest,
            "minAvailable": job.min_member,
            "tried": [name for name, _ in failures],
        },
    )
