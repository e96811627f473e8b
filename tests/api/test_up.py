"""``tephra up`` as a user runs it: a real process, real signals, a restart on the same data dir."""

from __future__ import annotations

import json
import os
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

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEPHRA = [sys.executable, "-m", "api.cli"]
MANIFESTS = """\
apiVersion: v1
kind: Node
metadata: {name: gpu-1}
status: {allocatable: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "4", pods: "110"}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: demo-training}
spec:
  minAvailable: 2
  tasks:
    - replicas: 2
      name: worker
      template: {spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}}
"""


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Not pytest's tmp_path: when tests run as root PostgreSQL runs as an unprivileged
    # account, which must be able to enter every folder above its data dir.
    path = Path(tempfile.mkdtemp(prefix="tephra-up-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def environment(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEPHRA_")}
    env.update(
        TEPHRA_DATA_DIR=str(data_dir),
        TEPHRA_SCHEDULE_PERIOD="0.2",
        TEPHRA_SIM_BIND_DELAY="0.1",
        TEPHRA_SIM_EVICT_DELAY="0.1",
        TEPHRA_API_ADDR="127.0.0.1:0",  # any free port: tests run side by side
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return env


def start_up(data_dir: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, "up"],
        env=environment(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    while not (data_dir / STACK_FILE).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"tephra up did not publish {STACK_FILE}: {proc.communicate()[0]}")
        time.sleep(0.1)
    return proc, json.loads((data_dir / STACK_FILE).read_text())


def tephra(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, *args], env=environment(data_dir), capture_output=True, text=True, timeout=60, check=False
    )


def wait_for_phase(data_dir: Path, job: str, phase: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        result = tephra(data_dir, "get", "jobs", "-o", "json")
        if result.returncode == 0:
            items = {j["id"]: j for j in json.loads(result.stdout)["items"]}
            if job in items and items[job]["phase"] == phase:
                return items[job]
        if time.monotonic() > deadline:
            pytest.fail(f"{job} never reached {phase}: {result.stdout} {result.stderr}")
        time.sleep(0.2)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and "pytest" not in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def stop(proc: subprocess.Popen[str], sig: signal.Signals) -> str:
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    return output


def test_up_runs_the_stack_stops_cleanly_on_signals_and_restarts_on_the_same_topics(data_dir: Path) -> None:
    proc, first = start_up(data_dir)
    try:
        assert first["epoch"] == 1
        assert first["topics_prefix"] == "tephra"
        manifest = data_dir / "cluster.yaml"
        manifest.write_text(MANIFESTS)
        submitted = tephra(data_dir, "submit", "-o", "name", str(manifest))
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout.split() == ["node/gpu-1", "queue/default", "job/default/demo-training"]
        wait_for_phase(data_dir, "default/demo-training", "Running")
    finally:
        output = stop(proc, signal.SIGTERM)
    assert "embedded stack up" in output
    assert "tephra: API at http://127.0.0.1:" in output
    assert "tephra: stopped" in output
    assert not (data_dir / STACK_FILE).exists()
    assert processes_mentioning(str(data_dir)) == []
    assert processes_mentioning(str(first["kafka_bootstrap"])) == []
    assert tephra(data_dir, "get", "jobs").returncode == 2  # no stack running: a clear error

    # The broker starts empty, under the same topic names; the projection in PostgreSQL carries on.
    proc, second = start_up(data_dir)
    try:
        assert second["epoch"] == 2
        assert second["topics_prefix"] == "tephra"
        survivor = wait_for_phase(data_dir, "default/demo-training", "Running")
        assert survivor["tasks"]["Running"] == 2
        manifest = data_dir / "more.yaml"
        manifest.write_text(MANIFESTS.split("---\n")[2].replace("demo-training", "second-run"))
        assert tephra(data_dir, "submit", str(manifest)).returncode == 0
        wait_for_phase(data_dir, "default/second-run", "Running")
    finally:
        stop(proc, signal.SIGINT)
    assert processes_mentioning(str(data_dir)) == []


def test_sigterm_while_the_servers_start_still_stops_them(data_dir: Path) -> None:
    proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, "up"],
        env=environment(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # PostgreSQL's initdb takes seconds: wait until it has begun, then terminate mid-start.
    deadline = time.monotonic() + 30
    while not processes_mentioning(str(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode in (0, 128 + signal.SIGTERM), output
    assert processes_mentioning(str(data_dir)) == []
    assert not (data_dir / STACK_FILE).exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop only happens when running as root")
def test_up_with_a_data_dir_postgres_cannot_reach_says_which_folder_and_exits_2(data_dir: Path) -> None:
    private = data_dir / "private"
    private.mkdir(mode=0o700)
    env = environment(private / "stack")
    result = subprocess.run([*TEPHRA, "up"], env=env, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    assert result.returncode == 2, result.stderr
    assert "error: the embedded stack could not start: PostgreSQL runs as 'nobody'" in result.stderr
    assert f"chmod o+x {private}" in result.stderr
    assert "Traceback" not in result.stderr
