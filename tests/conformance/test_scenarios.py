"""Every conformance scenario, through the same code path as ``tephra simulate --format json``.

The comparison rules are exactly those of ``tools/check_conformance.py``.
The folder comes from ``TEPHRA_CONFORMANCE_DIR``; by default it is the copy
committed under ``tests/conformance/scenarios`` (so a clean checkout runs
them), which a test keeps equal to the shared folder ``../shared/conformance``
whenever that folder exists beside the repository.  Tephra's own scenarios
(``tests/conformance/own``: fidelity cases, each naming its Volcano or
Kubernetes source) run beside them, through the same path and rules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.simulate import render_json, simulate_scenario

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "conformance"
VENDORED = Path(__file__).resolve().parent / "scenarios"
OWN = Path(__file__).resolve().parent / "own"
FOLDER = Path(os.environ.get("TEPHRA_CONFORMANCE_DIR", VENDORED))
FILES = sorted(FOLDER.glob("*.yaml")) + sorted(OWN.glob("*.yaml"))


def test_the_scenario_folder_is_not_empty() -> None:
    assert len(FILES) >= 35, f"expected the conformance scenarios in {FOLDER}"


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared conformance folder beside this checkout")
def test_the_committed_copy_matches_the_shared_scenarios() -> None:
    shared = {p.name: p.read_bytes() for p in SHARED.glob("*.yaml")}
    vendored = {p.name: p.read_bytes() for p in VENDORED.glob("*.yaml")}
    assert vendored == shared, "tests/conformance/scenarios is stale: copy ../shared/conformance/*.yaml again"


def check(expect: dict[str, Any], out: dict[str, Any]) -> list[str]:  # noqa: PLR0912 - a port of the checker
    """check_conformance.py's rules, verbatim in behaviour."""
    sessions = out.get("sessions", [])
    binds: dict[str, str] = {}
    evicted: list[str] = []
    for s in sessions:
        for b in s.get("bindings", []):
            binds[b["task"]] = b["node"]
        evicted += [e["task"] for e in s.get("evictions", [])]
    last = sessions[-1] if sessions else {}
    problems = []
    if "bindings" in expect:
        want = {k: v for k, v in (expect["bindings"] or {}).items() if v not in (None, "-", "")}
        if "bindCount" not in expect or expect.get("bindCount") == len(want):
            if binds != want:
                problems.append(f"bindings {binds} != {want}")
        else:
            for k, v in want.items():
                if binds.get(k) != v:
                    problems.append(f"binding {k}->{binds.get(k)} != {v}")
    if "bindCount" in expect and len(binds) != expect["bindCount"]:
        problems.append(f"bindCount {len(binds)} != {expect['bindCount']}")
    if "evicted" in expect and sorted(evicted) != sorted(expect["evicted"] or []):
        problems.append(f"evicted {sorted(evicted)} != {sorted(expect['evicted'] or [])}")
    if "evictCount" in expect and len(evicted) != expect["evictCount"]:
        problems.append(f"evictCount {len(evicted)} != {expect['evictCount']}")
    if expect.get("pipelined"):
        pip: dict[str, list[str]] = {}
        for p in last.get("pipelined", []):
            pip.setdefault(p["job"], []).append(p["node"])
        for job, nodes in expect["pipelined"].items():
            got = pip.get(job, [])
            if not got or any(n not in nodes for n in got):
                problems.append(f"pipelined {job} on {got}, allowed {nodes}")
    if expect.get("phases"):
        ph = last.get("phases", {})
        for job, phase in expect["phases"].items():
            if ph.get(job) != phase:
                problems.append(f"phase {job} {ph.get(job)} != {phase}")
    if expect.get("pending"):
        pend = {
            p["job"]: [r.get("code") for r in p.get("reasons", [])]
            for s in sessions
            for p in s.get("pending", [])
        }
        for job, codes in expect["pending"].items():
            if not any(c in pend.get(job, []) for c in codes):
                problems.append(f"pending {job} reasons {pend.get(job)} lack any of {codes}")
    return problems


def test_folder_has_scenarios() -> None:
    assert FILES, f"no scenario files in {FOLDER}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    expect = (next(iter(yaml.safe_load_all(path.read_text()))).get("spec") or {}).get("expect") or {}
    # Round-trip through the rendered text: exactly what `tephra simulate --format json` prints.
    out = json.loads(render_json(simulate_scenario(path)))
    assert check(expect, out) == []


def test_every_pending_job_has_a_reason() -> None:
    for path in FILES:
        for session in simulate_scenario(path)["sessions"]:
            for pending in session["pending"]:
                assert pending["reasons"], (path.stem, pending["job"])


def _simulate_all(seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run(  # noqa: S603 - our own interpreter and CLI
        [sys.executable, "-m", "api.cli", "simulate", *map(str, FILES), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=True,
        timeout=300,
    )
    return result.stdout


def test_json_is_byte_identical_across_hash_seeds() -> None:
    first, second = _simulate_all("1"), _simulate_all("4242")
    assert first
    assert first == second


def test_bad_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: tephra.dev/v1alpha1\nkind: Scenario\nmetadata: {name: x}\n"
        "spec: {config: {actions: allocate, tiers: []}}\n---\n"
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: lots}}\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and CLI
        [sys.executable, "-m", "api.cli", "simulate", str(bad), "--format", "json"],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 2
    assert "document 1" in result.stderr
    assert "status.allocatable.cpu" in result.stderr
