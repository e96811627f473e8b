"""``python -m scheduler``: one scheduler process (leader or standby) against given endpoints.

Settings come from the ``TEPHRA_*`` environment (``api.settings`` is the
single settings object; ``scheduler`` may not import ``api``, so the few
variables this entry point needs are read here) or the options below.
Prints one line ``leader epoch=<n>`` to stdout each time this process becomes
leader, for supervisors and tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from events.topics import Topics
from projector.service import tune_gc


def _parse(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m scheduler", description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-bootstrap", default=env("TEPHRA_KAFKA_BOOTSTRAP"))
    parser.add_argument("--database-url", default=env("TEPHRA_DATABASE_URL"))
    parser.add_argument("--topics-prefix", default=env("TEPHRA_TOPICS_PREFIX", "tephra"))
    parser.add_argument("--cluster", default=env("TEPHRA_CLUSTER", "default"))
    parser.add_argument("--schedule-period", type=float, default=float(env("TEPHRA_SCHEDULE_PERIOD", "1.0")))
    parser.add_argument("--session-budget", type=float, default=float(env("TEPHRA_SESSION_BUDGET", "30.0")))
    parser.add_argument("--holder", default=None, help="name recorded in scheduler_leaders")
    parser.add_argument("--log-level", default=env("TEPHRA_LOG_LEVEL", "INFO"))
    args = parser.parse_args(argv)
    for name in ("kafka_bootstrap", "database_url"):
        if not getattr(args, name):
            parser.error(f"--{name.replace('_', '-')} (or TEPHRA_{name.upper()}) is required")
    return args


async def _main(args: argparse.Namespace) -> None:
    from scheduler.service.main import run_scheduler  # noqa: PLC0415 - after argument errors, not before

    def announce(epoch: int) -> None:
        print(f"leader epoch={epoch}", flush=True)

    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - always true inside a running coroutine
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await run_scheduler(
            kafka_bootstrap=args.kafka_bootstrap,
            database_url=args.database_url,
            topics=Topics(args.topics_prefix),
            cluster=args.cluster,
            schedule_period=args.schedule_period,
            session_budget=args.session_budget,
            holder=args.holder,
            on_leader=announce,
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    # Sessions build and drop large object graphs: CPython's default GC thresholds
    # rescan them over and over (about a fifth of a large session's time).
    tune_gc()
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
