"""The projector's door: the bounds a record must keep before it is decoded and folded.

The event models bound every value an event carries (times, quantities, epochs,
counts: ``docs/archive-format.md``, "Bounds"); these are the bounds that are the
deployment's to choose (settings, ``projector.settings``) and the records that
are refused whatever they hold:

* a record over ``max_record_bytes`` is refused before it is decoded
  (``record-too-large``; the first :data:`KEPT_BYTES` are kept);
* a JobSubmitted (or a TasksAdded) with a task of more than ``max_replicas_per_task``
  replicas (``too-many-replicas``) or more than ``max_tasks_per_job`` tasks in all
  (``too-many-tasks``): each task is state the projector and the scheduler keep.
  (The door keeps no state: a TasksAdded is bounded on its own, not with the job's
  tasks so far.);
* a SchedulerConfigured that ``config_check`` finds no session could run with
  (``invalid-config``): in force, it would fail every session.  The check is the
  scheduler's (``scheduler.core.config.config_problem``), given by whoever composes
  the projector (``api``), as the projector does not import the scheduler;
* a record at a position in ``refused``: the operator's ``--skip-record``
  (``skipped-by-operator``), or a record that failed the fold or storage in an
  earlier run of this process (``fold-failed``, ``unstorable``).

A refusal is a :class:`~projector.plan.Rejection` like any other: it is kept in
``rejected_events`` and the dead-letter topic, and the batch goes on.  Refusals
are decided before the fold and never enter the archive, so replay (which
folds the archive) needs none of these settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from events.models import Event, JobSubmitted, SchedulerConfigSpec, SchedulerConfigured, TasksAdded
from projector.trust import Trust

__all__ = [
    "KEPT_BYTES",
    "MAX_DETAIL",
    "ConfigCheck",
    "Door",
    "Position",
    "refusal",
    "short",
]

#: (topic, partition, offset): a record's place in Kafka.
Position = tuple[str, int, int]
#: What makes a scheduler configuration unusable, or None (``config_problem``).
ConfigCheck = Callable[[SchedulerConfigSpec], str | None]

#: Bytes of a record too large to decode that ``rejected_events`` keeps (its head;
#: the record itself stays in Kafka until the topic's retention drops it).
KEPT_BYTES: Final = 64 * 1024
#: Characters of a rejection's detail kept (an exception's text can hold the input).
MAX_DETAIL: Final = 2_000


@dataclass(frozen=True, slots=True)
class Door:
    """The deployment's bounds and the positions refused whatever they hold."""

    max_record_bytes: int = 2 * 1024 * 1024
    max_replicas_per_task: int = 10_000
    max_tasks_per_job: int = 10_000
    #: position -> (code, detail).  The service's own mapping: it adds to it between runs.
    refused: Mapping[Position, tuple[str, str]] = field(default_factory=dict)
    config_check: ConfigCheck | None = None
    #: Who may produce what (projector.trust); None: no check (tools and tests that fold by hand).
    trust: Trust | None = None


def refusal(door: Door, event: Event) -> tuple[str, str] | None:
    """(code, detail) when ``event`` may not pass ``door``, else None."""
    if isinstance(event, SchedulerConfigured):
        check = door.config_check
        problem = None if check is None else check(event.data.config)
        if problem is None:
            return None
        return ("invalid-config", f"no session can run with this configuration: {problem}")
    if not isinstance(event, JobSubmitted | TasksAdded):
        return None
    total = 0
    for task in event.data.tasks:
        if task.replicas > door.max_replicas_per_task:
            return (
                "too-many-replicas",
                f"task {task.name!r} asks for {task.replicas} replicas; at most {door.max_replicas_per_task}"
                " (TEPHRA_MAX_REPLICAS_PER_TASK) are accepted: split the job or raise the setting",
            )
        total += task.replicas
    if total > door.max_tasks_per_job:
        return (
            "too-many-tasks",
            f"the job's tasks have {total} replicas in all; at most {door.max_tasks_per_job}"
            " (TEPHRA_MAX_TASKS_PER_JOB) are accepted: split the job or raise the setting",
        )
    return None


def short(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to ``limit`` characters (marked), storable as PostgreSQL text (NUL escaped)."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    # Lone surrogates (from no decoded event, but an exception may hold anything) would
    # fail the UTF-8 encoding of the text column: escaped as NUL is.
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\u0000")
