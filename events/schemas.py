"""JSON Schema of every event type: the contract for producers in other languages.

One file per type, ``<type>.json`` (``tephra.job.submitted.v1.json``),
generated from the pydantic models in validation mode (what a producer may
send) and written deterministically (sorted keys, indent 2, trailing
newline) so the committed files under ``events/schemas/`` diff cleanly.
``tephra schemas`` writes them; ``tephra schemas --check`` and the test suite
fail when a model and its committed schema disagree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from events.models import EVENT_TYPES

__all__ = ["PACKAGED_SCHEMAS", "check_schemas", "render_schemas", "write_schemas"]

#: The committed schemas shipped inside the package.
PACKAGED_SCHEMAS = Path(__file__).with_name("schemas")

_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Files this module owns inside a schema folder (anything else is left alone).
_SCHEMA_FILE = re.compile(r"tephra\..+\.v[0-9]+\.json")


def render_schemas() -> dict[str, str]:
    """File name -> file text for every event type, in catalogue order."""
    rendered: dict[str, str] = {}
    for event_type, model in EVENT_TYPES.items():
        schema = {"$schema": _DIALECT, **model.model_json_schema(mode="validation")}
        text = json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False)
        rendered[f"{event_type}.json"] = text + "\n"
    return rendered


def write_schemas(folder: Path) -> list[Path]:
    """Write every schema into ``folder`` and delete schema files of types that no longer exist.

    Returns the paths written, in catalogue order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    rendered = render_schemas()
    for stale in _schema_files(folder) - rendered.keys():
        (folder / stale).unlink()
    written: list[Path] = []
    for name, text in rendered.items():
        path = folder / name
        path.write_bytes(text.encode())
        written.append(path)
    return written


def check_schemas(folder: Path) -> list[str]:
    """File names in ``folder`` that are stale, missing or extra; empty when up to date."""
    rendered = render_schemas()
    present = _schema_files(folder)
    wrong = set(present - rendered.keys())
    for name, text in rendered.items():
        path = folder / name
        if name not in present or path.read_bytes() != text.encode():
            wrong.add(name)
    return sorted(wrong)


def _schema_files(folder: Path) -> set[str]:
    if not folder.is_dir():
        return set()
    return {path.name for path in folder.iterdir() if path.is_file() and _SCHEMA_FILE.fullmatch(path.name)}
