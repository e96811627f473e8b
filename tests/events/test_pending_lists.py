"""Whole pending lists changed a session at a time (events.pending_lists): the same lists as the
reading by dict it replaced, whatever the base, and the change it keeps is the one it made;
projector.newest_pending writes from that change what a comparison of the lists writes."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from events.models import PendingJob, PendingReason
from events.pending_lists import _by_dict as by_dict  # the reading before: the reference
from events.pending_lists import changed_pending, in_job_order, last_change
from projector.newest_pending import NewestPendingRows
from projector.projection_rows import StagedRows


def _entry(job: str, message: str = "x") -> PendingJob:
    return PendingJob(job=job, reasons=[PendingReason(code="Unschedulable", message=message)])


def _same(a: tuple[PendingJob, ...], b: tuple[PendingJob, ...]) -> bool:
    """The same entries, object for object (unchanged entries are kept, not copied)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _job(rnd: random.Random) -> str:
    return f"ns/job-{rnd.randint(0, 60):03d}"


def _change(rnd: random.Random) -> tuple[list[PendingJob], list[str]]:
    changed = [_entry(_job(rnd), str(rnd.randint(0, 2))) for _ in range(rnd.randint(0, 8))]
    return changed, [_job(rnd) for _ in range(rnd.randint(0, 8))]


def test_a_change_makes_the_list_the_dict_reading_makes_from_any_base() -> None:
    rnd = random.Random(7)
    for _ in range(2_000):
        names = [_job(rnd) for _ in range(rnd.randint(0, 30))]
        if rnd.random() < 0.7:
            names = sorted(set(names))  # the scheduler's lists: each job once, in job order
        base = tuple(_entry(name) for name in names)
        expected = base
        for _ in range(3):  # changes of changes: the kept jobs are used from the second on
            changed, cleared = _change(rnd)
            made, expected = changed_pending(base, changed, cleared), by_dict(expected, changed, cleared)
            assert _same(made, expected)
            assert in_job_order(made)
            base = made


def test_in_job_order_is_strict_job_order() -> None:
    assert in_job_order(())
    assert in_job_order((_entry("a"), _entry("b")))
    assert not in_job_order((_entry("b"), _entry("a")))
    assert not in_job_order((_entry("a"), _entry("a")))


def test_the_last_change_is_what_was_put_in_and_removed() -> None:
    base = changed_pending((), [_entry("a"), _entry("b"), _entry("c")], [])
    made = changed_pending(base, [_entry("d"), _entry("b", "new"), _entry("b", "newer")], ["a", "d", "x"])
    change = last_change(base, made)
    assert change is not None
    assert [(e.job, e.reasons[0].message) for e in change.put] == [("b", "newer"), ("d", "x")]
    assert change.removed == ["a"]
    assert [e.job for e in made] == ["b", "c", "d"]
    assert last_change(made, made) is None
    changed_pending(made, [], [])
    assert last_change(base, made) is None  # only the last change is kept


def _writes(rows: NewestPendingRows, pending: tuple[PendingJob, ...]) -> tuple[list[str], list[str], bool]:
    """(the jobs written, the jobs deleted, whether the table was emptied first)."""
    out = rows.writes(SimpleNamespace(sessions={"s": SimpleNamespace(pending=pending)}))  # type: ignore[arg-type]
    written = [record[0] for w in out if isinstance(w, StagedRows) for record in w.records]
    deleted: list[Any] = [w[1][0] for w in out if isinstance(w, tuple) and w[1]]
    emptied = any(isinstance(w, tuple) and not w[1] for w in out)
    return written, deleted[0] if deleted else [], emptied


def test_newest_pending_writes_the_change_a_comparison_of_the_lists_finds() -> None:
    rnd = random.Random(11)
    for _ in range(300):
        rows = NewestPendingRows()
        held: dict[str, PendingJob] | None = None
        pending: tuple[PendingJob, ...] = ()
        for _ in range(8):
            if rnd.random() < 0.15:  # a whole list, maybe out of order or naming a job twice
                pending = tuple(_entry(_job(rnd), str(rnd.randint(0, 2))) for _ in range(rnd.randint(0, 20)))
            else:
                pending = changed_pending(pending, *_change(rnd))
                if rnd.random() < 0.1:
                    changed_pending((_entry("other"),), [], [])  # another list made since: compared
            now = {e.job: e for e in pending}
            expected_deleted = [] if held is None else sorted(job for job in held if job not in now)
            expected_written = [
                job
                for job, e in now.items()
                if held is None or ((old := held.get(job)) is not e and old != e)
            ]
            assert _writes(rows, pending) == (expected_written, expected_deleted, held is None)
            held = now
