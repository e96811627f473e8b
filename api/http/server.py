"""uvicorn serving the API: ``tephra api`` runs it alone, ``tephra up`` beside the other services."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterator

import uvicorn

from api.access import ServiceAccess
from api.endpoints import Endpoints
from api.http.app import create_app, writes_refused_notice
from api.http.context import open_context
from api.http.settings import ApiSettings, split_addr
from api.settings import TephraSettings
from events.signing import EventSigner

__all__ = ["api_command", "api_url", "bind", "serve_api"]

log = logging.getLogger(__name__)


def api_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind(settings: ApiSettings) -> socket.socket:
    """The listening socket of ``TEPHRA_API_ADDR`` (port 0: any free port; :func:`api_url` tells which)."""
    host, port = split_addr(settings.api_addr)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and
    # without it every answer (headers, then body) waited ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno,
            f"cannot listen on TEPHRA_API_ADDR={settings.api_addr}: {exc.strerror};"
            " set it (or --api-addr) to a free host:port, port 0 for any",
        ) from None
    sock.setblocking(False)
    return sock


class _Server(uvicorn.Server):
    """uvicorn, minus its signal handlers (the process's own stop us), telling when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


async def serve_api(
    settings: ApiSettings,
    endpoints: Endpoints,
    *,
    sock: socket.socket | None = None,
    on_ready: Callable[[str], None] | None = None,
    access: ServiceAccess | None = None,
    signer: EventSigner | None = None,
) -> None:
    """Open the pool and the producer, then serve until cancelled; ``on_ready`` gets the URL.

    ``access``: the API's own credentials and transport (default: the endpoints' common ones);
    ``signer``: what the API produces is signed as ``<its principal>:<token subject>``.
    """
    sock = sock or bind(settings)
    try:
        async with open_context(settings, endpoints, access, signer) as ctx:
            if ctx.authenticating():
                jwks = settings.api_jwks_file
                log.info(
                    "API tokens from %s%s",
                    settings.api_tokens_file,
                    f", JWTs by the keys of {jwks}" * bool(jwks),
                )
            else:
                log.warning("%s", writes_refused_notice())
            config = uvicorn.Config(
                create_app(settings, ctx),
                log_config=None,  # the process's logging, as every service
                access_log=False,
                server_header=False,
                lifespan="off",
            )
            server = _Server(config)
            task = asyncio.create_task(server.serve(sockets=[sock]), name="api")
            try:
                listening = asyncio.create_task(server.listening.wait())
                await asyncio.wait({task, listening}, return_when=asyncio.FIRST_COMPLETED)
                listening.cancel()
                if task.done():
                    await task
                    raise RuntimeError("the API server stopped before it listened")
                if on_ready is not None:
                    on_ready(api_url(sock))
                await asyncio.shield(task)
            finally:
                server.should_exit = True
                await asyncio.wait({task})
    finally:
        sock.close()


def api_command(settings: TephraSettings, endpoints: Endpoints, signer: EventSigner | None = None) -> int:
    """``tephra api``: serve until SIGINT or SIGTERM; the exit code."""
    from api.access import service_access  # noqa: PLC0415
    from api.stack import run_until_signalled  # noqa: PLC0415 - the command's runner, shared with the others

    def announce(url: str) -> None:
        print(f"tephra: API at {url}", flush=True)

    access = service_access(settings, endpoints, settings.api_credentials())
    return run_until_signalled(
        lambda: serve_api(settings, endpoints, on_ready=announce, access=access, signer=signer)
    )
