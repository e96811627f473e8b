"""projector.trust and the fold's leadership rule, offline: who may produce what, and which sessions count."""

from __future__ import annotations

from datetime import UTC, datetime

from events.canonical import canonical_json
from events.models import (
    MAX_SEQ,
    BindDecision,
    Event,
    JobCancelled,
    JobCancelledData,
    LeaderElected,
    LeaderElectedData,
    SessionCommitted,
    SessionCommittedData,
)
from events.serde import encode
from events.signing import EventSigner, SigningKey
from projector.fold import apply
from projector.state import ClusterState
from projector.trust import KeyringEntry, Trust, distrust
from tests.events.samples import job_submitted, node_reported

_NOW = datetime(2026, 6, 1, tzinfo=UTC)
SCHEDULER = EventSigner(SigningKey.generate(), "scheduler")
TEAM = EventSigner(SigningKey.generate(), "team-a")


def _elected(epoch: int, signer: EventSigner = SCHEDULER) -> LeaderElected:
    event = LeaderElected(
        id=f"leader-{epoch}",
        source="tephra://scheduler",
        time=_NOW,
        data=LeaderElectedData(epoch=epoch, public_key=signer.key.public_key, holder="h"),
    )
    return signer.sign(event)


def _session(epoch: int, session_id: str = "s1") -> SessionCommitted:
    return SessionCommitted(
        id=f"session-{session_id}",
        source="tephra://scheduler",
        time=_NOW,
        data=SessionCommittedData(
            session_id=session_id,
            leader_epoch=epoch,
            input_seq=MAX_SEQ,  # after every job it names (the fold voids a decision about a later one)
            config_version=0,
            now=_NOW,
            input_digest="sha256:" + "00" * 32,
            decisions=[BindDecision(task="t", job="j", node="n")],
        ),
    )


def _keyring(*entries: KeyringEntry) -> Trust:
    return Trust(keyring={e.name: e for e in entries})


def _verdict(trust: Trust, event: Event, state: ClusterState | None = None) -> str | None:
    found = distrust(trust, state or ClusterState(), event, encode(event))
    return None if found is None else found[0]


def test_a_leader_in_the_log_decides_which_sessions_count() -> None:
    state = ClusterState()
    assert apply(state, 1, _elected(3)).applied
    assert (state.leader_epoch, state.leader_key) == (3, SCHEDULER.key.public_key)
    assert apply(state, 2, _session(10**12)).invalid == "not-leader"
    assert apply(state, 2, _session(2)).invalid == "not-leader"
    assert apply(state, 2, _session(3)).invalid == "bad-signature"  # unsigned
    assert apply(state, 2, TEAM.sign(_session(3))).invalid == "bad-signature"
    assert state.leader_epoch == 3  # a refused session moves nothing
    assert apply(state, 2, SCHEDULER.sign(_session(3))).applied
    # A newer leadership fences the old leader's sessions; an older one is refused.
    other = EventSigner(SigningKey.generate(), "scheduler")
    assert apply(state, 3, _elected(2, other)).invalid == "stale-leader"
    assert apply(state, 3, _elected(4, other)).applied
    assert apply(state, 4, SCHEDULER.sign(_session(3, "s2"))).invalid == "not-leader"
    assert apply(state, 4, SCHEDULER.sign(_session(4, "s2"))).invalid == "bad-signature"
    assert apply(state, 4, other.sign(_session(4, "s2"))).applied
    # A LeaderElected signed by another key than the one it names.
    forged = _elected(5, other).model_copy(update={"signature": SCHEDULER.sign(_elected(5, other)).signature})
    assert apply(state, 5, forged).invalid == "bad-signature"


def test_before_any_leader_sessions_fold_as_old_archives_did_and_the_door_refuses_them() -> None:
    state = ClusterState()
    assert apply(state, 1, _session(7)).applied  # an archive older than leadership events
    assert apply(state, 2, _session(5, "s2")).applied  # archived, its decisions voided stale-epoch
    assert state.sessions["s2"].voided[0].reason == "stale-epoch"
    assert _verdict(Trust(), _session(1)) == "not-leader"
    assert _verdict(Trust(leaderless_sessions=True), _session(1)) is None
    leading = ClusterState(leader_epoch=3, leader_key=SCHEDULER.key.public_key)
    assert _verdict(Trust(), _session(1), leading) is None  # the fold judges it


def test_producers_must_be_in_the_keyring_and_permitted() -> None:
    job = job_submitted()  # queue "research", namespace "team-a" in the samples
    entry = KeyringEntry("team-a", TEAM.key.public_key, frozenset({job.type}))
    assert _verdict(Trust(), job) == "unsigned"
    assert _verdict(Trust(unsigned_intents=True), job) is None
    assert _verdict(Trust(unsigned_intents=True), node_reported()) == "unsigned"
    assert _verdict(Trust(unsigned_observations=True), node_reported()) is None
    unsigned_leader = _elected(1).model_copy(update={"principal": None, "signature": None})
    assert _verdict(Trust(unsigned_intents=True), unsigned_leader) == "unsigned"  # never unsigned
    assert _verdict(Trust(), TEAM.sign(job)) == "unknown-principal"
    assert _verdict(_keyring(entry), TEAM.sign(job)) is None
    assert _verdict(_keyring(entry), TEAM.on_behalf_of("alice").sign(job)) is None
    impostor = EventSigner(SigningKey.generate(), "team-a")
    assert _verdict(_keyring(entry), impostor.sign(job)) == "bad-signature"
    edited = TEAM.sign(job).model_copy(update={"source": "elsewhere"})
    assert _verdict(_keyring(entry), edited) == "bad-signature"
    cancel = TEAM.sign(
        JobCancelled(id="c", source="s", time=_NOW, data=JobCancelledData(job_id=job.data.job_id))
    )
    assert _verdict(_keyring(entry), cancel) == "not-permitted"  # the type
    queues = KeyringEntry("team-a", TEAM.key.public_key, frozenset({job.type}), frozenset({"other"}))
    assert _verdict(_keyring(queues), TEAM.sign(job)) == "not-permitted"
    namespaces = KeyringEntry(
        "team-a", TEAM.key.public_key, frozenset({job.type}), namespaces=frozenset({"team-b"})
    )
    assert _verdict(_keyring(namespaces), TEAM.sign(job)) == "not-permitted"


def test_a_leader_elected_names_its_signers_key() -> None:
    entry = KeyringEntry("scheduler", SCHEDULER.key.public_key, frozenset({"tephra.leader.elected.v1"}))
    assert _verdict(_keyring(entry), _elected(1)) is None
    other = EventSigner(SigningKey.generate(), "scheduler")
    signed_for_other = SCHEDULER.sign(_elected(1, other))
    assert _verdict(_keyring(entry), signed_for_other) == "not-permitted"


def test_the_signed_bytes_of_a_whole_record_are_its_canonical_bytes() -> None:
    from events.canonical import signed_bytes

    signed = TEAM.sign(job_submitted())
    assert signed_bytes(encode(signed)) == canonical_json(signed)
