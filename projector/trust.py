"""Who may produce what: the projector's check of each event's principal and signature.

Before an event is folded, the projector asks :func:`distrust` whether its
producer is who it says and may say it (docs/producers.md, "Signing"):

* A decision (SessionCommitted, SessionPart) comes from the elected scheduler
  only.  While the log names no leader (no LeaderElected folded yet) it is
  refused (``not-leader``; :attr:`Trust.leaderless_sessions` takes it, for
  archives and test streams older than leadership events); after that the
  fold itself checks the epoch and the leader's signature, so replay derives
  the same verdicts from the log.
* Every other event carries ``principal`` and ``signature`` (``unsigned``
  otherwise; :attr:`Trust.unsigned_intents` and :attr:`Trust.unsigned_observations`
  let development producers leave both out, never for decisions or
  leadership).  The principal is ``NAME`` or ``NAME:SUBJECT`` (NAME vouching
  for SUBJECT, as the HTTP API does for a token's subject); NAME must be in
  the keyring (``unknown-principal``), the signature must be NAME's key's
  signature of the record's signed bytes (:func:`events.canonical.signed_bytes`;
  ``bad-signature``), and NAME's record must permit the type and, for events
  about a queue or a job, the queue and namespace (``not-permitted``).  A
  LeaderElected must name its signer's own key.

A refusal is a rejection like the door's (``rejected_events``, the dead-letter
topic, a log line and ``tephra_projector_rejected_total{code}``): refused
events never enter the archive, so replay needs none of this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from events.canonical import signed_bytes
from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobCancelled,
    JobRejected,
    JobSubmitted,
    LeaderElected,
    NodeRemoved,
    NodeReported,
    QueueDeleted,
    QueueUpserted,
    SessionCommitted,
    SessionPart,
    TaskFinished,
    TasksAdded,
    TaskStarted,
)
from events.signing import public_key_of, verify
from projector.state import ClusterState

__all__ = ["TRUST_CODES", "KeyringEntry", "Trust", "distrust", "principal_name"]

#: The codes :func:`distrust` refuses with.
TRUST_CODES: Final = ("unsigned", "unknown-principal", "bad-signature", "not-permitted", "not-leader")


@dataclass(frozen=True, slots=True)
class KeyringEntry:
    """One row of the ``keyring`` table (projector.keyring)."""

    name: str
    public_key: str
    may: frozenset[str]
    #: Empty: any queue / any namespace.
    queues: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()


@dataclass(slots=True)
class Trust:
    """The keyring as last read (the service reads it again before each batch) and what may come unsigned."""

    keyring: Mapping[str, KeyringEntry] = field(default_factory=dict)
    unsigned_intents: bool = False
    unsigned_observations: bool = False
    #: Sessions while the log names no leader (``TEPHRA_ALLOW_LEADERLESS_SESSIONS``).
    leaderless_sessions: bool = False


def principal_name(principal: str) -> str:
    """The keyring name of a principal: ``NAME`` of ``NAME`` or ``NAME:SUBJECT``."""
    return principal.partition(":")[0]


def distrust(trust: Trust, state: ClusterState, event: Event, record: bytes) -> tuple[str, str] | None:
    """(code, detail) when ``event`` (read from ``record``) may not be folded, else None."""
    if isinstance(event, SessionCommitted | SessionPart):
        if state.leader_key or trust.leaderless_sessions:
            return None  # the fold checks the epoch and the leader's signature (once there is one)
        return (
            "not-leader",
            "no scheduler leads this cluster in the log yet (no LeaderElected): a session counts only"
            " after its leader's LeaderElected",
        )
    principal, signature = event.principal, event.signature
    if principal is None or signature is None:
        return _unsigned(trust, event)
    name = principal_name(principal)
    entry = trust.keyring.get(name)
    if entry is None:
        return (
            "unknown-principal",
            f"principal {principal!r}: no {name!r} in the keyring; an operator adds it with"
            f" `tephra producer add {name} --public-key KEY --may TYPE...`",
        )
    if not verify(public_key_of(entry.public_key), signed_bytes(record), signature):
        return (
            "bad-signature",
            f"the signature is not {name!r}'s (keyring key {entry.public_key}) over the record's signed"
            " bytes (docs/producers.md, Signing)",
        )
    return _not_permitted(entry, state, event)


#: What the cluster reports (the observations topic's types).
_OBSERVATIONS: Final = (
    NodeReported,
    NodeRemoved,
    TaskStarted,
    TaskFinished,
    HyperNodeUpserted,
    HyperNodeDeleted,
)


def _unsigned(trust: Trust, event: Event) -> tuple[str, str] | None:
    """The verdict on an event without principal or signature (None: it may come unsigned)."""
    if event.principal is None and event.signature is None:
        if isinstance(event, _OBSERVATIONS):
            if trust.unsigned_observations:
                return None
        elif not isinstance(event, LeaderElected) and trust.unsigned_intents:
            return None
    return (
        "unsigned",
        f"a {event.type} needs the principal and signature attributes (docs/producers.md, Signing);"
        " only development deployments take unsigned intents and observations",
    )


def _not_permitted(entry: KeyringEntry, state: ClusterState, event: Event) -> tuple[str, str] | None:
    if event.type not in entry.may:
        return ("not-permitted", f"{entry.name!r} may not produce {event.type} (it may: {sorted(entry.may)})")
    if isinstance(event, LeaderElected) and event.data.public_key != entry.public_key:
        return ("not-permitted", f"a LeaderElected by {entry.name!r} names another key than its own")
    queue, namespace = _scope(state, event)
    if entry.queues and queue is not _NO_SCOPE and queue not in entry.queues:
        what = "a job not in the state (its queue is unknown)" if queue is None else f"queue {queue!r}"
        return ("not-permitted", f"{entry.name!r} may not touch {what} (its queues: {sorted(entry.queues)})")
    if entry.namespaces and namespace is not _NO_SCOPE and namespace not in entry.namespaces:
        return (
            "not-permitted",
            f"{entry.name!r} may not touch namespace {namespace!r}"
            f" (its namespaces: {sorted(entry.namespaces)})",
        )
    return None


#: The scope of an event that names no queue (or no namespace): any restriction lets it pass.
_NO_SCOPE: Final = "\x00"


def _scope(state: ClusterState, event: Event) -> tuple[str | None, str | None]:
    """(queue, namespace) an event touches; :data:`_NO_SCOPE` where it names none, None where
    it names a job the state does not hold (its queue cannot be known)."""
    match event:
        case JobSubmitted(data=job):
            return job.queue, job.namespace
        case (
            JobCancelled(data=d)
            | JobRejected(data=d)
            | TasksAdded(data=d)
            | TaskStarted(data=d)
            | TaskFinished(data=d)
        ):
            known = state.jobs.get(d.job_id)
            return (None if known is None else known.queue), d.job_id.partition("/")[0]
        case QueueUpserted(data=queue) | QueueDeleted(data=queue):
            return queue.name, _NO_SCOPE
        case _:
            return _NO_SCOPE, _NO_SCOPE
