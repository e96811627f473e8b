"""``tephra kube-dev-cluster``: the dev cluster in the foreground until SIGTERM or Ctrl-C."""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path

from kube.dev.binaries import BinaryMissingError
from kube.dev.cluster import ClusterStartError, DevCluster

__all__ = ["dev_cluster_command"]


def dev_cluster_command(directory: Path | None, kubeconfig: Path | None) -> int:
    """Start the cluster, print the admin kubeconfig's path, wait for a signal, stop; the exit status."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    cluster = DevCluster(directory)
    try:
        cluster.start()
    except (BinaryMissingError, ClusterStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        written = cluster.kubeconfig
        if kubeconfig is not None:
            kubeconfig.parent.mkdir(parents=True, exist_ok=True)
            written = Path(shutil.copyfile(cluster.kubeconfig, kubeconfig))
        print(
            f"tephra: kube-apiserver v1.20.2 at {cluster.server} (data in {cluster.directory})",
            file=sys.stderr,
        )
        print(f"tephra: export KUBECONFIG={written}; Ctrl-C stops it", file=sys.stderr)
        print(written, flush=True)
        while not stop.wait(0.5):
            if (failed := cluster.exited()) is not None:
                print(f"error: {failed}", file=sys.stderr)
                return 1
    finally:
        cluster.stop()
    return 0
