"""Every reason that blocks a job, not only the first: the refusals hidden behind it.

The scheduler stops at the first refusal: an enqueue vote that rejects ends
the vote (Volcano's semantics), so a gang refused by ``overcommit`` never
hears that its queue's capability would refuse it too, and the session
records one reason.  To show every blocker, replay *lifts* the refusal it
can name — switches off that plugin's check (``enableJobEnqueued``,
``enableAllocatable``, ``enableOverused``), or opens / creates the queue —
re-runs the session, and keeps the new reasons, marked with what was lifted
to reveal them; then lifts the next, a few rounds deep.  Node-fit reasons
(``insufficient-resources``, ``predicate-failed``) are not lifted: only the
counterfactual's changes move them.  Every reason comes from a real re-run
of the scheduler's code; nothing is inferred.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replay.probe import OutOfBudget, Probe
from replay.quantities import detail_quantities
from scheduler.core.config import PluginOption, SchedulerConfig, Tier
from scheduler.core.reasons import CODES, Reason
from scheduler.core.snapshot import ClusterSnapshot, Queue

__all__ = ["Blocker", "find_blockers", "limits_capability", "overcommitted", "ranked", "reason_key"]

_RANK = {code: i for i, code in enumerate(CODES)}
#: How many refusals deep the search lifts (each round is one re-run).
_ROUNDS = 4
#: The extension point whose check a reason comes from: switching it off lifts the reason.
_FLAGS = {
    "enqueue-rejected": ("enableJobEnqueued", "enqueue check"),
    "queue-not-allocatable": ("enableAllocatable", "allocatable check"),
    "queue-overused": ("enableOverused", "overused check"),
}


@dataclass(frozen=True, slots=True)
class Blocker:
    """A reason the job does not fit, with what had to be lifted to see it."""

    reason: Reason
    #: None: the session as recorded gives it; else the refusals lifted to reveal it.
    behind: str | None = None

    def to_json(self) -> dict[str, Any]:
        r = self.reason
        return {
            "code": r.code,
            "message": r.message,
            "detail": detail_quantities(dict(r.detail)),
            "hiddenBehind": self.behind,
        }


@dataclass(frozen=True, slots=True)
class _Lift:
    """One refusal switched off: a plugin's check (all plugins' when ``plugin`` is ""), or a queue made."""

    text: str
    flag: str = ""
    plugin: str = ""
    queue: str = ""

    def config(self, config: SchedulerConfig) -> SchedulerConfig:
        if not self.flag:
            return config

        def off(p: PluginOption) -> PluginOption:
            if self.plugin and p.name != self.plugin:
                return p
            return dataclasses.replace(p, flags={**p.flags, self.flag: False})

        return dataclasses.replace(
            config, tiers=tuple(Tier(plugins=tuple(off(p) for p in t.plugins)) for t in config.tiers)
        )

    def snapshot(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        if not self.queue:
            return snapshot
        existing = next((q for q in snapshot.queues if q.name == self.queue), None)
        opened = Queue(name=self.queue) if existing is None else dataclasses.replace(existing, state="Open")
        others = tuple(q for q in snapshot.queues if q.name != self.queue)
        return dataclasses.replace(snapshot, queues=(*others, opened))


def _lift_for(reason: Reason) -> _Lift | None:
    detail = reason.detail
    if reason.code == "queue-missing":
        return _Lift(f"queue {detail.get('queue')} missing", queue=str(detail.get("queue", "")))
    if reason.code == "queue-closed":
        queue = str(detail.get("queue", ""))
        return _Lift(f"queue {queue} being {detail.get('state')}", queue=queue)
    point = _FLAGS.get(reason.code)
    if point is None:
        return None
    plugin = str(detail.get("plugin", ""))
    if reason.code == "enqueue-rejected" and not plugin:
        return None  # a vote that named no plugin: nothing to switch off
    flag, what = point
    return _Lift(f"{plugin}'s {what}" if plugin else f"the {what}", flag=flag, plugin=plugin)


def reason_key(reason: Reason) -> tuple[str, ...]:
    """What makes two reasons the same blocker (their numbers aside)."""
    d = reason.detail
    return (reason.code, *(str(d.get(k, "")) for k in ("plugin", "limitKind", "queue", "resource")))


def find_blockers(probe: Probe, reasons: Sequence[Reason]) -> tuple[tuple[Blocker, ...], bool]:
    """The job's blockers, ranked (code rank, then as found), and whether the search ran to its end.

    ``reasons``: the job's reasons in the session as recorded (re-derived).
    The search ends when no reason left can be lifted, the job fits with the
    lifts, or after a few rounds; it is cut (False) when the probe's budget runs out.
    """
    found = [Blocker(r) for r in reasons]
    seen = {reason_key(r) for r in reasons}
    lifts: list[_Lift] = []
    current: Sequence[Reason] = reasons
    complete = True
    try:
        for _ in range(_ROUNDS):
            lift = next((x for r in current if (x := _lift_for(r)) is not None and x not in lifts), None)
            if lift is None:
                break
            lifts.append(lift)
            snapshot, config = probe.snapshot, probe.config
            for done in lifts:
                snapshot, config = done.snapshot(snapshot), done.config(config)
            outcome = probe.run(snapshot, config)
            if outcome.fits:
                break
            behind = " and ".join(x.text for x in lifts)
            for reason in outcome.reasons:
                if reason_key(reason) not in seen:
                    seen.add(reason_key(reason))
                    found.append(Blocker(reason, behind))
            current = outcome.reasons
    except OutOfBudget:
        complete = False
    return ranked(found), complete


def ranked(blockers: Sequence[Blocker]) -> tuple[Blocker, ...]:
    """By code rank (the most fundamental first), then in the order found."""
    order = sorted(range(len(blockers)), key=lambda i: (_RANK.get(blockers[i].reason.code, len(_RANK)), i))
    return tuple(blockers[i] for i in order)


def limits_capability(blockers: Sequence[Blocker], queue: Queue) -> bool:
    """Whether a blocker is ``queue``'s own capability: an absolute limit no number of nodes lifts.

    (A realCapability without a capability set is the cluster's size, which nodes do raise.)
    """
    for b in blockers:
        d = b.reason.detail
        if d.get("queue") != queue.name or d.get("limitKind") not in ("capability", "realCapability"):
            continue
        resources = [d["resource"]] if "resource" in d else list(d.get("resources") or {})
        if any(r in queue.capability for r in resources):
            return True
    return False


def overcommitted(blockers: Sequence[Blocker]) -> Blocker | None:
    """The overcommit refusal among the blockers: it weighs the cluster's size against what is
    used and admitted, which no queue setting changes."""
    return next(
        (
            b
            for b in blockers
            if b.reason.code == "enqueue-rejected" and b.reason.detail.get("plugin") == "overcommit"
        ),
        None,
    )
