"""Session behaviour: reasons with numbers, config parsing, digest, advance."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from events.models import SchedulerConfigSpec
from scheduler.core.carried import CarriedJobs
from scheduler.core.config import (
    DEFAULT_CONFIG,
    ActionName,
    ConfigError,
    PluginName,
    SchedulerConfig,
    parse_scheduler_config,
)
from scheduler.core.decisions import Bind
from scheduler.core.reasons import fit_error_message
from scheduler.core.registry import build_registry
from scheduler.core.session import advance, run_session
from scheduler.core.snapshot import PodGroupPhase, Queue, TaskStatus, snapshot_digest
from tests.core.builders import GI, job, node, snapshot, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_fit_error_histogram_is_sorted_as_strings() -> None:
    text = fit_error_message(
        12, {"Insufficient nvidia.com/gpu": 8, "node(s) didn't match Pod's node affinity/selector": 4}
    )
    assert text == (
        "0/12 nodes are unavailable: 4 node(s) didn't match Pod's node affinity/selector, "
        "8 Insufficient nvidia.com/gpu."
    )
    assert fit_error_message(3, {"a": 10, "b": 2}) == "0/3 nodes are unavailable: 10 a, 2 b."


def test_gang_that_cannot_fit_explains_with_numbers() -> None:
    nodes = [node(f"g{i}", gpu=8) for i in range(3)]
    nodes += [node(f"t{i}", gpu=8, kind="t4") for i in range(2)]
    big = job("big", [task("big", i, gpu=8, selector={"kind": "t4"}) for i in range(4)])
    result = run_session(snapshot(nodes, [big]), DEFAULT_CONFIG, NOW)
    assert not [d for d in result.decisions if isinstance(d, Bind)]
    reasons = {r.code: r for r in result.pending["ns/big"]}
    assert reasons["gang-not-ready"].message == "2/4 tasks in gang placeable, minAvailable 4"
    fit = reasons["insufficient-resources"]
    assert fit.message == (
        "0/5 nodes are unavailable: 2 Insufficient nvidia.com/gpu, "
        "3 node(s) didn't match Pod's node affinity/selector."
    )
    assert fit.detail["histogram"] == {
        "Insufficient nvidia.com/gpu": 2,
        "node(s) didn't match Pod's node affinity/selector": 3,
    }
    assert next(r.code for r in result.pending["ns/big"]) == "gang-not-ready"


def test_enqueue_rejection_names_resource_and_numbers() -> None:
    queue = Queue("q", capability={"nvidia.com/gpu": 8})
    running = job(
        "run",
        [task("run", 0, gpu=8, status=TaskStatus.RUNNING, on="g0")],
        phase=PodGroupPhase.RUNNING,
        min_resources={"nvidia.com/gpu": 8},
    )
    new = job(
        "new", [task("new", 0, gpu=4)], phase=PodGroupPhase.PENDING, min_resources={"nvidia.com/gpu": 4}
    )
    result = run_session(snapshot([node("g0", gpu=16)], [running, new], [queue]), DEFAULT_CONFIG, NOW)
    reason = result.pending["ns/new"][0]
    assert reason.code == "enqueue-rejected"
    assert reason.message.startswith("queue resource quota insufficient: insufficient nvidia.com/gpu")
    assert "request 4 + allocated 8" in reason.message
    assert "realCapability 8" in reason.message
    gpu = reason.detail["resources"]["nvidia.com/gpu"]
    assert (gpu["request"], gpu["allocated"], gpu["limit"]) == (4, 8, 8.0)
    assert result.phases["ns/new"] == "Pending"


def test_missing_queue_and_not_evaluated() -> None:
    orphan = job("o", [task("o", 0)], queue="nope")
    idle = job("i", [task("i", 0)])
    config = parse_scheduler_config({"actions": "enqueue", "tiers": [{"plugins": [{"name": "gang"}]}]})
    result = run_session(snapshot([node("n")], [orphan, idle]), config, NOW)
    assert result.pending["ns/o"][0].code == "queue-missing"
    assert result.pending["ns/i"][0].code == "not-evaluated"


def test_pending_reasons_are_listed_by_job_uid_whatever_the_snapshot_order() -> None:
    # Too big for the node: every job waits.  Orphans (no queue) interleave with the rest.
    jobs = [
        job(name, [task(name, 0, cpu=64)], queue="nope" if name.startswith("o") else "q")
        for name in ("z", "o2", "b", "o1", "m", "a")
    ]
    carried = CarriedJobs()
    for queues in ([Queue("q")], [Queue("q"), Queue("nope")]):
        snap = snapshot([node("n", cpu=8)], jobs, queues)
        for _ in range(2):  # the second session takes the carried states
            result = run_session(snap, DEFAULT_CONFIG, NOW, carried=carried)
            assert list(result.pending) == sorted(result.pending)
            assert list(result.phases) == [j.uid for j in jobs]  # phases: the snapshot's order
            assert len(result.pending) == len(jobs)


def test_advance_completes_bindings_and_evictions() -> None:
    snap = snapshot([node("n1", cpu=2)], [job("a", [task("a", 0), task("a", 1)])])
    result = run_session(snap, DEFAULT_CONFIG, NOW)
    assert len([d for d in result.decisions if isinstance(d, Bind)]) == 2
    nxt = advance(snap, result)
    statuses = {t.uid: (t.status, t.node) for t in nxt.jobs[0].tasks}
    assert statuses == {"ns/a-w-0": (TaskStatus.RUNNING, "n1"), "ns/a-w-1": (TaskStatus.RUNNING, "n1")}
    assert run_session(nxt, DEFAULT_CONFIG, NOW).phases["ns/a"] == "Running"


def test_digest_ignores_order_and_sees_content() -> None:
    a = snapshot([node("n1"), node("n2")], [job("a", [task("a", 0)]), job("b", [task("b", 0)])])
    b = dataclasses.replace(a, nodes=a.nodes[::-1], jobs=a.jobs[::-1])
    assert snapshot_digest(a) == snapshot_digest(b)
    c = dataclasses.replace(a, nodes=(node("n1", cpu=9), a.nodes[1]))
    assert snapshot_digest(a) != snapshot_digest(c)


def test_config_defaults_spellings_and_errors() -> None:
    gang = DEFAULT_CONFIG.tiers[0].plugins[1]
    assert gang.name == "gang"
    assert not gang.enabled("enablePreemptable")
    assert gang.enabled("enableJobReady")
    cfg = parse_scheduler_config(
        {"actions": ["allocate"], "tiers": [{"plugins": [{"name": "proportion", "enabledOverused": False}]}]}
    )
    assert not cfg.tiers[0].plugins[0].enabled("enableOverused")
    with pytest.raises(ConfigError, match="unknown plugin 'nope'; valid plugins: binpack"):
        parse_scheduler_config({"actions": "allocate", "tiers": [{"plugins": [{"name": "nope"}]}]})
    with pytest.raises(ConfigError, match="unknown action 'shuffle'"):
        parse_scheduler_config({"actions": "allocate, shuffle"})
    with pytest.raises(ConfigError, match="unknown plugin option 'enableMagic'"):
        parse_scheduler_config(
            {"actions": "allocate", "tiers": [{"plugins": [{"name": "gang", "enableMagic": True}]}]}
        )


def test_config_spec_round_trip() -> None:
    spec = DEFAULT_CONFIG.to_spec()
    assert isinstance(spec, SchedulerConfigSpec)
    assert spec.tiers[0].plugins[1].flags == {"enablePreemptable": False}
    assert SchedulerConfig.from_spec(spec) == DEFAULT_CONFIG


def test_every_declared_name_is_registered_and_named_alike() -> None:
    registry = build_registry()
    assert list(registry.plugins) == list(PluginName)
    assert list(registry.actions) == list(ActionName)
    for name, factory in registry.plugins.items():
        option = parse_scheduler_config({"actions": "allocate", "tiers": [{"plugins": [{"name": name}]}]})
        plugin = registry.plugin(option.tiers[0].plugins[0], 0)
        assert type(plugin).name is name  # type: ignore[attr-defined]
        assert factory is type(plugin)
    for action_name in ActionName:
        assert registry.action(action_name).name is action_name


@pytest.mark.parametrize("quota", ["proportion", "capacity", None])
def test_result_reports_queue_shares_at_opening(quota: str | None) -> None:
    """The queues' allocation when the session opened and the deserved amounts it used."""
    running = [task("a", i, cpu=2, status=TaskStatus.RUNNING, on="n1") for i in range(2)]
    jobs = [
        job("a", [*running, task("a", 2, cpu=2)], min_member=1),
        job("b", [task("b", 0, cpu=4)], queue="r"),
    ]
    queues = [Queue("q", weight=1, deserved={"cpu": 3000}), Queue("r", weight=1, capability={"cpu": 6000})]
    plugins = [{"name": "gang"}, *([{"name": quota}] if quota else [])]
    config = parse_scheduler_config({"actions": "enqueue, allocate", "tiers": [{"plugins": plugins}]})
    result = run_session(snapshot([node("n1", cpu=8)], jobs, queues), config, NOW)
    assert [d for d in result.decisions if isinstance(d, Bind)]  # allocation moved on after opening
    assert result.shares.allocated == {"q": {"cpu": 4000, "memory": 2 * GI, "pods": 2}, "r": {}}
    assert result.priorities == {"ns/a": 0, "ns/b": 0}
    deserved = result.shares.deserved
    if quota == "proportion":  # water-filled: q asks for 6 cpu, r for 4, of 8
        assert (deserved["q"]["cpu"], deserved["r"]["cpu"]) == (4000, 4000)
    elif quota == "capacity":  # capacity's own deserved (capped by capability)
        assert deserved["q"]["cpu"] == 3000
        assert "cpu" not in deserved["r"]
    else:  # no quota plugin: the queues' own deserved
        assert deserved == {"q": {"cpu": 3000}, "r": {}}
