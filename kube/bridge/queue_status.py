"""A Volcano Queue's ``status`` written back from the projection, as Volcano's queue controller keeps it.

``kubectl get queue -o yaml`` then tells what Tephra holds of the queue:

* ``state``: the one the Queue carries (an operator closes a queue by writing
  ``status.state``, which the bridge reads as the queue's state), ``Open``
  when it carries none; ``Closing`` becomes ``Closed`` once none of the
  queue's jobs is unfinished, as Volcano's controller does.
* ``pending``, ``inqueue``, ``running``, ``completed``: the queue's jobs by
  phase (Volcano counts PodGroups; a Tephra job is one PodGroup).
  ``completed`` counts Completed and Failed jobs; Cancelled ones are left out,
  as Volcano deletes a deleted job's PodGroup.
* ``allocated``: what the queue's tasks hold on nodes (requests and ``pods``).

Each write is a merge patch of the ``status`` subresource carrying the
resourceVersion it was computed from, so it never overwrites a state an
operator wrote meanwhile (409: computed again from the newer object).
Queues the projection does not hold (refused by the manifest model) are
left alone.  Failures are logged; the status is a view.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Final

import aiohttp
import asyncpg

from events.quantity import format_resources
from kube.bridge.store import projection_seq
from kube.rest import JsonObject, JsonValue, KubeApiError, KubeClient, json_object, json_str, resource_path
from projector.occupancy import occupancy

__all__ = ["QueueStatusWriter", "queue_status", "status_patch"]

log = logging.getLogger(__name__)

#: Seconds between two readings of the queues' counts: each reads every occupying task, so the
#: bridge's own work (bindings) is not slowed by a view; a Queue's status lags by about this.
_EVERY: Final = 5.0
_UNFINISHED: Final = ("Pending", "Inqueue", "Running")
_PHASES: Final = "SELECT queue, phase, count(*) AS n FROM jobs GROUP BY queue, phase"
_WRITTEN: Final = ("state", "pending", "inqueue", "running", "completed", "allocated")


def queue_status(state: str | None, phases: Mapping[str, int], allocated: Mapping[str, int]) -> JsonObject:
    """The status of a queue carrying ``state``, its jobs counted by ``phases``, holding ``allocated``."""
    state = state or "Open"
    if state == "Closing" and not any(phases.get(phase) for phase in _UNFINISHED):
        state = "Closed"
    return {
        "state": state,
        "pending": phases.get("Pending", 0),
        "inqueue": phases.get("Inqueue", 0),
        "running": phases.get("Running", 0),
        "completed": phases.get("Completed", 0) + phases.get("Failed", 0),
        "allocated": dict(format_resources(dict(allocated))),
    }


def status_patch(observed: JsonObject, wanted: JsonObject) -> JsonObject | None:
    """The status merge patch taking ``observed`` to ``wanted`` (None: nothing to write)."""
    if all(observed.get(key) == wanted[key] for key in _WRITTEN):
        return None
    # A merge patch merges maps: a resource no longer held is removed with null.
    allocated: dict[str, JsonValue] = dict.fromkeys(json_object(observed, "allocated"))
    allocated.update(json_object(wanted, "allocated"))
    return {**wanted, "allocated": allocated}


class QueueStatusWriter:
    """Writes the status of the cluster's Queues when it differs from what they show."""

    def __init__(self, client: KubeClient, pool: asyncpg.Pool) -> None:
        self.client = client
        self.pool = pool
        self._read = 0.0
        #: The projection's seq and the Queues' versions last read: unchanged, nothing to write.
        self._seen: tuple[int, list[tuple[str, str | None]]] = (-1, [])

    async def update(self, queues: Mapping[str, JsonObject]) -> None:
        """The status of each of ``queues`` (the informer's Queues) brought up to date."""
        if not queues or time.monotonic() - self._read < _EVERY:
            return
        self._read = time.monotonic()
        versions = [(name, json_str(queues[name], "metadata", "resourceVersion")) for name in sorted(queues)]
        seen = (await projection_seq(self.pool), versions)
        if seen == self._seen:
            return
        self._seen = seen
        phases: dict[str, dict[str, int]] = {}
        async with self.pool.acquire() as con:
            for row in await con.fetch(_PHASES):
                phases.setdefault(row["queue"], {})[row["phase"]] = row["n"]
            known = {row["name"] for row in await con.fetch("SELECT name FROM queues")}
            _, held = await occupancy(con)
        for name in sorted(queues.keys() & known):
            queue = queues[name]
            observed = json_object(queue, "status")
            wanted = queue_status(json_str(observed, "state"), phases.get(name, {}), held.get(name, {}))
            patch = status_patch(observed, wanted)
            if patch is not None:
                await self._write(name, json_str(queue, "metadata", "resourceVersion"), patch)

    async def _write(self, name: str, version: str | None, status: JsonObject) -> None:
        path = resource_path("scheduling.volcano.sh/v1beta1", "queues", name=name)
        body: JsonObject = {"status": status}
        if version is not None:
            body["metadata"] = {"resourceVersion": version}
        try:
            await self.client.merge_patch(f"{path}/status", body)
        except KubeApiError as exc:
            if exc.status == 409:  # changed meanwhile: the watch brings the newer one, read next time
                self._read, self._seen = 0.0, (-1, [])
            elif exc.status != 404:
                log.warning("Queue %s status: %s", name, exc)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("Queue %s status: %s", name, exc)
