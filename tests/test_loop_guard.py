"""The loop guard (tests/conftest.py) passes over exactly asyncpg's leftover COPY waiter."""

from __future__ import annotations

import os
import traceback
from typing import Any

import asyncpg

from tests.conftest import _asyncpg_copy_waiter

_ASYNCPG = os.path.join("site-packages", "asyncpg", "connection.py")


def _context(message: str, exc: BaseException, frames: list[tuple[str, str]]) -> dict[str, Any]:
    created = traceback.StackSummary.from_list([(path, 1, name, "") for path, name in frames])
    return {"message": message, "exception": exc, "source_traceback": created}


def test_the_waiter_a_failed_copy_leaves_is_passed_over() -> None:
    lost = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
    frames = [("projector/projection.py", "execute_writes"), (_ASYNCPG, "copy_records_to_table")]
    assert _asyncpg_copy_waiter(_context("Future exception was never retrieved", lost, frames))


def test_every_other_report_still_fails_the_test() -> None:
    lost = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
    copy = [(_ASYNCPG, "copy_records_to_table")]
    # Another message, another exception, or a future made elsewhere: reported as before.
    assert not _asyncpg_copy_waiter(_context("Task exception was never retrieved", lost, copy))
    assert not _asyncpg_copy_waiter(_context("Future exception was never retrieved", ValueError("x"), copy))
    elsewhere = [("projector/service.py", "_commit"), (_ASYNCPG, "execute")]
    assert not _asyncpg_copy_waiter(_context("Future exception was never retrieved", lost, elsewhere))
    assert not _asyncpg_copy_waiter({"message": "Future exception was never retrieved", "exception": lost})
