"""Shared helpers for the api tests (and the kube tests that read topics)."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

__all__ = ["read_topic"]


async def read_topic(
    bootstrap: str, topic: str, expect: int
) -> list[tuple[bytes, list[tuple[str, bytes]], bytes]]:
    """Records of ``topic`` from the start; stops at ``expect`` records or after a quiet second."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    try:
        out = []
        while len(out) < expect or expect == 0:
            batch = await consumer.getmany(timeout_ms=1000)
            if not batch:
                break
            for records in batch.values():
                out.extend((r.value, list(r.headers), r.key) for r in records)
        return out
    finally:
        await consumer.stop()
