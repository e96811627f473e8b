"""``replay explain`` tells the whole truth: every blocker, the smallest change and why, in a budget."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys

import pytest

from events.models import JobSubmittedData
from replay.errors import UnknownJob, resolve_job_name
from replay.explain import Explanation
from replay.queries import explain_job
from replay.store import open_archive
from tests.golden.archive import load_rows
from tests.golden.history import LiveRun, gpu_node, job
from tests.replay.helpers import run_replay

pytestmark = pytest.mark.integration


def _gang(name: str, queue: str, replicas: int, gpu: int) -> JobSubmittedData:
    """A gang whose PodGroup states minResources (what overcommit and the enqueue quota check read)."""
    doc = job(name, queue=queue, replicas=replicas, gpu=gpu, min_available=replicas).model_dump(mode="json")
    doc["min_resources"] = {"nvidia.com/gpu": gpu * replicas, "cpu": replicas, "memory": f"{4 * replicas}Gi"}
    return JobSubmittedData.model_validate(doc)


def _overcommit_and_capability() -> LiveRun:
    """Two 8-GPU nodes, one busy; a 2x8-GPU gang in a queue capped at 8 GPUs: overcommit refuses
    it first (16 > 16 x 1.2 - 8), and the queue's capability would refuse it too."""
    run = LiveRun()
    run.queue("research", capability={"cpu": 100, "memory": "1Ti", "nvidia.com/gpu": 8})
    for i in range(1, 3):
        run.node(gpu_node(f"n{i}", 8))
    run.submit(job("busy", queue="research", replicas=1, gpu=8))
    run.cycle()
    run.submit(_gang("gang", "research", 2, 8))
    run.cycle()
    return run


async def _load(database_url: str, run: LiveRun) -> None:
    await load_rows(database_url, [r.to_json() for r in run.rows])


async def _explained(database_url: str, run: LiveRun, job_id: str = "ml/gang") -> Explanation:
    """Archive ``run``, explain ``job_id`` with the default budget."""
    await _load(database_url, run)
    async with open_archive(database_url) as reader:
        return await explain_job(reader, job_id)


async def test_every_blocker_is_shown_ranked_with_its_numbers(database_url: str) -> None:
    explanation = await _explained(database_url, _overcommit_and_capability())
    # The session recorded one reason: overcommit's vote ended the enqueue vote.
    assert [r["code"] for r in explanation.reasons] == ["enqueue-rejected"]
    blockers = [b.to_json() for b in explanation.blockers]
    assert explanation.blockers_complete
    first, second = blockers[0], blockers[1]
    assert (first["code"], first["detail"]["plugin"], first["hiddenBehind"]) == (
        "enqueue-rejected",
        "overcommit",
        None,
    )
    assert first["detail"]["resources"]["nvidia.com/gpu"]["request"] == "16"
    assert (second["code"], second["detail"]["plugin"], second["hiddenBehind"]) == (
        "enqueue-rejected",
        "proportion",
        "overcommit's enqueue check",
    )
    assert second["detail"]["limitKind"] == "realCapability"
    assert second["detail"]["resources"]["nvidia.com/gpu"]["limit"] == "8"
    assert "realCapability 8" in second["message"]
    # Behind both: the node fit itself, ranked after them.
    codes = [b["code"] for b in blockers]
    assert codes.index("insufficient-resources") > 1


async def test_a_combined_fix_is_one_change_without_noise_and_it_works(database_url: str) -> None:
    run = _overcommit_and_capability()
    explanation = await _explained(database_url, run)
    shown = run_replay(database_url, "explain", "gang")  # a bare name, unique
    assert shown.returncode == 0, shown.stderr
    cf = explanation.counterfactual
    assert cf is not None
    assert cf.found, cf.note
    assert [c.kind for c in cf.changes] == ["add-nodes", "queue-capability"]
    assert len(cf.changes[0].nodes) == 1
    # Only the GPUs are short: the queue's cpu and memory capability are no part of the change.
    assert cf.changes[1].summary == "queue research capability +16 nvidia.com/gpu"
    assert cf.summary == f"{cf.changes[0].summary} and queue research capability +16 nvidia.com/gpu"
    assert f"-> {cf.summary}" in " ".join(shown.stdout.split())
    # Why not one lever: nodes cannot lift the capability, no queue setting lifts overcommit.
    tried = {a.change: a.why for a in cf.tried}
    assert "whatever the cluster's size" in tried["more nodes alone"]
    assert "overcommit refuses the job until the cluster is larger" in tried["queue changes alone"]
    assert cf.sessions_run <= 6
    assert json.loads(run_replay(database_url, "explain", "ml/gang", "-o", "json").stdout)["counterfactual"][
        "changes"
    ][1]["queue"]["capability"] == {"cpu": "100", "memory": "1Ti", "nvidia.com/gpu": "24"}

    for change in cf.changes:
        for event in change.to_events(
            cluster=run.cluster, time=run.now, source="tephra://test", id_prefix=f"cf-{change.kind}"
        ):
            run.append(event)
    session_id = run.schedule()
    assert "ml/gang" not in run.results[session_id].pending


async def test_a_gpu_shortfall_counts_whole_nodes_of_the_shape_that_fixes_it(database_url: str) -> None:
    """A 3x8-GPU gang on two 8-GPU nodes lacks one node's GPUs: one more node, not more."""
    run = LiveRun()
    run.queue("research")
    for i in range(1, 3):
        run.node(gpu_node(f"n{i}", 8))
    run.node(gpu_node("cpu-1", 0, cpu=128))
    run.submit(_gang("gang", "research", 3, 8))
    run.cycle()
    explanation = await _explained(database_url, run)
    cf = explanation.counterfactual
    assert cf is not None
    (change,) = cf.changes
    assert change.kind == "add-nodes"
    assert [n.allocatable["nvidia.com/gpu"] for n in change.nodes] == [8]
    assert change.summary.startswith("1 more node with ")


async def test_the_search_keeps_to_its_budget_and_says_when_it_was_cut(database_url: str) -> None:
    await _load(database_url, _overcommit_and_capability())
    async with open_archive(database_url) as reader:
        explanation = await explain_job(reader, "ml/gang", budget=0)
    cf = explanation.counterfactual
    assert cf is not None
    assert cf.cut
    assert cf.sessions_run == 0
    assert "cut at its time budget (0 s" in cf.note
    assert not explanation.blockers_complete
    # The recorded reasons are still there; the hidden ones were not searched.
    assert [b.reason.code for b in explanation.blockers] == ["enqueue-rejected"]

    shown = run_replay(database_url, "explain", "ml/gang", env={"TEPHRA_EXPLAIN_BUDGET": "0"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "cut at its time budget" in text
    assert "was cut by its time budget" in text
    # Not a terminal: no progress line on stderr.
    assert shown.stderr == ""


def test_a_bare_name_with_no_job_suggests_the_closest() -> None:
    with pytest.raises(UnknownJob, match=r"did you mean ml/gang\?"):
        resolve_job_name("gagn", [], ["ml/gang", "ml/other"])
    with pytest.raises(UnknownJob, match=r"a job id is <namespace>/<name>\)"):
        resolve_job_name("zzz", [], ["ml/gang"])


async def test_the_answer_says_why_one_node_fewer_is_not_enough(database_url: str) -> None:
    """Two queues share two 8-GPU nodes by weight, both want more: one more node holds the
    gang's GPUs, but queue a's deserved share (12 of 24) still blocks it; two nodes raise it to 16."""
    run = LiveRun()
    run.queue("a")
    run.queue("b")
    for i in range(1, 3):
        run.node(gpu_node(f"n{i}", 8))
    run.submit(job("busya", queue="a", gpu=8))
    run.submit(job("busyb", queue="b", gpu=8))
    run.cycle()
    run.submit(job("moreb", queue="b", gpu=8))
    run.submit(job("gang", queue="a", gpu=8, min_available=1))
    run.cycle()
    explanation = await _explained(database_url, run)
    cf = explanation.counterfactual
    assert cf is not None
    (change,) = cf.changes
    assert change.kind == "add-nodes"
    assert len(change.nodes) == 2
    why = {a.change: a.why for a in cf.tried}
    one = next(text for change, text in why.items() if change.startswith("1 more node "))
    assert one.startswith("queue-not-allocatable: ")
    assert one.endswith("> deserved 12")


def _explain_on_a_terminal(database_url: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    """``replay explain -o json`` with stderr on a pseudo-terminal: its answer, and what stderr drew."""
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "replay.cli", "explain", "ml/gang", "-o", "json"],
            env={**os.environ, "TEPHRA_DATABASE_URL": database_url, "COLUMNS": "100"},
            stdout=subprocess.PIPE,
            stderr=follower,
            check=False,
            timeout=120,
        )
        os.close(follower)
        drawn = b""
        with contextlib.suppress(OSError):  # EIO: the terminal's other end is closed
            while chunk := os.read(leader, 65536):
                drawn += chunk
    finally:
        os.close(leader)
    return done, drawn


async def test_progress_is_drawn_on_stderr_when_it_is_a_terminal(database_url: str) -> None:
    await _load(database_url, _overcommit_and_capability())
    done, drawn = _explain_on_a_terminal(database_url)
    assert done.returncode == 0
    assert json.loads(done.stdout)["counterfactual"]["found"]
    assert b"explain: searching what blocks and what would fit" in drawn
    assert b"re-runs" in drawn
