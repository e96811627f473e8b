"""What the projection's occupying tasks hold: resources per node and per queue.

A task holds its role's requests (and one ``pods``) on its node from its
binding until it is released (:data:`projector.state.OCCUPYING`).  Readers of
the projection tables (``tephra get``, the HTTP API, the Kubernetes bridge's
Queue status) sum them here, in integer units (:mod:`events.quantity`).
"""

from __future__ import annotations

import json

import asyncpg

from events.quantity import PODS, parse_resources
from projector.state import OCCUPYING

__all__ = ["Held", "occupancy"]

#: name -> resource -> amount held (integer units).
Held = dict[str, dict[str, int]]

_QUERY = """
SELECT t.node, t.role, j.queue, j.spec -> 'task_specs' AS specs
  FROM tasks t JOIN jobs j ON j.id = t.job_id
 WHERE t.status = ANY($1::text[]) AND t.node IS NOT NULL
"""


async def occupancy(con: asyncpg.Connection | asyncpg.Pool) -> tuple[Held, Held]:
    """Resources held per node and per queue by tasks that occupy a node (each also one ``pods``)."""
    per_node: Held = {}
    per_queue: Held = {}
    for row in await con.fetch(_QUERY, sorted(OCCUPYING)):
        specs = json.loads(row["specs"]) if isinstance(row["specs"], str) else row["specs"]
        spec = next((s for s in specs or () if s["name"] == row["role"]), None)
        request = parse_resources(spec.get("resources") if spec else None)
        request[PODS] = request.get(PODS, 0) + 1
        for bucket in (per_node.setdefault(row["node"], {}), per_queue.setdefault(row["queue"], {})):
            for name, amount in request.items():
                bucket[name] = bucket.get(name, 0) + amount
    return per_node, per_queue
