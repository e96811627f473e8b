"""List + watch of one resource, kept as a dict of its objects (what client-go calls an informer).

The watch resumes from the last ``resourceVersion`` seen (bookmarks move it on
too); when the apiserver answers ``410 Gone`` (the version fell out of its
window) or the connection breaks, the resource is listed again and the cache
replaced, objects missing from the new list counting as deleted.  Every
change sets :attr:`Informer.changed` and records the key in :attr:`dirty`, so a
reconciler reads what moved, never the stream itself: a relist emits nothing
twice, as the reconciler compares levels, not events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final

import aiohttp

from kube.rest import JsonObject, KubeApiError, KubeClient, json_str

__all__ = ["Informer", "object_key"]

log = logging.getLogger(__name__)

_RETRY_AFTER: Final = (0.2, 0.5, 1.0, 2.0, 5.0)


def object_key(obj: JsonObject) -> str:
    """``namespace/name`` (``name`` for cluster-scoped objects)."""
    name = json_str(obj, "metadata", "name") or ""
    namespace = json_str(obj, "metadata", "namespace")
    return f"{namespace}/{name}" if namespace else name


class Informer:
    """The objects of one list path, kept up to date by :meth:`run`."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        api_version: str,
        kind: str,
        changed: asyncio.Event,
        query: Mapping[str, str] | None = None,
        on_change: Callable[[str, JsonObject | None, JsonObject | None], None] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.query = dict(query or {})
        self.api_version = api_version
        self.kind = kind
        self.objects: dict[str, JsonObject] = {}
        self.dirty: set[str] = set()
        self.changed = changed
        self.synced = asyncio.Event()
        self.relists = 0
        self._on_change = on_change

    def _put(self, obj: JsonObject) -> None:
        obj = {**obj, "apiVersion": self.api_version, "kind": self.kind}
        key = object_key(obj)
        old = self.objects.get(key)
        self.objects[key] = obj
        self._touch(key, old, obj)

    def _drop(self, key: str) -> None:
        old = self.objects.pop(key, None)
        if old is not None:
            self._touch(key, old, None)

    def _touch(self, key: str, old: JsonObject | None, new: JsonObject | None) -> None:
        self.dirty.add(key)
        if self._on_change is not None:
            self._on_change(key, old, new)
        self.changed.set()

    async def run(self) -> None:
        """List, then watch for ever (:meth:`KubeClient.list_and_watch`: a relist after ``410 Gone``);
        after a failure, wait and list again."""
        failures = 0
        while True:
            listing: set[str] = set()
            try:
                async for event in self.client.list_and_watch(self.path, self.query):
                    if event.type == "SYNCED":
                        # A complete listing: what it did not hold was deleted while we were away.
                        for key in sorted(self.objects.keys() - listing):
                            self._drop(key)
                        listing = set()
                        self.relists += 1
                        self.synced.set()
                        failures = 0
                    elif event.type in ("ADDED", "MODIFIED"):
                        self._put(event.object)
                        listing.add(object_key(event.object))
                    elif event.type == "DELETED":
                        self._drop(object_key(event.object))
            except (KubeApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                failures = await _back_off(self.kind, exc, failures)


async def _back_off(kind: str, exc: BaseException, failures: int) -> int:
    delay = _RETRY_AFTER[min(failures, len(_RETRY_AFTER) - 1)]
    log.warning("%s list/watch: %s; retrying in %.1fs", kind, exc, delay)
    await asyncio.sleep(delay)
    return failures + 1
