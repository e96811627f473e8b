"""``python -m projector``: run the projector service until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from events.models import DEFAULT_CLUSTER
from events.topics import Topics
from projector.service import ProjectorConfig, run_projector, tune_gc


def _parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m projector", description=__doc__)
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (host:port,...)")
    parser.add_argument("--dsn", required=True, help="PostgreSQL URL of the archive database")
    parser.add_argument("--topics-prefix", default="tephra", help="topic prefix (default: tephra)")
    parser.add_argument("--cluster", default=DEFAULT_CLUSTER, help="the cluster id this archive holds")
    parser.add_argument("--consumer", default="", help="offset owner name (default: projector:<cluster>)")
    parser.add_argument("--batch-size", type=int, default=5_000, help="max records per transaction")
    parser.add_argument("--linger-ms", type=int, default=50, help="how long a batch waits to fill up")
    parser.add_argument("--snapshot-every", type=int, default=10_000, help="events between state snapshots")
    parser.add_argument(
        "--snapshot-scale",
        type=float,
        default=1.0,
        help="and at least this many events per job, task and node of the state (0: every --snapshot-every)",
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.snapshot_every <= 0:
        parser.error(f"--snapshot-every must be a positive number of events, got {args.snapshot_every}")
    if not args.snapshot_scale >= 0:
        parser.error(f"--snapshot-scale must be zero or more, got {args.snapshot_scale}")
    return args


async def _main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    config = ProjectorConfig(
        bootstrap=args.bootstrap,
        dsn=args.dsn,
        topics=Topics(prefix=args.topics_prefix),
        cluster=args.cluster,
        consumer=args.consumer,
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        snapshot_every=args.snapshot_every,
        snapshot_scale=args.snapshot_scale,
        freeze_state=True,
        freeze_batches=True,
    )
    await run_projector(config, stop=stop)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    tune_gc()  # this process runs the projector alone
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
