"""The ``replay`` console script end to end, under two PYTHONHASHSEEDs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.golden.archive import load_golden
from tests.replay.helpers import SEEDS, run_replay

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("name", ["gpu_cluster", "split_sessions", "divergent"])
async def test_verify_golden_archives_under_two_hash_seeds(database_url: str, name: str) -> None:
    golden = await load_golden(database_url, name)
    expected = golden.expect["verify"]
    outputs = []
    for seed in SEEDS:
        done = run_replay(database_url, "verify", "--format", "json", seed=seed)
        assert done.returncode == (0 if expected["ok"] else 1), done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    report = json.loads(outputs[0])
    assert report["ok"] is expected["ok"]
    if not expected["ok"]:
        first = report["divergences"][0]
        assert (first["code"], first["seq"], first["session"]) == (
            expected["code"],
            expected["seq"],
            expected["session"],
        )
        assert f"decision {expected['position']} " in first["message"]


async def test_explain_json_is_stable_and_unknown_job_exits_1(database_url: str) -> None:
    await load_golden(database_url, "gpu_cluster")
    runs = [run_replay(database_url, "explain", "ml/llm-pretrain", "--format", "json", seed=s) for s in SEEDS]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    doc = json.loads(runs[0].stdout)
    assert doc["reasons"][0]["code"] == "gang-not-ready"
    assert doc["counterfactual"]["found"] is True

    missing = run_replay(database_url, "explain", "ml/nope")
    assert missing.returncode == 1
    assert "[REPLAY-UNKNOWN-JOB] job 'ml/nope' is not in the archive" in missing.stderr


async def test_text_session_and_audit_formats(database_url: str) -> None:
    golden = await load_golden(database_url, "gpu_cluster")
    session_id = golden.expect["sessions"][3]["id"]
    text = run_replay(database_url, "session", session_id, "--format", "text")
    assert text.returncode == 0, text.stderr
    assert f"Session {session_id}" in text.stdout
    assert "re-run: verified" in text.stdout
    assert "VictimEvicted" in text.stdout

    csv = run_replay(database_url, "audit", "preemptions", "--format", "csv")
    assert csv.returncode == 0, csv.stderr
    header, *lines = csv.stdout.splitlines()
    assert header.startswith("time,session,seq,position,action")
    assert len(lines) == 1
    assert lines[0].split(",")[4] == "preempt"

    unknown = run_replay(database_url, "session", "no-such-session")
    assert unknown.returncode == 1
    assert "[REPLAY-UNKNOWN-SESSION]" in unknown.stderr


def test_no_archive_configured_is_exit_2(tmp_path: Path) -> None:
    environ = {k: v for k, v in os.environ.items() if k != "TEPHRA_DATABASE_URL"}
    environ["TEPHRA_DATA_DIR"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "replay.cli", "verify"],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "[REPLAY-NO-ARCHIVE]" in done.stderr
    assert "tephra up" in done.stderr


async def test_one_output_flag_and_text_unless_json_is_asked_for(database_url: str) -> None:
    await load_golden(database_url, "gpu_cluster")
    as_json = run_replay(database_url, "explain", "ml/llm-pretrain", "-o", "json", "--no-counterfactual")
    legacy = run_replay(database_url, "explain", "ml/llm-pretrain", "--format", "json", "--no-counterfactual")
    piped = run_replay(database_url, "explain", "llm-pretrain", "--no-counterfactual")  # a bare name
    as_yaml = run_replay(database_url, "explain", "ml/llm-pretrain", "-o", "yaml", "--no-counterfactual")
    hint = run_replay(database_url, "explain", "nope")
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout == legacy.stdout  # -f/--format still works, hidden
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)
    # Piped, without -o: still the text for people, not JSON.
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("Job ml/llm-pretrain\n")
    assert hint.returncode == 1
    assert "a job id is <namespace>/<name>" in hint.stderr
    bad = run_replay(database_url, "verify", "-o", "xml")
    assert bad.returncode == 2
    assert "expected one of table, json, yaml, got 'xml'" in bad.stderr


async def test_audit_fits_120_columns_and_wide_keeps_one_row_each(database_url: str) -> None:
    await load_golden(database_url, "gpu_cluster")
    table = run_replay(database_url, "audit", "preemptions", env={"COLUMNS": "120"})
    wide = run_replay(database_url, "audit", "preemptions", "-o", "wide")  # as wide as it needs, piped
    items = json.loads(run_replay(database_url, "audit", "preemptions", "-o", "json").stdout)["items"]
    assert table.returncode == 0, table.stderr
    assert all(len(line) <= 120 for line in table.stdout.splitlines()), table.stdout
    (row,) = items
    for name in (row["victim"]["task"], row["preemptor"]["task"], row["rule"]):
        assert name in table.stdout  # whole, not cut
    assert "verified" in table.stdout
    assert "victim queue share" in wide.stdout
