"""``replay explain|verify|audit`` on the archive of a stopped embedded stack, as a user runs them.

``tephra up`` runs, schedules, and stops; then each ``replay`` command, its own process with no
database configured, starts only the stack's PostgreSQL (read-only), answers, and stops it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.endpoints import STACK_FILE
from tests.api.test_up import (
    MANIFESTS,
    environment,
    processes_mentioning,
    start_up,
    stop,
    tephra,
    wait_for_phase,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Enterable by the unprivileged account PostgreSQL runs as when the tests run as root.
    path = Path(tempfile.mkdtemp(prefix="tephra-replay-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


#: The installed ``replay`` console script (pyproject's entry point).
REPLAY = [sys.executable, "-m", "api.replay_command"]
#: A gang of two 4-GPU workers: the demo node has 4 GPUs, so it stays pending.
TOO_BIG = (
    MANIFESTS.split("---\n")[2]
    .replace("demo-training", "too-big")
    .replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 4")
)


def replay(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = environment(data_dir)
    env.pop("TEPHRA_DATABASE_URL", None)
    return subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [*REPLAY, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _wait_for_reason(data_dir: Path, job: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        result = tephra(data_dir, "get", "jobs", "-o", "json")
        if result.returncode == 0:
            items = {j["id"]: j for j in json.loads(result.stdout)["items"]}
            if items.get(job, {}).get("pendingReasons"):
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{job} was never considered: {result.stdout} {result.stderr}")
        time.sleep(0.2)


def test_replay_reads_a_stopped_stack_by_starting_only_its_postgres(data_dir: Path) -> None:
    proc, record = start_up(data_dir)
    try:
        manifest = data_dir / "cluster.yaml"
        manifest.write_text(MANIFESTS + "---\n" + TOO_BIG)
        submitted = tephra(data_dir, "submit", str(manifest))
        assert submitted.returncode == 0, submitted.stderr
        wait_for_phase(data_dir, "default/demo-training", "Running")
        _wait_for_reason(data_dir, "default/too-big")
    finally:
        stop(proc, signal.SIGTERM)
    assert not (data_dir / STACK_FILE).exists()
    assert processes_mentioning(str(data_dir)) == []

    explained = replay(data_dir, "explain", "too-big", "-o", "json")
    assert explained.returncode == 0, explained.stderr
    assert "starting only its PostgreSQL" in explained.stderr
    answer = json.loads(explained.stdout)
    assert answer["job"] == "default/too-big"
    assert answer["blockers"], answer
    assert answer["counterfactual"]["found"], answer["counterfactual"]
    # Only PostgreSQL was started, and it is stopped again: nothing runs from the data dir.
    assert processes_mentioning(str(data_dir)) == []
    assert not (data_dir / "postgres" / "postmaster.pid").exists()

    verified = replay(data_dir, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("chain: OK"), verified.stdout
    assert "\nOK: hash chain of" in verified.stdout
    audited = replay(data_dir, "audit", "preemptions", "-o", "json")
    assert audited.returncode == 0, audited.stderr
    assert json.loads(audited.stdout) == {"items": []}
    assert processes_mentioning(str(data_dir)) == []
    assert processes_mentioning(str(record["database_url"]).rsplit("/", 1)[0]) == []


def test_without_a_stack_on_disk_replay_says_there_is_no_archive(data_dir: Path) -> None:
    shown = replay(data_dir, "verify")
    assert shown.returncode == 2
    assert "[REPLAY-NO-ARCHIVE]" in shown.stderr
