"""The bridge as a producer: its keyring name, the types it produces, its events signed.

A deployment's projector takes an event only from a producer in its keyring
(docs/producers.md, "Signing").  The bridge signs what it publishes as
``kube-bridge:<cluster>`` (``TEPHRA_PRODUCER_NAME`` changes the name): NAME is
its keyring record, which must permit :data:`BRIDGE_TYPES`; the cluster id,
as SUBJECT, tells ``replay audit`` which cluster's objects an event recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobCancelled,
    JobSubmitted,
    NodeRemoved,
    NodeReported,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
    TaskFinished,
    TasksAdded,
    TaskStarted,
)
from events.signing import EventSigner

__all__ = ["BRIDGE_PRODUCER", "BRIDGE_TYPES", "Publish", "signing"]

#: The bridge's default keyring name.
BRIDGE_PRODUCER: Final = "kube-bridge"
#: Every type the bridge produces: what its keyring record must permit (``--may``).
BRIDGE_TYPES: Final = tuple(
    sorted(
        model.model_fields["type"].default
        for model in (
            NodeReported,
            NodeRemoved,
            PriorityClassUpserted,
            QueueUpserted,
            QueueDeleted,
            HyperNodeUpserted,
            HyperNodeDeleted,
            JobSubmitted,
            TasksAdded,
            JobCancelled,
            TaskStarted,
            TaskFinished,
        )
    )
)

Publish = Callable[[Sequence[Event]], Awaitable[None]]


def signing(publish: Publish, signer: EventSigner | None) -> Publish:
    """``publish`` with every event signed by ``signer`` first (None: unsigned, as given)."""
    if signer is None:
        return publish

    async def signed(events: Sequence[Event]) -> None:
        await publish([signer.sign(event) for event in events])

    return signed
