"""Whose key signs what a process produces, and the embedded stack's own keyring.

* The scheduler signs its LeaderElected, sessions and default queue with
  ``TEPHRA_SCHEDULER_KEY_FILE`` (default ``<data dir>/keys/scheduler.pem``) as
  ``TEPHRA_SCHEDULER_PRINCIPAL``.
* ``tephra submit`` / ``cancel`` / ``delete`` and the HTTP API sign their
  intents with ``TEPHRA_PRODUCER_KEY_FILE`` (default ``<data dir>/keys/<name>.pem``)
  as ``NAME:SUBJECT``: NAME is ``TEPHRA_PRODUCER_NAME`` (default ``cli`` for the
  commands, ``api`` for the API), SUBJECT the local user or the token's subject,
  so the archive and ``replay audit`` say who asked.
* The embedded stack (development) creates those keys, puts them in the
  keyring (:func:`enrol_development_keys`), and takes unsigned intents and
  observations unless told otherwise (:func:`development_defaults`).

A deployment's operator creates keys with ``tephra key create PATH`` and adds
them with ``tephra producer add`` (docs/producers.md, "Signing").
"""

from __future__ import annotations

import getpass
import logging
from pathlib import Path
from typing import Final

from api.settings import CommonSettings, TephraSettings
from events.models import HyperNodeDeleted, HyperNodeUpserted, NodeRemoved, NodeReported
from events.signing import EventSigner, load_or_create_signing_key, load_signing_key
from projector.connections import DatabaseAccess, connect
from projector.fold import EVENT_ROLES
from projector.keyring import add_producer
from projector.state import INTENTS
from projector.trust import KeyringEntry
from scheduler.service.leader import LEADER_TYPES
from scheduler.service.settings import SchedulerSettings

__all__ = [
    "API_PRODUCER",
    "CLI_PRODUCER",
    "MANIFEST_TYPES",
    "development_defaults",
    "enrol_development_keys",
    "key_file",
    "local_user",
    "producer_signer",
    "scheduler_signer",
]

log = logging.getLogger(__name__)

#: The default keyring names of the commands and of the HTTP API.
CLI_PRODUCER: Final = "cli"
API_PRODUCER: Final = "api"
#: The types manifests produce (api.manifests): the intents topic's, a ``v1 Node``'s report and
#: a HyperNode's; what the embedded stack's cli and api may.
MANIFEST_TYPES: Final = frozenset(
    model.model_fields["type"].default for model, role in EVENT_ROLES.items() if role == INTENTS
) | {
    model.model_fields["type"].default
    for model in (NodeReported, NodeRemoved, HyperNodeUpserted, HyperNodeDeleted)
}


def key_file(settings: CommonSettings, name: str) -> Path:
    """``<data dir>/keys/<name>.pem``: where a key is kept unless a setting names another file."""
    return settings.data_dir / "keys" / f"{name}.pem"


def local_user() -> str:
    """Who runs this command (the SUBJECT of its principal)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "unknown"


def producer_signer(settings: CommonSettings, default_name: str) -> EventSigner | None:
    """The signer of a command's or the API's intents (principal NAME: callers vouch for a
    subject with :meth:`EventSigner.on_behalf_of`); None when no key is configured or found.

    A key file named by ``TEPHRA_PRODUCER_KEY_FILE`` must load (SigningKeyError says why
    not); the default file is used when it exists (the embedded stack creates it), else the
    events go unsigned and the projector decides (a deployment rejects them: ``unsigned``).
    """
    name = settings.producer_name or default_name
    path = settings.producer_key_file
    if path is None:
        path = key_file(settings, name)
        if not path.exists():
            log.debug("no key at %s: producing unsigned", path)
            return None
    return EventSigner(load_signing_key(path), name)


def scheduler_signer(common: CommonSettings, settings: SchedulerSettings) -> EventSigner:
    """The scheduler's signer: its key file, created (mode 0600) on first use.  Until the keyring
    holds its public key (``TEPHRA_SCHEDULER_ENROL``, or an operator's ``tephra producer add``)
    its LeaderElected is refused and the scheduler says so, with the command to run."""
    path = settings.scheduler_key_file or key_file(common, settings.scheduler_principal)
    existed = path.exists()
    key = load_or_create_signing_key(path)
    if not existed:
        log.info("created the scheduler's key %s (public key %s)", path, key.public_key)
    return EventSigner(key, settings.scheduler_principal)


async def enrol_development_keys(
    common: CommonSettings, scheduler: SchedulerSettings, database: DatabaseAccess
) -> None:
    """The embedded stack's keyring: the scheduler's, the commands' and the API's keys, created
    when missing, each permitted what it produces."""
    path = scheduler.scheduler_key_file or key_file(common, scheduler.scheduler_principal)
    entries = [
        KeyringEntry(scheduler.scheduler_principal, load_or_create_signing_key(path).public_key, LEADER_TYPES)
    ]
    for name in (CLI_PRODUCER, API_PRODUCER):
        key = load_or_create_signing_key(key_file(common, name))
        entries.append(KeyringEntry(name, key.public_key, MANIFEST_TYPES))
    conn = await connect(database)
    try:
        for entry in entries:
            await add_producer(conn, entry)
    finally:
        await conn.close()


def development_defaults(settings: TephraSettings) -> TephraSettings:
    """``settings`` with the embedded stack's defaults: unsigned intents and observations taken
    unless ``TEPHRA_ALLOW_UNSIGNED_*`` say otherwise (a deployment's default is to refuse them)."""
    if not settings.embedded:
        return settings
    update = {
        name: True
        for name in ("allow_unsigned_intents", "allow_unsigned_observations")
        if getattr(settings, name) is None
    }
    return settings.model_copy(update=update) if update else settings
