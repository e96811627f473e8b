"""A real Kubernetes control plane on loopback: etcd and kube-apiserver v1.20.2, nothing else.

RBAC is enforced; an admin token (group ``system:masters``) is in a static token file; a
service-account signing key makes the TokenRequest API work, so a ServiceAccount's token can be
minted (:mod:`kube.dev.accounts`) and Tephra run under its ClusterRole.  No controller-manager
and no kubelet run: nothing creates default ServiceAccounts (hence the ServiceAccount admission
plugin is off), nothing collects garbage, and nothing removes the ``not-ready`` taint the
apiserver puts on every new Node (``tephra kube-sim-kubelet`` does).

:class:`DevCluster` is a context manager, plain or async; ``tephra kube-dev-cluster`` runs one
until SIGTERM or Ctrl-C.  Each server runs in its own process group and is stopped on exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from kube.dev.binaries import DevBinaries, find_binaries

__all__ = ["ClusterStartError", "DevCluster", "free_port", "write_kubeconfig"]

LOOPBACK = "127.0.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
_LOG_TAIL_BYTES = 3000


class ClusterStartError(RuntimeError):
    """A server exited or did not become ready in time; the message ends with its log's tail."""


def free_port() -> int:
    """A TCP port free on loopback now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def write_kubeconfig(path: Path, *, server: str, ca_file: Path, user: str, token: str) -> Path:
    """A kubeconfig with one cluster, one user (a bearer token) and one current context; mode 0600."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tephra-dev", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "tephra-dev", "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        yaml.safe_dump(config, out, sort_keys=False)
    return path


def _write_signing_key(private: Path, public: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


class _Server:
    """One child process in its own session, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")  # a restarted server appends
        self.process = subprocess.Popen(  # noqa: S603 (our own binaries, arguments we built)
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def check_running(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ClusterStartError(f"{self.name} exited with status {code}:\n{self.log_tail()}")

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            data = self.log_path.read_bytes()
            return data[-_LOG_TAIL_BYTES:].decode(errors="replace")
        return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


class DevCluster:
    """etcd + kube-apiserver on free loopback ports, data in ``directory`` (a temporary one if None).

    After :meth:`start`: ``server`` (https URL), ``ca_file``, ``admin_token`` and
    ``kubeconfig`` (the admin's, in the data directory).
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        binaries: DevBinaries | None = None,
        ready_timeout: float = 60.0,
    ) -> None:
        self._own_directory = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="tephra-kube-")) if directory is None else directory
        self._binaries = binaries
        self._ready_timeout = ready_timeout
        self._servers: list[_Server] = []
        self.api_port = 0
        self.admin_token = ""
        self._apiserver_argv: list[str] = []

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.directory / "certs" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    def start(self) -> Self:
        binaries = self._binaries or find_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            etcd_url = self._start_etcd(binaries)
            self._start_apiserver(binaries, etcd_url)
        except BaseException:
            self.stop()
            raise
        write_kubeconfig(
            self.kubeconfig, server=self.server, ca_file=self.ca_file, user="admin", token=self.admin_token
        )
        return self

    def _start_etcd(self, binaries: DevBinaries) -> str:
        client_url = f"http://{LOOPBACK}:{free_port()}"
        peer_url = f"http://{LOOPBACK}:{free_port()}"
        etcd = _Server(
            "etcd",
            [
                str(binaries.etcd),
                f"--data-dir={self.directory / 'etcd'}",
                "--name=default",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                # A throw-away store: no fsync per write (the apiserver's writes dominate bench/kube.py).
                "--unsafe-no-fsync",
            ],
            self.directory / "etcd.log",
        )
        self._servers.append(etcd)
        self._wait_until(etcd, lambda: self._http_ok(f"{client_url}/health", None))
        return client_url

    def _start_apiserver(self, binaries: DevBinaries, etcd_url: str) -> None:
        self.admin_token = secrets.token_urlsafe(32)
        tokens = self.directory / "tokens.csv"
        with os.fdopen(os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
            out.write(f"{self.admin_token},admin,admin-uid,system:masters\n")
        _write_signing_key(self.directory / "sa.key", self.directory / "sa.pub")
        self.api_port = free_port()
        self._apiserver_argv = [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={self.api_port}",
            "--insecure-port=0",
            f"--cert-dir={self.directory / 'certs'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={self.directory / 'sa.pub'}",
            f"--service-account-signing-key-file={self.directory / 'sa.key'}",
            f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            # No controller-manager makes the default ServiceAccount this plugin requires.
            "--disable-admission-plugins=ServiceAccount",
        ]
        self._run_apiserver()

    def _run_apiserver(self) -> None:
        apiserver = _Server("kube-apiserver", self._apiserver_argv, self.directory / "kube-apiserver.log")
        self._servers.append(apiserver)
        self._wait_until(
            apiserver, lambda: self.ca_file.exists() and self._http_ok(f"{self.server}/readyz", self.ca_file)
        )

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver, keep etcd (an apiserver outage: clients see connections refused)."""
        apiserver = self._servers.pop()
        if apiserver.name != "kube-apiserver":
            self._servers.append(apiserver)
            raise ClusterStartError("the apiserver is not running")
        apiserver.stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after :meth:`stop_apiserver`, on the same port, with the same
        certificate, tokens and ServiceAccount signing key: every kubeconfig stays valid."""
        if self._servers and self._servers[-1].name == "kube-apiserver":
            raise ClusterStartError("the apiserver is running already")
        self._run_apiserver()

    def _http_ok(self, url: str, ca_file: Path | None) -> bool:
        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file is not None else None
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.admin_token}"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as reply:  # noqa: S310 (http/https only)
                return bool(reply.status == 200)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def _wait_until(self, server: _Server, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self._ready_timeout
        while not ready():
            server.check_running()
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"{server.name} not ready after {self._ready_timeout:.0f} s:\n{server.log_tail()}"
                )
            time.sleep(0.1)

    def exited(self) -> str | None:
        """What went wrong if a server has exited since the start, else ``None``."""
        for server in self._servers:
            try:
                server.check_running()
            except ClusterStartError as exc:
                return str(exc)
        return None

    def stop(self) -> None:
        """Stop the apiserver, then etcd; delete the data directory if it was a temporary one."""
        atexit.unregister(self.stop)
        while self._servers:
            self._servers.pop().stop()
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)
