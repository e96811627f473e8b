"""No command prints a password: the documented commands, run as processes, with one in every URL.

A malformed URL is refused at the door with a message that quotes it
redacted; a well-formed one whose server does not answer fails (or retries)
with messages that never hold the password either.  Both stdout and stderr
are checked, logs and tracebacks included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.settings import TephraSettings

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Sup3r-s3cret"  # noqa: S105 - the password the test hunts for in the output
TEPHRA = [sys.executable, "-m", "api.cli"]
REPLAY = [sys.executable, "-m", "replay.cli"]

MALFORMED_DATABASE_URLS = [
    f"postgresql://tephra:{SECRET}/x@db:5432/tephra",  # an unescaped '/' in the password
    f"postgresql://tephra:{SECRET}#x@db:5432/tephra",  # an unescaped '#'
    f"postgresql://tephra:{SECRET}@db:notaport/tephra",
    f"mysql://tephra:{SECRET}@db/tephra",
]
GOOD_BOOTSTRAP = "127.0.0.1:1"
#: Well formed, nobody listening.
UNREACHABLE_DATABASE_URL = f"postgresql://tephra:{SECRET}@127.0.0.1:1/tephra"


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPHRA_")}
    env.update(PYTHONPATH=str(ROOT), **settings)
    return env


def _run(command: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        command, env=env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path
    )


def _assert_no_secret(result: subprocess.CompletedProcess[str]) -> None:
    assert SECRET not in result.stdout, result.stdout
    assert SECRET not in result.stderr, result.stderr


@pytest.mark.parametrize("url", MALFORMED_DATABASE_URLS)
@pytest.mark.parametrize(
    "command",
    [["get", "jobs"], ["submit", "job.yaml"], ["projector"], ["scheduler"], ["sim-cluster"], ["up"], ["api"]],
    ids=" ".join,
)
def test_a_malformed_database_url_is_refused_quoted_without_its_password(
    command: list[str], url: str, tmp_path: Path
) -> None:
    (tmp_path / "job.yaml").write_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
    result = _run(
        [*TEPHRA, *command], _env(TEPHRA_KAFKA_BOOTSTRAP=GOOD_BOOTSTRAP, TEPHRA_DATABASE_URL=url), tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert "TEPHRA_DATABASE_URL" in result.stderr
    assert "***" in result.stderr  # quoted, redacted
    _assert_no_secret(result)


def test_a_flag_and_kafka_credentials_are_quoted_without_the_password_too(tmp_path: Path) -> None:
    result = _run(
        [*TEPHRA, "get", "jobs", "--database-url", MALFORMED_DATABASE_URLS[0]],
        _env(TEPHRA_KAFKA_BOOTSTRAP=f"admin:{SECRET}@kafka:9092"),
        tmp_path,
    )
    assert result.returncode == 2
    assert "--database-url" in result.stderr
    assert "TEPHRA_KAFKA_BOOTSTRAP: Value error, expected host:port[,host:port] without credentials" in (
        result.stderr
    )
    _assert_no_secret(result)


@pytest.mark.parametrize("url", MALFORMED_DATABASE_URLS[:3])
def test_replay_refuses_a_malformed_archive_url_without_quoting_its_password(
    url: str, tmp_path: Path
) -> None:
    for command, env in (
        ([*REPLAY, "verify"], _env(TEPHRA_DATABASE_URL=url)),
        ([*REPLAY, "verify", "--database-url", url], _env()),
    ):
        result = _run(command, env, tmp_path)
        assert result.returncode == 2, result.stderr
        assert "malformed" in result.stderr
        _assert_no_secret(result)


def test_an_unreachable_database_is_reported_without_the_password(tmp_path: Path) -> None:
    env = _env(TEPHRA_KAFKA_BOOTSTRAP=GOOD_BOOTSTRAP, TEPHRA_DATABASE_URL=UNREACHABLE_DATABASE_URL)
    got = _run([*TEPHRA, "get", "jobs"], env, tmp_path)
    assert got.returncode == 2
    assert "cannot reach the projection database" in got.stderr
    _assert_no_secret(got)
    verify = _run([*REPLAY, "verify"], env, tmp_path)
    assert verify.returncode == 2
    assert "cannot connect to the archive database" in verify.stderr
    _assert_no_secret(verify)


@pytest.mark.parametrize("command", ["projector", "scheduler"])
def test_a_service_retrying_an_unreachable_database_logs_without_the_password(
    command: str, tmp_path: Path
) -> None:
    env = _env(
        TEPHRA_KAFKA_BOOTSTRAP=GOOD_BOOTSTRAP,
        TEPHRA_DATABASE_URL=UNREACHABLE_DATABASE_URL,
        TEPHRA_LOG_LEVEL="DEBUG",
    )
    proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, command], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        # Until it has said, at least twice, that it retries (the projector: "reconnecting").
        lines: list[str] = []
        assert proc.stderr is not None
        while sum("retrying" in line or "reconnecting" in line for line in lines) < 2:
            line = proc.stderr.readline()
            assert line, "".join(lines)
            lines.append(line)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    _assert_no_secret(subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines) + err))


def test_pydantics_own_validation_message_holds_no_password() -> None:
    with pytest.raises(ValidationError) as caught:
        TephraSettings(kafka_bootstrap=GOOD_BOOTSTRAP, database_url=MALFORMED_DATABASE_URLS[0])
    assert SECRET not in str(caught.value)
    assert SECRET not in repr(caught.value)
