"""``tephra submit`` and ``tephra simulate`` read every scenario file into the same cluster.

Each scenario file is loaded twice: by ``scheduler.scenario.load_scenario``
(the ``simulate`` door) and by ``api.manifests.parse_manifests`` followed by
the projector's fold and ``build_snapshot`` (the ``submit`` door, as the live
scheduler sees it).  The two snapshots must agree on everything scheduling
reads: jobs, tasks and their requests, roles, priorities, preemptability,
node constraints, gang minimums, queues and nodes.

What differs by design, and only that, is set aside before comparing:

* creation times (the submit door stamps event time);
* cluster state, which a scenario may give and a submission cannot: a
  PodGroup's ``status.phase`` and a Pod's ``spec.nodeName`` / ``status.phase``.
  The simulator starts from it; ``tephra submit`` submits the request (the job
  Pending, its pods unplaced) and warns about each such field, which the test
  checks field by field.

A file the submit door refuses is listed in :data:`SUBMIT_REFUSES` with why;
the test proves the refusal names the field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import pytest
import yaml

from api.manifests import InvalidManifests, Manifests, parse_manifests
from events.names import dns_label
from projector.fold import apply
from projector.state import ClusterState
from scheduler.core.decisions import Bind
from scheduler.core.session import run_session
from scheduler.core.snapshot import ClusterSnapshot, Job, PodGroupPhase, TaskStatus
from scheduler.scenario import load_scenario
from scheduler.service.default_queue import default_queue_event
from scheduler.snapshot_builder import build_snapshot
from tests.conformance.test_scenarios import FILES, REPO

NOW = datetime(2026, 1, 1, tzinfo=UTC)

#: Scenario files ``tephra submit`` refuses: the field every refusal names, and why.
SUBMIT_REFUSES: dict[str, tuple[str, str]] = {
    # Their pods set spec.priority by hand, as Volcano's unit tests do; Kubernetes' Priority
    # admission refuses a pod whose priority is not its PriorityClass's value, and so does submit.
    "PRE-07": ("spec.priority", "pods give spec.priority without a PriorityClass of that value"),
    "SEED-04": ("spec.priority", "pods give spec.priority without a PriorityClass of that value"),
}


def _submitted(path: Path) -> Manifests:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d][1:]
    ids = count()
    return parse_manifests(
        [(path.name, yaml.safe_dump_all(documents))], now=NOW, new_id=lambda: f"id-{next(ids)}"
    )


def _through_submit(manifests: Manifests) -> ClusterSnapshot:
    state = ClusterState()
    for seq, event in enumerate(manifests.events, start=1):
        outcome = apply(state, seq, event)
        assert outcome.invalid is None, outcome.invalid
    if "default" not in state.queues:  # what the scheduler publishes when its term starts
        apply(state, len(manifests.events) + 1, default_queue_event("c1", NOW))
    return build_snapshot(state)


def _requested(job: Job) -> Job:
    """The job as submitted: Pending, its tasks unplaced (the simulator's cluster state set aside)."""
    return replace(
        job,
        phase=PodGroupPhase.PENDING,
        tasks=tuple(replace(t, status=TaskStatus.PENDING, node=None) for t in job.tasks),
    )


def _comparable(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Creation times differ by design (the submit door stamps event time); all else must agree."""
    return ClusterSnapshot(
        nodes=tuple(sorted(snapshot.nodes, key=lambda n: n.name)),
        queues=tuple(sorted((replace(q, created=None) for q in snapshot.queues), key=lambda q: q.name)),
        priority_classes=tuple(sorted(snapshot.priority_classes, key=lambda p: p.name)),
        jobs=tuple(
            sorted(
                (
                    replace(
                        j,
                        created=None,
                        annotations={},
                        tasks=tuple(
                            sorted((replace(t, created=None) for t in j.tasks), key=lambda t: t.name)
                        ),
                    )
                    for j in snapshot.jobs
                ),
                key=lambda j: j.uid,
            )
        ),
        hypernodes=tuple(sorted(snapshot.hypernodes, key=lambda h: h.name)),
    )


def _cluster_state_fields(path: Path) -> set[tuple[int, str]]:
    """(document, field) of every piece of cluster state the file gives (documents from 1)."""
    found: set[tuple[int, str]] = set()
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d][1:]
    for index, doc in enumerate(documents, start=1):
        spec, status = doc.get("spec") or {}, doc.get("status") or {}
        if doc["kind"] == "PodGroup" and status.get("phase") not in (None, "Pending"):
            found.add((index, "status.phase"))
        if doc["kind"] == "Pod":
            if spec.get("nodeName"):
                found.add((index, "spec.nodeName"))
            if status.get("phase") not in (None, "Pending"):
                found.add((index, "status.phase"))
    return found


DOOR_FILES = [p for p in FILES if p.stem not in SUBMIT_REFUSES]
REFUSED_FILES = [p for p in FILES if p.stem in SUBMIT_REFUSES]


def test_every_scenario_file_goes_through_both_doors_or_is_named() -> None:
    assert len(DOOR_FILES) + len(REFUSED_FILES) == len(FILES)
    assert {p.stem for p in REFUSED_FILES} == set(SUBMIT_REFUSES), "a named exclusion matches no file"
    assert len(DOOR_FILES) >= 45, [p.name for p in DOOR_FILES]


@pytest.mark.parametrize("path", DOOR_FILES, ids=[p.stem for p in DOOR_FILES])
def test_submit_and_simulate_agree(path: Path) -> None:
    manifests = _submitted(path)
    simulated = _comparable(load_scenario(path).snapshot)
    submitted = _comparable(_through_submit(manifests))
    assert submitted.nodes == simulated.nodes
    assert submitted.queues == simulated.queues
    assert submitted.priority_classes == simulated.priority_classes
    assert submitted.hypernodes == simulated.hypernodes
    assert [j.uid for j in submitted.jobs] == [j.uid for j in simulated.jobs]
    for got, want in zip(submitted.jobs, simulated.jobs, strict=True):
        assert got == _requested(want), got.uid
    # Cluster state is set aside above only because the submit door says it ignored it.
    warned = {(w.document, w.field) for w in manifests.warnings if "cluster state" in w.message}
    assert warned == _cluster_state_fields(path)


def test_gated_pods_go_through_submit_with_a_warning_each_and_the_live_snapshot_holds_them_back() -> None:
    path = next(p for p in FILES if p.stem == "FID-05")
    manifests = _submitted(path)
    gated = sorted((w.document, w.field) for w in manifests.warnings if "schedulingGates" in w.field)
    assert gated == [(5, "spec.schedulingGates"), (7, "spec.schedulingGates")]
    # One session over what the live scheduler would see: the ungated pod binds, the gated wait.
    scenario = load_scenario(path)
    result = run_session(_through_submit(manifests), scenario.config, NOW)
    binds = [(d.task, d.node) for d in result.decisions if isinstance(d, Bind)]
    assert binds == [("c1/p1", "n1")]
    assert "scheduling-gated" in {r.code for r in result.pending["c1/pg2"]}
    assert "scheduling-gated" in {r.code for r in result.pending["c1/pg1"]}


@pytest.mark.parametrize("path", REFUSED_FILES, ids=[p.stem for p in REFUSED_FILES])
def test_submit_refuses_the_named_files_at_the_named_field(path: Path) -> None:
    with pytest.raises(InvalidManifests) as info:
        _submitted(path)
    field, _why = SUBMIT_REFUSES[path.stem]
    assert {e.field for e in info.value.errors} == {field}


NO_EFFECT = """\
apiVersion: tephra.dev/v1alpha1
kind: Scenario
metadata: {name: no-effect}
spec:
  config:
    actions: allocate
    tiers: [{plugins: [{name: gang}]}]
    metrics: {type: prometheus, address: "http://prometheus:9090"}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: child}
spec: {weight: 1, parent: research}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: j, namespace: default}
spec:
  maxRetry: 5
  policies: [{event: PodEvicted, action: RestartJob}]
  networkTopology: {mode: hard, highestTierAllowed: 1}  # honoured: no warning
  tasks:
    - name: a
      replicas: 1
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
    - name: b
      replicas: 1
      dependsOn: {name: [a]}
      template:
        spec:
          affinity:
            podAffinity:
              preferredDuringSchedulingIgnoredDuringExecution:
                - weight: 1
                  podAffinityTerm: {topologyKey: zone, labelSelector: {matchLabels: {app: x}}}
          containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def test_both_doors_warn_about_the_same_fields_with_no_effect(tmp_path: Path) -> None:
    path = tmp_path / "no-effect.yaml"
    path.write_text(NO_EFFECT)
    simulated = [w.split(": ", 3)[2] for w in load_scenario(path).warnings]
    head, *objects = [d for d in yaml.safe_load_all(NO_EFFECT) if d]
    conf = {"apiVersion": "tephra.dev/v1alpha1", "kind": "SchedulerConfiguration", **head["spec"]["config"]}
    submitted = parse_manifests([("no-effect.yaml", yaml.safe_dump_all([conf, *objects]))], now=NOW).warnings
    expected = [
        "metrics",
        "spec.policies",
        "spec.maxRetry",
        "spec.tasks[1].dependsOn",
        "spec.tasks[1].template.spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    ]
    assert [w.field for w in submitted] == expected
    assert simulated == ["spec.config.metrics", *expected[1:]]


def test_a_pod_group_whose_name_is_a_subdomain_is_the_same_job_through_both_doors(tmp_path: Path) -> None:
    # A PodGroup's (and a Pod's) name may hold dots; a job's name is a DNS label.
    text = (
        next(p for p in FILES if p.stem == "FID-20")
        .read_text()
        .replace("{name: train, namespace: team}", "{name: train.v1, namespace: team}")
        .replace("group-name: train}", "group-name: train.v1}")
    )
    path = tmp_path / "dotted.yaml"
    path.write_text(text)
    simulated = load_scenario(path).snapshot
    submitted = _through_submit(_submitted(path))
    assert (
        [j.uid for j in submitted.jobs]
        == [j.uid for j in simulated.jobs]
        == [f"team/{dns_label('train.v1')}"]
    )


def test_simulate_prints_its_warnings_on_stderr_and_keeps_the_json(tmp_path: Path) -> None:
    path = tmp_path / "no-effect.yaml"
    path.write_text(NO_EFFECT)
    result = subprocess.run(  # noqa: S603 - our own interpreter and CLI
        [sys.executable, "-m", "api.cli", "simulate", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        timeout=120,
    )
    assert json.loads(result.stdout)["scenario"] == "no-effect"
    assert "warning:" in result.stderr
    assert "spec.tasks[1].dependsOn: accepted, no effect" in result.stderr
