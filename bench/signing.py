"""What signing costs: a producer's sign, the projector's check, the fold's check of a session.

Prints microseconds per event for

* ``sign``: :func:`events.signing.sign_event` (canonical bytes + Ed25519 sign), what a
  producer pays;
* ``check``: the projector's check of a signed record (:func:`projector.trust.distrust`:
  the record's signed bytes + one Ed25519 verification);
* ``fold session``: the fold's check of a session's leader signature (canonical bytes of the
  session + one verification), per session of ``--decisions`` bindings.

Run: ``python bench/signing.py [--seconds 2] [--decisions 1000]``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project (run as a script)

from events.models import BindDecision, SessionCommitted
from events.serde import encode
from events.signing import EventSigner, SigningKey, event_signed_by, public_key_of
from projector.state import ClusterState
from projector.trust import KeyringEntry, Trust, distrust
from tests.events.samples import job_submitted, session_committed, task_started


def _micros(work: Callable[[], object], seconds: float) -> float:
    """Microseconds per call of ``work``, best of 3 runs."""
    best = float("inf")
    for _ in range(3):
        done = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 3:
            work()
            done += 1
        best = min(best, elapsed / done * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--decisions", type=int, default=1_000)
    args = parser.parse_args()
    signer = EventSigner(SigningKey.generate(), "team-a")
    state = ClusterState()
    for name, event in (("JobSubmitted", job_submitted()), ("TaskStarted", task_started())):
        signed = signer.sign(event)
        record = encode(signed)
        entry = KeyringEntry("team-a", signer.key.public_key, frozenset({event.type}))
        trust = Trust(keyring={"team-a": entry})
        sign = _micros(functools.partial(signer.sign, event), args.seconds)
        check = _micros(functools.partial(distrust, trust, state, signed, record), args.seconds)
        print(f"{name:14} sign {sign:7.1f} us   check {check:7.1f} us   ({len(record)} bytes)")
    sample = session_committed()
    decisions = [
        BindDecision(task=f"ns/job-{i}-w-0", job=f"ns/job-{i}", node=f"node-{i % 50}")
        for i in range(args.decisions)
    ]
    session: SessionCommitted = sample.model_copy(
        update={"data": sample.data.model_copy(update={"decisions": decisions})}
    )
    leader = EventSigner(SigningKey.generate(), "scheduler")
    signed_session = leader.sign(session)
    key = public_key_of(leader.key.public_key)
    verify = _micros(functools.partial(event_signed_by, signed_session, key), args.seconds)
    sign = _micros(functools.partial(leader.sign, session), args.seconds)
    size = len(encode(signed_session))
    print(f"session of {args.decisions} decisions ({size} bytes): sign {sign:.1f} us, check {verify:.1f} us")


if __name__ == "__main__":
    main()
