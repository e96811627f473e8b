"""The committed JSON Schemas are the models' contract: drift fails the suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from events import models
from events.models import EVENT_TYPES, JobSubmitted
from events.schemas import PACKAGED_SCHEMAS, check_schemas, render_schemas, write_schemas


def test_committed_schemas_match_the_models() -> None:
    stale = check_schemas(PACKAGED_SCHEMAS)

    assert stale == [], f"regenerate with `tephra schemas`: {stale}"


def test_one_schema_file_per_event_type() -> None:
    names = sorted(path.name for path in PACKAGED_SCHEMAS.glob("*.json"))

    assert names == sorted(f"{event_type}.json" for event_type in EVENT_TYPES)


@pytest.mark.parametrize("event_type", list(EVENT_TYPES))
def test_schema_pins_the_type_and_forbids_extra_fields(event_type: str) -> None:
    schema = json.loads((PACKAGED_SCHEMAS / f"{event_type}.json").read_text(encoding="utf-8"))

    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["type"]["const"] == event_type
    assert "default" not in schema["properties"]["type"]  # a record must say its type (missing-type)
    assert schema["additionalProperties"] is False
    assert {"id", "source", "time", "data", "type"} <= set(schema["required"])


def test_output_is_deterministic_sorted_and_newline_terminated(tmp_path: Path) -> None:
    first = [path.read_bytes() for path in write_schemas(tmp_path / "a")]
    second = [path.read_bytes() for path in write_schemas(tmp_path / "b")]

    assert first == second
    for text in first:
        assert text.endswith(b"}\n")
        assert (
            text
            == (json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        )


def test_check_names_stale_missing_and_extra_files(tmp_path: Path) -> None:
    write_schemas(tmp_path)
    (tmp_path / "tephra.job.submitted.v1.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "tephra.node.removed.v1.json").unlink()
    (tmp_path / "tephra.job.exploded.v1.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("not a schema\n", encoding="utf-8")

    assert check_schemas(tmp_path) == [
        "tephra.job.exploded.v1.json",
        "tephra.job.submitted.v1.json",
        "tephra.node.removed.v1.json",
    ]


def test_write_repairs_the_folder_and_leaves_other_files(tmp_path: Path) -> None:
    (tmp_path / "tephra.job.exploded.v1.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "README.md").write_text("not a schema\n", encoding="utf-8")

    write_schemas(tmp_path)

    assert check_schemas(tmp_path) == []
    assert not (tmp_path / "tephra.job.exploded.v1.json").exists()
    assert (tmp_path / "README.md").exists()


def test_a_missing_folder_is_all_missing(tmp_path: Path) -> None:
    assert check_schemas(tmp_path / "nowhere") == sorted(render_schemas())


def test_changing_a_model_without_regenerating_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    class ChangedJobSubmitted(JobSubmitted):
        deadline: str | None = Field(default=None, description="a field someone added to v1")

    monkeypatch.setitem(models.EVENT_TYPES, "tephra.job.submitted.v1", ChangedJobSubmitted)

    assert check_schemas(PACKAGED_SCHEMAS) == ["tephra.job.submitted.v1.json"]
