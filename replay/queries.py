"""The replay commands over a live archive: the reader feeds the pure library.

Each function takes an open :class:`~replay.store.ArchiveReader` (one
read-only snapshot of the archive) and returns library values; rendering is
:mod:`replay.render`'s job.  Long passes report progress through an optional
callback ``(done, total)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from events.models import JobSubmitted, PendingJob, SessionCommitted, SessionCommittedData
from projector.state import ClusterState, VoidedDecision
from replay import engine
from replay.archive import ArchivedEvent, ListFromNewest, PendingLists, RecordedSession, session_of
from replay.audit import EvictionRow, audit_session
from replay.blockers import find_blockers, ranked
from replay.chain import ChainChecker, CheckpointAnchor
from replay.counterfactual import find_counterfactual
from replay.errors import (
    ChainBroken,
    Divergence,
    PendingBaseMissing,
    RowUndecodable,
    UndecodableRow,
    UnknownJob,
    UnknownSession,
    resolve_job_name,
)
from replay.explain import (
    Explanation,
    Search,
    SessionMention,
    choose_session,
    decision_sessions,
    explain,
    mentions,
)
from replay.probe import DEFAULT_BUDGET_SECONDS, Probe
from replay.probe import Progress as SearchProgress
from replay.reconstruct import Reconstruction, SessionInput, capture, fold_archived
from replay.store import ArchiveReader
from replay.verify import SessionCheck, VerifyReport, check_session
from scheduler.core.session import SessionResult

__all__ = [
    "SessionView",
    "audit_preemptions",
    "counterfactual_search",
    "explain_job",
    "show_session",
    "verify_archive",
]

Progress = Callable[[int, int], None]


async def _recorded(
    reader: ArchiveReader, marker: ArchivedEvent, lists: PendingLists | None = None
) -> RecordedSession:
    """The session of ``marker``, whole; ``lists``: the sessions assembled just before (a pass
    in seq order shares them).  A change whose base is not among them is read against its
    base's list, rebuilt from the archive first (:func:`_rebuilt_list`).

    Raises:
        PendingBaseMissing: the change's base, or a session before it that the list needs, is
            not in the archive.
    """
    lists = PendingLists() if lists is None else lists
    event = marker.event
    assert isinstance(event, SessionCommitted)  # noqa: S101  (markers are SessionCommitted by query)
    base_id = event.data.pending_base
    if base_id and base_id not in lists.lists:
        lists.keep_list(base_id, await _rebuilt_list(reader, event.data.session_id, marker.seq, base_id))
    parts = await _parts(reader, event.data)
    session = session_of(marker.seq, event, parts, lists.base_of(marker.seq, event.data))
    lists.remember(session)
    return session


async def _parts(reader: ArchiveReader, data: SessionCommittedData) -> dict[int, Any]:
    parts: dict[int, Any] = {}
    if data.parts:
        for part in await reader.session_parts(data.session_id):
            parts[part.event.data.index] = part.event.data  # type: ignore[union-attr]
    return parts


async def _rebuilt_list(
    reader: ArchiveReader, session_id: str, seq: int, base_id: str
) -> tuple[PendingJob, ...]:
    """The whole pending list of session ``base_id`` (the base of ``session_id``, at ``seq``),
    from it and the sessions before it along their bases, newest first (:class:`ListFromNewest`):
    back to a whole list, or at most as many sessions as the slices the changes restate.

    Raises:
        PendingBaseMissing: a session the list needs is not in the archive.
    """
    rebuilt = ListFromNewest()
    wanted, named_by, named_at = base_id, session_id, seq
    while True:
        try:
            older = await reader.session(wanted)
        except UnknownSession:
            raise PendingBaseMissing(named_by, named_at, wanted) from None
        data = older.event.data
        assert isinstance(data, SessionCommittedData)  # noqa: S101  (markers are SessionCommitted by query)
        parts = await _parts(reader, data)
        carried = [p for index in sorted(parts) for p in parts[index].pending]
        if rebuilt.add(data, [*carried, *data.pending]):
            return rebuilt.whole()
        wanted, named_by, named_at = data.pending_base, data.session_id, older.seq


async def _input_at(reader: ArchiveReader, seq: int) -> SessionInput:
    return capture(await reader.state_at(seq), seq)


class _Walk:
    """Folded states at increasing seqs: from the newest stored state at or before each, or folding on.

    Moving to seq S folds on from the current state when no stored state
    lies between it and S, and otherwise starts from that stored state, so a
    walk over several seqs costs at most one reconstruction per seq and
    often one in all.  The state is mutated in place: read what you need
    from it before the next :meth:`to`.
    """

    def __init__(self, reader: ArchiveReader) -> None:
        self._reader = reader
        self._state: ClusterState | None = None

    async def to(self, seq: int) -> ClusterState:
        """The folded state right after ``seq``.

        Raises:
            FoldRejected: an archived event the fold refuses.
            LookupError: the archive ends before ``seq``.
        """
        state = self._state
        stored = await self._reader.snapshot_seq_at_or_before(seq)
        if state is None or state.seq > seq or (stored is not None and stored > state.seq):
            state = await self._reader.snapshot_at_or_before(seq) if stored is not None else None
            state = ClusterState() if state is None else state
        self._state = state
        async for row in self._reader.rows(state.seq + 1, seq):
            fold_archived(state, row)
        if state.seq != seq:
            raise LookupError(f"no state at seq {seq}: the archive ends at seq {state.seq}")
        return state


# ---------------------------------------------------------------------------- explain


def _not_yet_considered(
    job: str, history: list[ArchivedEvent], at: datetime | None, found: list[SessionMention]
) -> Explanation:
    """The explanation of a job no session considered (at all, or by ``at``): what the archive held then."""
    if at is not None:
        history = [e for e in history if e.event.time <= at]
        if not any(isinstance(e.event, JobSubmitted) for e in history):
            raise UnknownJob(job, f"(it was not yet submitted at {at.isoformat()})")
    return explain(
        job, history, mention=None, session=None, snapshot=None, result=None, search=None, found=found
    )


async def explain_job(
    reader: ArchiveReader,
    job: str,
    *,
    session_id: str | None = None,
    at: datetime | None = None,
    counterfactual: bool = True,
    budget: float | None = DEFAULT_BUDGET_SECONDS,
    progress: SearchProgress | None = None,
) -> Explanation:
    """``replay explain``: the timeline, and the chosen session re-run with reasons and a counterfactual.

    Raises:
        UnknownJob: the archive has nothing about ``job`` (or nothing at ``--at``).
        UnknownSession: ``session_id`` is not in the archive.
    """
    if "/" not in job:  # a bare name: the job of that name, when only one namespace has it
        named = await reader.jobs_named(job)
        job = resolve_job_name(job, named, [] if named else await reader.job_ids())
    explanation = await _explain_job(
        reader,
        job,
        session_id=session_id,
        at=at,
        counterfactual=counterfactual,
        budget=budget,
        progress=progress,
    )
    return dataclasses.replace(explanation, trace_id=await reader.trace_id(job))


async def _explain_job(
    reader: ArchiveReader,
    job: str,
    *,
    session_id: str | None,
    at: datetime | None,
    counterfactual: bool,
    budget: float | None,
    progress: SearchProgress | None,
) -> Explanation:
    history = await reader.job_history(job)
    if not history:
        raise UnknownJob(job)
    found = mentions(job, history)
    mention = choose_session(job, history, session_id=session_id, at=at, found=found)
    if session_id is not None:
        marker = await reader.session(session_id)
    elif mention is not None:
        # The history's copy of the marker is trimmed to the job: read the whole one by its seq.
        marker = await reader.event_at(mention.seq)
    else:
        return _not_yet_considered(job, history, at, found)
    session = await _recorded(reader, marker)
    # The fold's voided list of every session with a decision about the job (the timeline shows
    # the ones it refused): from the first stored state after the session when that holds its
    # record, else folded in one walk up the archive that also rebuilds the chosen session's input.
    voided: dict[str, tuple[VoidedDecision, ...]] = {}
    wanted: list[tuple[int, str]] = [(session.input_seq, "")]
    for m in decision_sessions(found):
        record = await reader.stored_session(m.session_id, m.seq)
        if record is not None:
            voided[m.session_id] = record.voided
        else:
            wanted.append((m.seq, m.session_id))
    wanted.sort()
    walk = _Walk(reader)
    session_input: SessionInput | None = None
    for seq, sid in wanted:
        state = await walk.to(seq)
        if not sid:
            session_input = capture(state, seq)
        elif (record := state.sessions.get(sid)) is not None:
            voided[sid] = record.voided
    assert session_input is not None  # noqa: S101  (the input seq is always wanted)
    data = session.data
    began = time.monotonic()
    result = engine.run(session_input.snapshot, session_input.config, data.now, data.logic_flags)
    pace = time.monotonic() - began
    search = None
    if job in result.pending and any(j.uid == job for j in session_input.snapshot.jobs):
        search = counterfactual_search(
            session_input,
            data,
            job,
            result,
            counterfactual=counterfactual,
            budget=budget,
            progress=progress,
            pace=pace,
        )
    return explain(
        job,
        history,
        mention=mention,
        session=session,
        snapshot=session_input.snapshot,
        result=result,
        search=search,
        voided=voided,
        found=found,
    )


def counterfactual_search(
    session_input: SessionInput,
    data: SessionCommittedData,
    job: str,
    result: SessionResult,
    *,
    counterfactual: bool = True,
    budget: float | None = DEFAULT_BUDGET_SECONDS,
    progress: SearchProgress | None = None,
    pace: float = 0.0,
) -> Search:
    """Explain's searches for ``job``, pending in ``result`` (the re-run of the recorded session
    ``data`` on its rebuilt input), sharing one time budget: the blockers hidden behind the first
    refusal, then (``counterfactual``) the smallest change that would have placed it.  ``pace``:
    how long the re-run of ``result`` took (no search run is started that would overrun the budget)."""
    snapshot = session_input.snapshot
    target = next(j for j in snapshot.jobs if j.uid == job)
    probe = Probe(
        snapshot,
        session_input.config,
        data.now,
        data.logic_flags,
        target,
        budget=budget,
        progress=progress,
        pace=pace,
    )
    reasons = result.pending[job]
    blockers, complete = find_blockers(probe, reasons)
    found = None
    if counterfactual:
        found = find_counterfactual(
            snapshot,
            session_input.config,
            data.now,
            data.logic_flags,
            job_id=job,
            reasons=reasons,
            baseline=result,
            probe=probe,
            blockers=blockers,
        )
    if found is not None and found.revealed:
        blockers = ranked((*blockers, *found.revealed))
    return Search(blockers, complete, found)


# ---------------------------------------------------------------------------- session


@dataclass(frozen=True, slots=True)
class SessionView:
    """``replay session``: the reconstructed input, the recorded decisions, the re-run's trace."""

    check: SessionCheck

    def counts(self) -> dict[str, Any]:
        snapshot = self.check.input.snapshot
        tasks: dict[str, int] = {}
        for job in snapshot.jobs:
            for task in job.tasks:
                tasks[task.status.value] = tasks.get(task.status.value, 0) + 1
        return {
            "nodes": len(snapshot.nodes),
            "queues": len(snapshot.queues),
            "priorityClasses": len(snapshot.priority_classes),
            "jobs": len(snapshot.jobs),
            "tasks": dict(sorted(tasks.items())),
        }

    def to_json(self) -> dict[str, Any]:
        check = self.check
        s = check.session
        rederived = engine.decisions_of(check.result) if check.result is not None else ()
        return {
            "session": s.session_id,
            "seq": s.seq,
            "inputSeq": s.input_seq,
            "now": s.now.isoformat(),
            "leaderEpoch": s.data.leader_epoch,
            "configVersion": s.data.config_version,
            "logicFlags": list(s.data.logic_flags),
            "inputDigest": s.data.input_digest,
            "input": self.counts(),
            "decisions": [
                {
                    "position": i,
                    **d.model_dump(mode="json"),
                    "rederived": i < len(rederived) and rederived[i] == d,
                }
                for i, d in enumerate(s.decisions)
            ],
            "pending": [p.model_dump(mode="json") for p in s.data.pending],
            "verified": check.verified,
            "divergence": None if check.divergence is None else str(check.divergence),
            "trace": [] if check.result is None else check.result.trace_json(),
        }


async def show_session(reader: ArchiveReader, session_id: str) -> SessionView:
    marker = await reader.session(session_id)
    session = await _recorded(reader, marker)
    return SessionView(check_session(session, await _input_at(reader, session.input_seq)))


# ---------------------------------------------------------------------------- one pass over sessions


async def _replay_sessions(
    reader: ArchiveReader,
    sessions: Sequence[RecordedSession],
    *,
    on_check: Callable[[SessionCheck, dict[int, str]], bool],
    progress: Progress | None,
) -> None:
    """Rebuild every session's input in one fold pass and hand each re-derived session to ``on_check``.

    ``on_check`` gets the check and the fold's voided decisions (position ->
    reason) of that session; returning False stops the pass.  Starts from the
    newest stored state at or before the first input seq.
    """
    if not sessions:
        return
    by_input: dict[int, list[RecordedSession]] = {}
    for s in sessions:
        by_input.setdefault(s.input_seq, []).append(s)
    first_input = min(by_input)
    last = max(s.seq for s in sessions)
    start = await reader.snapshot_at_or_before(first_input)
    rebuild = Reconstruction(by_input, state=start)
    state: ClusterState = rebuild.state
    inputs: dict[int, SessionInput] = {}
    pending = {s.session_id: s for s in sessions}
    total = last - state.seq
    done = 0

    def settle() -> bool:
        # A session is checked once its input is rebuilt and its marker folded (for the voided list).
        for sid, session in list(pending.items()):
            record = state.sessions.get(sid)
            if session.input_seq not in inputs or state.seq < session.seq or record is None:
                continue
            del pending[sid]
            voided = {v.index: v.reason for v in record.voided}
            if not on_check(check_session(session, inputs[session.input_seq]), voided):
                return False
        return True

    async for row in reader.rows(state.seq + 1, last):
        for captured in rebuild.feed(row):
            inputs[captured.seq] = captured
        done += 1
        if progress is not None and (done % 1000 == 0 or done == total):
            progress(done, total)
        if isinstance(row.event, SessionCommitted) and row.event.data.session_id in pending and not settle():
            return
    for captured in rebuild.finish():
        inputs[captured.seq] = captured
    settle()


# ---------------------------------------------------------------------------- verify


async def _check_links(
    reader: ArchiveReader,
    first: int,
    upper: int,
    checkpoints: CheckpointAnchor | None,
    progress: Progress | None,
) -> tuple[ChainChecker, ChainBroken | None, list[Divergence]]:
    """The chain pass of ``replay verify``: the checker, the broken link if any, the undecodable rows."""
    anchor = await reader.hash_before(first)
    checker = ChainChecker(anchor=anchor)
    undecodable: list[Divergence] = []
    if anchor is None:
        return checker, ChainBroken(first - 1, "row missing (the range starts right after it)"), undecodable
    try:
        async for link in reader.links(first, upper):
            checker.feed(link)
            if link.undecodable is not None:
                undecodable.append(RowUndecodable(link.seq, link.undecodable))
            if checkpoints is not None:
                checkpoints.see(link)
            if progress is not None and checker.checked % 1000 == 0:
                progress(checker.checked, max(upper - first + 1, 1))
    except ChainBroken as exc:
        return checker, exc, undecodable
    return checker, None, undecodable


async def verify_archive(
    reader: ArchiveReader,
    *,
    first: int = 1,
    last: int | None = None,
    keep_going: bool = False,
    strict_reasons: bool = False,
    progress: Progress | None = None,
    checkpoints: CheckpointAnchor | None = None,
) -> VerifyReport:
    """``replay verify``: the chain over [first, last] (against ``checkpoints`` when given), then
    every session recorded in that range.

    The chain is hashed from the rows' columns, whether or not their events
    decode, so it has a verdict whatever the rows hold; a row that does not
    decode is then a divergence of its own (:class:`~replay.errors.RowUndecodable`).
    """
    archive_end = await reader.last_seq()
    upper = archive_end if last is None else min(last, archive_end)
    divergences: list[Divergence] = []
    warnings: list[Divergence] = []
    checker, broken, undecodable = await _check_links(reader, first, upper, checkpoints, progress)
    if broken is not None:
        divergences.append(broken)
    divergences += undecodable if keep_going else undecodable[:1]
    verdicts = VerifyReport(0, 0, chain=checker.verdict(first, broken))
    if checkpoints is not None:
        checkpoints.finish(archive_end)
        divergences.extend(checkpoints.problems)
        verdicts = dataclasses.replace(verdicts, checkpoints=checkpoints.verdict())
    events = checker.checked
    if divergences and not keep_going:
        found = tuple(sorted(divergences, key=lambda d: d.seq))
        return dataclasses.replace(verdicts, events=events, divergences=found)
    checked = 0

    def on_check(check: SessionCheck, voided: dict[int, str]) -> bool:
        nonlocal checked
        del voided
        checked += 1
        if check.reasons is not None and not strict_reasons:
            warnings.append(check.reasons)
        found = check.divergence or (check.reasons if strict_reasons else None)
        if found is not None:
            divergences.append(found)
            return keep_going
        return True

    try:
        lists = PendingLists()
        sessions = [await _recorded(reader, m, lists) for m in await reader.session_markers(first, upper)]
        await _replay_sessions(reader, sessions, on_check=on_check, progress=progress)
    except UndecodableRow as exc:
        if exc.seq not in {d.seq for d in undecodable}:
            divergences.append(RowUndecodable(exc.seq, exc.why))
    except Divergence as exc:  # the fold refused an archived event
        divergences.append(exc)
    divergences.sort(key=lambda d: d.seq)
    return dataclasses.replace(
        verdicts, events=events, sessions=checked, divergences=tuple(divergences), warnings=tuple(warnings)
    )


# ---------------------------------------------------------------------------- audit


async def audit_preemptions(
    reader: ArchiveReader,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    queue: str | None = None,
    job: str | None = None,
    progress: Progress | None = None,
) -> list[EvictionRow]:
    """``replay audit preemptions``: every eviction in the archive, re-derived, filtered."""
    sessions = []
    lists = PendingLists()
    for marker in await reader.session_markers():
        session = await _recorded(reader, marker, lists)
        if since is not None and session.now < since:
            continue
        if until is not None and session.now > until:
            continue
        if any(d.kind == "evict" for d in session.decisions):
            sessions.append(session)
    rows: list[EvictionRow] = []

    def on_check(check: SessionCheck, voided: dict[int, str]) -> bool:
        rows.extend(
            audit_session(check.session, check.input.snapshot, check.input.config, check.result, voided)
        )
        return True

    await _replay_sessions(reader, sessions, on_check=on_check, progress=progress)
    rows.sort(key=lambda r: (r.seq, r.position))
    return [
        r
        for r in rows
        if (queue is None or queue in (r.victim_queue, r.preemptor_queue))
        and (job is None or job in (r.victim_job, r.preemptor_job))
    ]
