"""Prove that recorded sessions re-derive: chain, input digest, then decisions.

The checks, in the order that tells causes apart (style §7, Temporal's
replayer):

1. the hash chain (:mod:`replay.chain`) — the archive is what was written;
2. per session, the rebuilt input's digest against the recorded one — a
   mismatch is a projection/fold divergence (``[REPLAY-INPUT-DIVERGED]``), and
   the config version in force (``[REPLAY-CONFIG-DIVERGED]``);
3. the recorded logic flags are all known to this core (``[REPLAY-UNKNOWN-FLAG]``);
4. re-run the session with the recorded config, ``now`` and logic flags and
   compare the decisions pairwise, in order: kind first (order), then every
   field (identity) — ``[REPLAY-DIVERGED]`` at the first differing position;
5. with the decisions equal, the recorded pending reasons of every job (code
   and message, in rank order) — ``[REPLAY-REASONS-DIVERGED]``.  Decisions are
   the contract; explanations may be reworded by a newer core, so a reasons
   mismatch is a *warning* unless ``strict_reasons`` is set.

Fail-fast by default; ``keep_going`` collects every divergence instead.
Nothing here reads a clock or the environment; telemetry is not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from events.models import Decision
from replay import engine
from replay.archive import ArchivedEvent, RecordedSession, describe_decision, recorded_sessions
from replay.chain import check_chain
from replay.errors import (
    ChainBroken,
    ConfigDiverged,
    DecisionsDiverged,
    Divergence,
    InputDiverged,
    ReasonsDiverged,
    UnknownLogicFlag,
)
from replay.reconstruct import SessionInput, session_inputs

__all__ = [
    "SessionCheck",
    "VerifyReport",
    "check_session",
    "compare_decisions",
    "compare_pending",
    "verify_events",
    "verify_sessions",
]


def _reasons_text(reasons: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{code}: {message}" for code, message in reasons) or "none"


def compare_pending(session: RecordedSession, result: engine.SessionResult) -> ReasonsDiverged | None:
    """The first job whose recorded pending reasons (code and message, in rank order) differ."""
    recorded = {p.job: [(r.code, r.message) for r in p.reasons] for p in session.data.pending}
    rerun = {job: [(r.code, r.message) for r in reasons] for job, reasons in result.pending.items()}
    for job in sorted(set(recorded) | set(rerun)):
        want, got = recorded.get(job, []), rerun.get(job, [])
        if want != got:
            return ReasonsDiverged(
                session.session_id,
                session.seq,
                job=job,
                expected=_reasons_text(want) if job in recorded else "not pending",
                actual=_reasons_text(got) if job in rerun else "not pending",
            )
    return None


def compare_decisions(session: RecordedSession, actual: Sequence[Decision]) -> DecisionsDiverged | None:
    """The first position where ``actual`` differs from the recorded decisions, or None."""
    expected = session.decisions
    for position in range(max(len(expected), len(actual))):
        want = expected[position] if position < len(expected) else None
        got = actual[position] if position < len(actual) else None
        if want == got:
            continue
        if got is None:
            kind = "missing"
        elif want is None:
            kind = "extra"
        else:
            kind = "order" if want.kind != got.kind else "identity"
        return DecisionsDiverged(
            session.session_id,
            session.seq,
            position=position,
            kind=kind,
            expected=None if want is None else describe_decision(want),
            actual=None if got is None else describe_decision(got),
        )
    return None


@dataclass(frozen=True, slots=True)
class SessionCheck:
    """One session re-derived: the re-run's result, or why it did not match."""

    session: RecordedSession
    input: SessionInput
    divergence: Divergence | None
    result: Any = None
    #: Decisions re-derive but the pending reasons do not (a warning by default).
    reasons: ReasonsDiverged | None = None

    @property
    def verified(self) -> bool:
        return self.divergence is None


def check_session(session: RecordedSession, session_input: SessionInput) -> SessionCheck:
    """Checks 2-4 of the module docstring for one session."""
    data = session.data
    digest = session_input.digest
    if digest != data.input_digest:
        return SessionCheck(
            session,
            session_input,
            InputDiverged(session.session_id, session.seq, data.input_seq, data.input_digest, digest),
        )
    if session_input.config_version != data.config_version:
        return SessionCheck(
            session,
            session_input,
            ConfigDiverged(
                session.session_id, session.seq, data.config_version, session_input.config_version
            ),
        )
    unknown = tuple(sorted(set(data.logic_flags) - engine.KNOWN_LOGIC_FLAGS))
    if unknown:
        return SessionCheck(
            session, session_input, UnknownLogicFlag(session.session_id, session.seq, unknown)
        )
    result = engine.run(session_input.snapshot, session_input.config, data.now, data.logic_flags)
    divergence = compare_decisions(session, engine.decisions_of(result))
    reasons = compare_pending(session, result) if divergence is None else None
    return SessionCheck(session, session_input, divergence, result, reasons)


def verify_sessions(
    sessions: Sequence[RecordedSession],
    events: Iterable[ArchivedEvent],
    *,
    on_event: Callable[[ArchivedEvent], None] | None = None,
    **fold_start: Any,
) -> Iterable[SessionCheck]:
    """Re-derive ``sessions`` (seq order) from one fold pass over ``events``.

    ``fold_start`` is passed to :func:`~replay.reconstruct.session_inputs`
    (``state=`` a loaded snapshot to start from).
    """
    by_input = sorted(sessions, key=lambda s: (s.input_seq, s.seq))
    inputs = session_inputs(events, [s.input_seq for s in by_input], on_event=on_event, **fold_start)
    current: SessionInput | None = None
    for session in by_input:
        while current is None or current.seq < session.input_seq:
            current = next(inputs)
        yield check_session(session, current)
    # Drain the fold so the progress callback sees every event.
    for _ in inputs:
        pass


@dataclass(frozen=True, slots=True)
class VerifyReport:
    events: int
    sessions: int
    divergences: tuple[Divergence, ...] = field(default_factory=tuple)
    warnings: tuple[Divergence, ...] = field(default_factory=tuple)
    #: One line each: what the chain check and the comparison with checkpoints found.
    chain: str = ""
    checkpoints: str = "not checked (no --checkpoints)"

    @property
    def ok(self) -> bool:
        return not self.divergences

    def to_json(self) -> dict[str, Any]:
        """``replay verify --format json``."""

        def entries(found: tuple[Divergence, ...]) -> list[dict[str, Any]]:
            return [{"code": d.code, "seq": d.seq, "session": d.session_id, "message": str(d)} for d in found]

        return {
            "ok": self.ok,
            "events": self.events,
            "sessions": self.sessions,
            "chain": self.chain,
            "checkpoints": self.checkpoints,
            "divergences": entries(self.divergences),
            "warnings": entries(self.warnings),
        }


def verify_events(
    rows: Sequence[ArchivedEvent],
    *,
    keep_going: bool = False,
    strict_reasons: bool = False,
    on_event: Callable[[ArchivedEvent], None] | None = None,
) -> VerifyReport:
    """Verify a whole archive already in memory (seq order, from the first row)."""
    divergences: list[Divergence] = []
    warnings: list[Divergence] = []
    chain = f"OK: {len(rows)} rows link"
    try:
        check_chain(rows)
    except ChainBroken as exc:
        divergences.append(exc)
        chain = f"BROKEN at seq {exc.seq}: {exc.why}"
        if not keep_going:
            return VerifyReport(len(rows), 0, tuple(divergences), chain=chain)
    sessions = list(recorded_sessions(rows))
    checked = 0
    try:
        for check in verify_sessions(sessions, rows, on_event=on_event):
            checked += 1
            found = check.divergence or (check.reasons if strict_reasons else None)
            if check.reasons is not None and not strict_reasons:
                warnings.append(check.reasons)
            if found is not None:
                divergences.append(found)
                if not keep_going:
                    break
    except Divergence as exc:  # the fold itself refused an archived event
        divergences.append(exc)
    divergences.sort(key=lambda d: d.seq)
    return VerifyReport(len(rows), checked, tuple(divergences), tuple(warnings), chain=chain)
