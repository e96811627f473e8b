"""``tephra submit`` and ``tephra simulate`` read the same scenario file into the same cluster.

Each scenario file made only of objects both doors accept (VolcanoJob, Queue,
Node, PriorityClass) is loaded twice: by ``scheduler.scenario.load_scenario``
(the ``simulate`` door) and by ``api.manifests.parse_manifests`` followed by
the projector's fold and ``build_snapshot`` (the ``submit`` door, as the live
scheduler sees it).  The two snapshots must agree on everything scheduling
reads: jobs, tasks and their requests, priorities, preemptability, node
constraints, queues and nodes.
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

from api.manifests import parse_manifests
from projector.fold import apply
from projector.state import ClusterState
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.scenario import load_scenario
from scheduler.service.default_queue import default_queue_event
from scheduler.snapshot_builder import build_snapshot
from tests.conformance.test_scenarios import FILES, REPO

BOTH_DOORS = {"Job", "Queue", "Node", "PriorityClass", "HyperNode"}


def _shared_kinds(path: Path) -> bool:
    kinds = {d.get("kind") for d in list(yaml.safe_load_all(path.read_text()))[1:] if d}
    return bool(kinds) and kinds <= BOTH_DOORS


DOOR_FILES = [p for p in FILES if _shared_kinds(p)]


def _through_submit(path: Path) -> ClusterSnapshot:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d][1:]
    text = yaml.safe_dump_all(documents)
    ids = count()
    manifests = parse_manifests(
        [(path.name, text)], now=datetime(2026, 1, 1, tzinfo=UTC), new_id=lambda: f"id-{next(ids)}"
    )
    state = ClusterState()
    for seq, event in enumerate(manifests.events, start=1):
        outcome = apply(state, seq, event)
        assert outcome.invalid is None, outcome.invalid
    if "default" not in state.queues:  # what the scheduler publishes when its term starts
        apply(state, len(manifests.events) + 1, default_queue_event("c1", datetime(2026, 1, 1, tzinfo=UTC)))
    return build_snapshot(state)


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


def test_some_scenarios_go_through_both_doors() -> None:
    assert len(DOOR_FILES) >= 7, [p.name for p in DOOR_FILES]


@pytest.mark.parametrize("path", DOOR_FILES, ids=[p.stem for p in DOOR_FILES])
def test_submit_and_simulate_agree(path: Path) -> None:
    simulated = _comparable(load_scenario(path).snapshot)
    submitted = _comparable(_through_submit(path))
    assert submitted.nodes == simulated.nodes
    assert submitted.queues == simulated.queues
    assert submitted.priority_classes == simulated.priority_classes
    assert submitted.hypernodes == simulated.hypernodes
    assert [j.uid for j in submitted.jobs] == [j.uid for j in simulated.jobs]
    for got, want in zip(submitted.jobs, simulated.jobs, strict=True):
        assert got == want, got.uid


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
    submitted = parse_manifests(
        [("no-effect.yaml", yaml.safe_dump_all([conf, *objects]))], now=datetime(2026, 1, 1, tzinfo=UTC)
    ).warnings
    expected = [
        "metrics",
        "spec.policies",
        "spec.maxRetry",
        "spec.tasks[1].dependsOn",
        "spec.tasks[1].template.spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    ]
    assert [w.field for w in submitted] == expected
    assert simulated == ["spec.config.metrics", *expected[1:]]


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
