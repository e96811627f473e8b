"""A typed JSON client for the Kubernetes API on kubernetes-asyncio's transport.

kubernetes-asyncio has no type information, and its generated models have
quirks against a 1.20 apiserver (a binding's ``Status`` reply fails to
deserialise).  Tephra therefore uses only its configuration loading
(kubeconfig, in-cluster service account: server, TLS files, the bearer token
and its refresh) and sends plain JSON over an aiohttp session of its own:
requests are mappings, replies are :data:`JsonObject`, read with the accessors
below (orjson reads and writes them: a watch line of a pod is a few KiB).
Every non-2xx reply raises :class:`KubeApiError` with the apiserver's status,
reason and message.

The session does not read the environment per request (aiohttp's
``trust_env``, which kubernetes-asyncio's client sets, looks up ``.netrc`` and
the proxy variables in a worker thread for every call: a fifth of the bridge's
CPU when it binds pods): the proxy, from the kubeconfig or the environment, is
resolved once at :meth:`KubeClient.connect`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TypeAlias

import aiohttp
import orjson
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

__all__ = [
    "JsonObject",
    "JsonValue",
    "KubeApiError",
    "KubeClient",
    "WatchEvent",
    "json_int",
    "json_list",
    "json_object",
    "json_str",
    "resource_path",
]

JsonValue: TypeAlias = str | int | float | bool | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
#: A watch cut short (the connection broke, was refused, or a line came truncated): resumed.
_INTERRUPTED = (aiohttp.ClientError, OSError, TimeoutError, json.JSONDecodeError)
_RESUME_AFTER = (0.2, 0.5, 1.0, 2.0, 5.0)
JSON = "application/json"
#: Simultaneous connections to the apiserver (kubernetes-asyncio's default): watches hold one each.
MAX_CONNECTIONS: Final = 100
#: A watch event carrying a large object can exceed aiohttp's default read buffer (etcd's limit is 1.5 MiB).
READ_BUFFER: Final = 2**21


class KubeApiError(Exception):
    """A non-2xx reply: ``status`` (HTTP), ``reason`` (``AlreadyExists``, ``NotFound``, ...), message."""

    def __init__(self, method: str, path: str, status: int, reason: str, message: str) -> None:
        super().__init__(f"{method} {path}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class WatchEvent:
    """One line of a watch: ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` or ``ERROR``."""

    type: str
    object: JsonObject


def resource_path(
    group_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/api/v1/...`` for the core group (``v1``), ``/apis/<group>/<version>/...`` otherwise."""
    parts = ["/api/v1" if group_version == "v1" else f"/apis/{group_version}"]
    if namespace is not None:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name is not None:
        parts.append(name)
        if subresource is not None:
            parts.append(subresource)
    return "/".join(parts)


def json_object(value: JsonValue | JsonObject, *keys: str) -> JsonObject:
    """The object at ``keys`` below ``value``; ``{}`` where a key is absent or not an object."""
    current: JsonValue = value
    for key in keys:
        current = current.get(key) if isinstance(current, dict) else None
    return current if isinstance(current, dict) else {}


def json_str(value: JsonObject, *keys: str) -> str | None:
    """The string at ``keys`` (``None`` where absent or not a string)."""
    leaf = json_object(value, *keys[:-1]).get(keys[-1])
    return leaf if isinstance(leaf, str) else None


def json_int(value: JsonObject, *keys: str) -> int | None:
    leaf = json_object(value, *keys[:-1]).get(keys[-1])
    return leaf if isinstance(leaf, int) and not isinstance(leaf, bool) else None


def json_list(value: JsonObject, *keys: str) -> list[JsonValue]:
    leaf = json_object(value, *keys[:-1]).get(keys[-1])
    return leaf if isinstance(leaf, list) else []


def _as_object(data: object) -> JsonObject:
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object from the apiserver, got {type(data).__name__}")
    return data


class KubeClient:
    """One connection pool to one apiserver; ``async with`` closes it."""

    def __init__(self, configuration: k8s_client.Configuration) -> None:
        self._configuration = configuration
        self._server = str(configuration.host).rstrip("/")
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._server_hostname: str | None = configuration.tls_server_name or None
        self._proxy = configuration.proxy or _environment_proxy(self._server)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=context),
            trust_env=False,
            read_bufsize=READ_BUFFER,
        )

    @classmethod
    async def connect(cls, kubeconfig: Path | None) -> Self:
        """From a kubeconfig file, or the pod's service account (in-cluster) when ``None``."""
        configuration = k8s_client.Configuration()
        if kubeconfig is None:
            # The one unannotated function of kubernetes-asyncio used here.
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await k8s_config.load_kube_config(
                config_file=str(kubeconfig), client_configuration=configuration, persist_config=False
            )
        return cls(configuration)

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, object] | None = None,
        content_type: str = JSON,
        streaming: bool = False,
    ) -> aiohttp.ClientResponse:
        headers = {"Content-Type": content_type, "Accept": JSON}
        # Asked per call: the configuration refreshes a token that expires (in-cluster, exec plugins).
        bearer = (await self._configuration.auth_settings()).get("BearerToken")
        if bearer is not None and bearer["value"]:
            headers["Authorization"] = str(bearer["value"])
        response = await self._session.request(
            method,
            self._server + path,
            params=list((query or {}).items()),
            data=orjson.dumps(dict(body)) if body is not None else None,
            headers=headers,
            proxy=self._proxy,
            server_hostname=self._server_hostname,
            # A watch stays open as long as the server keeps it (its timeoutSeconds); a call gets 60 s.
            timeout=aiohttp.ClientTimeout(total=None if streaming else 60),
        )
        if not 200 <= response.status <= 299:
            text = await response.text()
            response.release()
            reason, message = response.reason or "", text
            try:
                status = _as_object(orjson.loads(text))
            except (ValueError, TypeError):
                pass
            else:
                reason = json_str(status, "reason") or reason
                message = json_str(status, "message") or message
            raise KubeApiError(method, path, response.status, reason, message)
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, object] | None = None,
        content_type: str = JSON,
    ) -> JsonObject:
        """One call; the reply's JSON object."""
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            return _as_object(orjson.loads(await response.read()))
        finally:
            response.release()

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> JsonObject:
        return await self.request("GET", path, query=query)

    async def create(self, path: str, body: Mapping[str, object]) -> JsonObject:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, body: Mapping[str, object]) -> JsonObject:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def delete(self, path: str, body: Mapping[str, object] | None = None) -> JsonObject:
        return await self.request("DELETE", path, body=body)

    async def watch(
        self, path: str, *, resource_version: str, query: Mapping[str, str] | None = None
    ) -> AsyncIterator[WatchEvent]:
        """The events of ``path`` after ``resource_version``, until the server ends the stream.

        A ``410 Gone`` arrives as an ``ERROR`` event whose object is a ``Status``: the caller
        lists again.
        """
        params = {**(query or {}), "watch": "1", "resourceVersion": resource_version}
        params.setdefault("allowWatchBookmarks", "true")
        response = await self._send("GET", path, query=params, streaming=True)
        try:
            while line := await response.content.readline():
                event = _as_object(orjson.loads(line))
                kind = json_str(event, "type") or ""
                yield WatchEvent(kind, json_object(event, "object"))
        finally:
            response.release()

    async def list_and_watch(
        self, path: str, query: Mapping[str, str] | None = None
    ) -> AsyncIterator[WatchEvent]:
        """Every object of ``path`` as ``ADDED``, then its changes, for ever.

        A watch the server ends, or whose connection breaks or is refused (an apiserver
        restarting), resumes from the last version seen, after a pause that grows while it keeps
        failing; after a ``410 Gone`` (that version is out of the server's window) or any watch
        error the objects are listed again (as ``ADDED``, the ones deleted meanwhile as
        ``DELETED``): handlers must be idempotent.  A listing that fails raises.
        ``SYNCED`` (with an empty object) follows each complete listing.
        """
        known: dict[str, JsonObject] = {}
        while True:
            listing = await self.get(path, query)
            version = json_str(listing, "metadata", "resourceVersion") or "0"
            listed: dict[str, JsonObject] = {}
            for item in json_list(listing, "items"):
                if isinstance(item, dict):
                    listed[_object_key(item)] = item
            for key, vanished in known.items():
                if key not in listed:
                    yield WatchEvent("DELETED", vanished)
            known = listed
            for item in listed.values():
                yield WatchEvent("ADDED", item)
            yield WatchEvent("SYNCED", {})
            async for event in self._watch_from(path, query, version, known):
                yield event

    async def _watch_from(
        self, path: str, query: Mapping[str, str] | None, version: str, known: dict[str, JsonObject]
    ) -> AsyncIterator[WatchEvent]:
        """The watch of :meth:`list_and_watch` after a listing at ``version``, ``known`` kept up to
        date; it ends when the objects must be listed again."""
        failures = 0
        while True:  # a watch that ended or broke resumes where it was
            try:
                async for event in self.watch(path, resource_version=version, query=query):
                    failures = 0
                    if event.type == "ERROR":  # 410 Gone (too old a version) or another error
                        log.info("watch %s: %s; listing again", path, json_str(event.object, "message"))
                        return
                    version = json_str(event.object, "metadata", "resourceVersion") or version
                    if event.type == "BOOKMARK":
                        continue
                    key = _object_key(event.object)
                    if event.type == "DELETED":
                        known.pop(key, None)
                    else:
                        known[key] = event.object
                    yield event
            except _INTERRUPTED as exc:
                delay = _RESUME_AFTER[min(failures, len(_RESUME_AFTER) - 1)]
                failures += 1
                log.warning("watch %s: %s; resuming from version %s in %.1fs", path, exc, version, delay)
                await asyncio.sleep(delay)


def _environment_proxy(server: str) -> str | None:
    """The proxy the environment names for ``server`` (``HTTPS_PROXY``, ``NO_PROXY``), looked up once."""
    scheme, _, rest = server.partition("://")
    host = rest.split("/", 1)[0].rsplit(":", 1)[0]
    proxies = urllib.request.getproxies()
    if scheme not in proxies or urllib.request.proxy_bypass(host):
        return None
    return proxies[scheme]


def _object_key(item: JsonObject) -> str:
    return f"{json_str(item, 'metadata', 'namespace') or ''}/{json_str(item, 'metadata', 'name') or ''}"
