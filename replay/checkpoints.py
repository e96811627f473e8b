"""Where ``replay verify`` gets signed checkpoints: a file an auditor kept, or the checkpoint topic.

Both are out of the database's reach, which is the point: a checkpoint read
from the ``checkpoints`` table would prove nothing about the table's
neighbour ``event_log``.  A source is

* a path: a file of checkpoint records, one JSON object per line
  (``docs/archive-format.md``, "Checkpoints"; what ``replay checkpoints
  export`` writes), blank lines ignored;
* ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``: every record of the topic's
  partitions, read from the earliest offset to the end as of now.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from events.checkpoints import Checkpoint, CheckpointError, parse_checkpoint
from projector.connection_settings import ConnectionSettings
from projector.connections import kafka_access, new_consumer
from replay.errors import CheckpointsUnavailable

__all__ = ["KAFKA_SCHEME", "load_checkpoints", "read_checkpoint_file", "read_checkpoint_topic"]

KAFKA_SCHEME: Final = "kafka://"
_POLL_MS: Final = 1_000


async def load_checkpoints(source: str) -> list[Checkpoint]:
    """The checkpoints of ``source`` (a path or a ``kafka://`` URL), in the order they were kept.

    Raises:
        CheckpointsUnavailable: the source cannot be read, or holds a record that is not a checkpoint.
    """
    if source.startswith(KAFKA_SCHEME):
        bootstrap, _, topic = source.removeprefix(KAFKA_SCHEME).partition("/")
        if not bootstrap or not topic:
            raise CheckpointsUnavailable(f"{source!r}: expected kafka://HOST:PORT/TOPIC")
        return [
            _parsed(record, f"{topic} record {n}")
            for n, record in enumerate(await read_checkpoint_topic(bootstrap, topic))
        ]
    return read_checkpoint_file(Path(source))


def read_checkpoint_file(path: Path) -> list[Checkpoint]:
    """The checkpoints of a JSON-lines file (one record a line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointsUnavailable(f"cannot read the checkpoints file {path}: {exc}") from None
    return [_parsed(line, f"{path} line {n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]


async def read_checkpoint_topic(bootstrap: str, topic: str) -> list[bytes]:
    """Every record of ``topic`` as of now (earliest to end, partition by partition), as bytes."""
    # The deployment's Kafka transport and credentials (TEPHRA_KAFKA_*), as every client's.
    consumer = new_consumer(
        kafka_access(ConnectionSettings(), bootstrap), group_id=None, enable_auto_commit=False
    )
    try:
        await consumer.start()
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer.topics()  # refresh the metadata once: a fresh client may not know it yet
            partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            raise CheckpointsUnavailable(f"the broker at {bootstrap} has no topic {topic!r}")
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        records: dict[TopicPartition, list[bytes]] = {tp: [] for tp in assigned}
        while [tp for tp in assigned if await consumer.position(tp) < ends[tp]]:
            fetched = await consumer.getmany(timeout_ms=_POLL_MS)
            for tp, messages in fetched.items():
                records[tp] += [m.value or b"" for m in messages if m.offset < ends[tp]]
    except KafkaError as exc:
        raise CheckpointsUnavailable(
            f"cannot read the checkpoint topic {topic!r} at {bootstrap}: {exc!r}"
        ) from None
    finally:
        await consumer.stop()
    return [record for tp in assigned for record in records[tp]]


def _parsed(text: str | bytes, where: str) -> Checkpoint:
    try:
        return parse_checkpoint(text)
    except CheckpointError as exc:
        raise CheckpointsUnavailable(f"{where} is not a checkpoint record: {exc}") from None
