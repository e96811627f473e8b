"""Which archive to read: ``TEPHRA_DATABASE_URL``, else the embedded stack's ``stack.json``.

Replay does not import ``api`` (design §2), so it reads the same two sources
``tephra`` does by itself: the environment variable, or the record that
``tephra up`` writes under ``TEPHRA_DATA_DIR`` (default: the user's state
directory, :func:`default_data_dir`).  ``api.settings`` takes its default from
here, so both find the same stack from any folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from replay.errors import ArchiveUnavailable

__all__ = [
    "DATABASE_ENV",
    "DATA_DIR_ENV",
    "DEFAULT_DATA_DIR_TEXT",
    "STACK_FILE",
    "database_url",
    "default_data_dir",
]

DATABASE_ENV = "TEPHRA_DATABASE_URL"
DATA_DIR_ENV = "TEPHRA_DATA_DIR"
STACK_FILE = "stack.json"
#: How :func:`default_data_dir` reads, for help texts and docs/configuration.md (no user's home in them).
DEFAULT_DATA_DIR_TEXT = "$XDG_STATE_HOME/tephra, else ~/.local/state/tephra"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    """The user's state directory for Tephra (the XDG base-directory rule), whatever the current folder."""
    state_home = environ.get("XDG_STATE_HOME", "")
    # The XDG rule: a relative XDG_STATE_HOME is invalid and ignored.
    base = Path(state_home) if Path(state_home).is_absolute() else Path.home() / ".local" / "state"
    return base / "tephra"


def database_url(environ: Mapping[str, str], *, explicit: str | None = None) -> str:
    """The archive's PostgreSQL URL: ``explicit``, then the environment, then ``stack.json``.

    Raises:
        ArchiveUnavailable: none of them names a database.
    """
    if explicit:
        return explicit
    url = environ.get(DATABASE_ENV)
    if url:
        return url
    data_dir = Path(environ.get(DATA_DIR_ENV) or default_data_dir(environ)).absolute()
    path = data_dir / STACK_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        stopped = (
            f"; the embedded stack in {data_dir} is stopped: the installed `replay` script reads it "
            "by starting only its PostgreSQL"
            if (data_dir / "postgres" / "PG_VERSION").is_file()
            else ""
        )
        raise ArchiveUnavailable(
            f"no archive to read: set {DATABASE_ENV}, or start the embedded stack with `tephra up` "
            f"(looked for {path}; set {DATA_DIR_ENV} if it runs elsewhere{stopped})"
        ) from None
    except (OSError, ValueError) as exc:
        raise ArchiveUnavailable(f"cannot read {path}: {exc}") from None
    url = record.get("database_url") if isinstance(record, dict) else None
    if not isinstance(url, str) or not url:
        raise ArchiveUnavailable(f"{path} names no database_url")
    return url
