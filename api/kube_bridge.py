"""``tephra kube-bridge``: the Kubernetes bridge, composed with the manifest model it reads objects with.

``kube`` may not import ``api`` (design §2), yet the bridge must read Volcano
Jobs, Queues, PriorityClasses and Nodes exactly as ``tephra submit`` reads
their manifests (a PodGroup with its Pods as ``tephra submit`` reads them together).  So
the reading is handed to it here: :func:`object_parser` wraps :func:`api.manifests.parse_object`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from api.endpoints import Endpoints
from api.identity import producer_signer
from api.manifests import parse_object
from api.settings import KubeBridgeCommandSettings
from api.stack import ensure_topics, run_until_signalled
from api.telemetry import observability
from events.models import Event
from events.signing import EventSigner, SigningKeyError
from kube.bridge.door import BRIDGE_SOURCE, ObjectParser
from kube.bridge.service import Bridge, run_bridge
from kube.bridge.signing import BRIDGE_PRODUCER
from kube.rest import JsonObject

__all__ = ["bridge_signer", "kube_bridge_command", "object_parser"]

log = logging.getLogger(__name__)

_JOB_ORIGINS = ("vcjob/", "podgroup/", "pod/")


def object_parser(cluster: str) -> ObjectParser:
    """The bridge's reader of cluster objects: the manifest model of ``tephra submit``."""

    def parse(
        value: JsonObject,
        *,
        origin: str,
        event_id: str,
        now: datetime,
        priority_values: Mapping[str, int],
        members: Sequence[JsonObject] = (),
    ) -> Event:
        obj, warnings = parse_object(
            value,
            origin=origin,
            cluster=cluster,
            source=BRIDGE_SOURCE,
            now=now,
            event_id=event_id,
            priority_values=priority_values,
            members=members,
        )
        # A job is read once; nodes and queues at each change: their warnings would repeat.
        level = logging.INFO if origin.startswith(_JOB_ORIGINS) else logging.DEBUG
        for warning in warnings:
            log.log(level, "%s", warning)
        return obj.event

    return parse


def bridge_signer(settings: KubeBridgeCommandSettings, cluster: str) -> EventSigner | None:
    """The bridge's signer, ``kube-bridge:<cluster>`` (TEPHRA_PRODUCER_KEY_FILE, else
    ``<data dir>/keys/kube-bridge.pem`` when it exists); None, and a warning, without a key."""
    signer = producer_signer(settings, BRIDGE_PRODUCER)
    if signer is None:
        if not settings.embedded:  # a deployment's projector refuses unsigned events
            log.warning(
                "kube bridge: no producer key (TEPHRA_PRODUCER_KEY_FILE, or keys/%s.pem in the data dir):"
                " its events go unsigned, and a projector that refuses unsigned intents and observations"
                ' rejects them (`unsigned`; docs/kubernetes.md, "Signing")',
                settings.producer_name or BRIDGE_PRODUCER,
            )
        return None
    log.info("kube bridge: signing as %s:%s", signer.principal, cluster)
    return signer.on_behalf_of(cluster)


def kube_bridge_command(
    settings: KubeBridgeCommandSettings,
    endpoints: Endpoints,
    *,
    install_crds: bool = False,
    on_ready: Callable[[Bridge], None] | None = None,
) -> int:
    """Run the bridge until SIGTERM/SIGINT; the exit code."""

    async def main() -> None:
        # The schema is tephra migrate's (run_bridge checks it); the topics are made if missing.
        kafka, database = endpoints.kafka(), endpoints.database()
        await ensure_topics(settings, kafka, endpoints.topics)
        await run_bridge(
            settings,
            object_parser(endpoints.cluster),
            kafka=kafka,
            database=database,
            topics=endpoints.topics,
            cluster=endpoints.cluster,
            install=install_crds,
            signer=signer,
            on_ready=on_ready,
        )

    with observability(settings, "tephra-kube-bridge", ("kube-bridge",), sys.stdout):
        try:
            signer = bridge_signer(settings, endpoints.cluster)
        except SigningKeyError as exc:  # a key file named that cannot be used
            log.error("kube bridge: %s", exc)  # noqa: TRY400 - the message says it all
            return 2
        return run_until_signalled(main)
