"""The services create their topics on a broker that has none (api.stack.ensure_topics)."""

from __future__ import annotations

import secrets

from aiokafka.admin import AIOKafkaAdminClient

from api.embedded import create_topics
from api.stack import ensure_topics
from events.topics import Topics


async def _partitions(bootstrap: str, topics: Topics) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics.all()))
    finally:
        await admin.close()
    return {d["topic"]: len(d["partitions"]) for d in described if d["error_code"] == 0}


async def test_missing_topics_are_created_and_existing_ones_left_alone(kafka_bootstrap: str) -> None:
    topics = Topics(f"fresh-{secrets.token_hex(4)}")
    # One of them exists already, with a partition count of its operator's choosing.
    await create_topics(kafka_bootstrap, [topics.decisions], partitions=3)

    await ensure_topics(kafka_bootstrap, topics)
    await ensure_topics(kafka_bootstrap, topics)  # again: nothing to do, no error

    assert await _partitions(kafka_bootstrap, topics) == {
        topics.intents: 1,
        topics.observations: 1,
        topics.decisions: 3,
        topics.rejected: 1,
    }
