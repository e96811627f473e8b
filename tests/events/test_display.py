"""events.display: passwords redacted from any text, control characters shown as escapes."""

from __future__ import annotations

import pytest

from events.display import printable, redact

SECRET = "s3cr3t-Pw"  # noqa: S105 - the password the test hunts for


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"postgresql://tephra:{SECRET}@db:5432/tephra", "postgresql://tephra:***@db:5432/tephra"),
        # Unescaped '@', '/' and '#' in the password: everything up to the last '@' is hidden.
        (f"postgresql://u:{SECRET}@x/y#z@db:5432/t", "postgresql://u:***@db:5432/t"),
        (f"got 'postgres://u:{SECRET}@db:notaport/t' here", "got 'postgres://u:***@db:notaport/t' here"),
        (f"u:{SECRET}@kafka:9092,k2:9092", "u:***@kafka:9092,k2:9092"),
        (f"postgresql://db/t?user=u&password={SECRET}&x=1", "postgresql://db/t?user=u&password=***&x=1"),
        (f"host=db password={SECRET}", "host=db password=***"),
        (f"postgres:/u:{SECRET}@db/t", "postgres:***@db/t"),  # a malformed scheme
    ],
)
def test_redact_hides_the_password_of_every_shape_of_url(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert SECRET not in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://postgres@127.0.0.1:5432/postgres",  # the embedded stack's: no secret, shown as is
        "kafka:9092,kafka-2:9092",
        "error: job ns/a@b is pending; 3/4 at 12:30:01",
        "",
    ],
)
def test_redact_leaves_text_without_a_password_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("ev\x1b[31mil", "ev\\x1b[31mil"),
        ("two\nlines\r\n", "two\\nlines\\r\\n"),
        ("tab\tbell\x07del\x7f", "tab\\tbell\\x07del\\x7f"),
        ("c1 csi \x9b2J", "c1 csi \\x9b2J"),
        ("rtl \u202eexe.txt zw\u200bsp \u2028", "rtl \\u202eexe.txt zw\\u200bsp \\u2028"),
        ("plain-name, ünïcödé 日本 ok", "plain-name, ünïcödé 日本 ok"),
        (42, "42"),
    ],
)
def test_printable_escapes_control_and_invisible_characters_only(value: object, shown: str) -> None:
    assert printable(value) == shown
    assert printable(value).isprintable()
