"""Tephra's side of bench/kube_scheduling.py: bridge, projector and scheduler binding real pods.

``python bench/kube_scheduling.py --scheduler kube-scheduler --scheduler tephra`` imports
:class:`TephraSide`.  Entering :meth:`TephraSide.running` starts an embedded broker and
PostgreSQL (not durable), then ``tephra projector``, ``tephra scheduler`` and ``tephra
kube-bridge`` (the admin's kubeconfig, ``--install-crds``) as processes of their own, as they
are deployed, and returns once the bridge has listed the cluster; leaving stops them.  Each
pod (``schedulerName: tephra``, no PodGroup) is a one-pod gang.  The services' logs are in the
bench's log folder.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's packages, whatever is installed

from api.embedded import EmbeddedBroker, EmbeddedPostgres
from kube.dev.cluster import DevCluster

ROOT: Final = Path(__file__).resolve().parents[1]
SERVICES: Final = ("projector", "scheduler", "kube-bridge")
#: The bridge logs this once it has listed every watched resource and read the projection.
SYNCED: Final = b"synced ("


@dataclass
class TephraSide:
    name: str = "tephra"
    scheduler_name: str = "tephra"
    #: A session every 0.1 s at most when nothing wakes the scheduler sooner (its default is 1 s).
    schedule_period: float = 0.1

    @asynccontextmanager
    async def running(self, cluster: DevCluster, logs: Path) -> AsyncIterator[None]:
        logs.chmod(0o711)  # noqa: ASYNC240 - PostgreSQL runs as nobody under root and must enter it
        with (
            EmbeddedPostgres(logs / "postgres", durable=False) as postgres,
            EmbeddedBroker(log_path=logs / "broker.log") as broker,
        ):
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "TEPHRA_KAFKA_BOOTSTRAP": broker.bootstrap,
                "TEPHRA_DATABASE_URL": postgres.dsn,
                "TEPHRA_KUBECONFIG": str(cluster.kubeconfig),
                "TEPHRA_SCHEDULE_PERIOD": str(self.schedule_period),
            }
            processes: list[asyncio.subprocess.Process] = []
            try:
                for service in SERVICES:
                    args = [service, "--install-crds"] if service == "kube-bridge" else [service]
                    with (logs / f"tephra-{service}.log").open("wb") as log:
                        processes.append(
                            await asyncio.create_subprocess_exec(
                                sys.executable,
                                "-c",
                                "from api.cli import main; main()",
                                *args,
                                env=env,
                                stdout=log,
                                stderr=asyncio.subprocess.STDOUT,
                            )
                        )
                await _wait_synced(logs / "tephra-kube-bridge.log", processes)
                yield
            finally:
                for process in processes:
                    if process.returncode is None:
                        process.terminate()
                for process in processes:
                    await process.wait()


async def _wait_synced(log: Path, processes: list[asyncio.subprocess.Process]) -> None:
    async with asyncio.timeout(120):
        while SYNCED not in await asyncio.to_thread(log.read_bytes):
            for process in processes:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"a Tephra service exited with status {process.returncode}; see {log.parent}"
                    )
            await asyncio.sleep(0.2)
