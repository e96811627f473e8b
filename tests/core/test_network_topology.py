"""Network-topology-aware scheduling: the hyperNode tree, the hard / soft constraint in
allocate, the reason when nothing fits, and the manifest reader's refusals."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from scheduler.core.config import config_warnings, parse_scheduler_config
from scheduler.core.decisions import Bind
from scheduler.core.hypernodes import CLUSTER_TOP, HyperNodeTree
from scheduler.core.session import run_session
from scheduler.core.snapshot import (
    ClusterSnapshot,
    HyperNode,
    HyperNodeMember,
    Job,
    LabelSelector,
    NetworkTopology,
    TaskStatus,
    snapshot_digest,
)
from scheduler.core.trace import HyperNodeTried
from scheduler.podspec import PodSpecError
from scheduler.topology_spec import hypernode_from_manifest, network_topology_from_spec
from tests.core.builders import job, node, snapshot, task

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WITH_PLUGIN = parse_scheduler_config(
    {
        "actions": "allocate",
        "tiers": [
            {"plugins": [{"name": "gang"}, {"name": "predicates"}, {"name": "network-topology-aware"}]}
        ],
    }
)
WITHOUT_PLUGIN = parse_scheduler_config(
    {"actions": "allocate", "tiers": [{"plugins": [{"name": "gang"}, {"name": "predicates"}]}]}
)


def of_nodes(name: str, tier: int, *nodes: str) -> HyperNode:
    return HyperNode(name, tier, tuple(HyperNodeMember("Node", exact=n) for n in nodes))


def of_hypernodes(name: str, tier: int, *children: str) -> HyperNode:
    return HyperNode(name, tier, tuple(HyperNodeMember("HyperNode", exact=c) for c in children))


#: s0 = {a1, a2}, s1 = {b1, b2} (tier 1) under s2 (tier 2); c1 under no hyperNode.
FABRIC = (of_nodes("s0", 1, "a1", "a2"), of_nodes("s1", 1, "b1", "b2"), of_hypernodes("s2", 2, "s0", "s1"))


def with_topology(j: Job, mode: str = "hard", tier: int | None = 1, tier_name: str = "") -> Job:
    return dataclasses.replace(j, network_topology=NetworkTopology(mode, tier, tier_name))


def placed(snap: ClusterSnapshot, config: object = WITH_PLUGIN) -> dict[str, str]:
    result = run_session(snap, config, NOW)  # type: ignore[arg-type]
    return {d.task: d.node for d in result.decisions if isinstance(d, Bind)}


# ---------------------------------------------------------------------------- the tree


def test_tree_resolves_exact_regex_and_label_members_and_nesting() -> None:
    nodes = sorted(
        [node("a1", rack="r1"), node("a2", rack="r1"), node("b1"), node("b2"), node("c1")],
        key=lambda n: n.name,
    )
    by_label = HyperNode(
        "rack", 1, (HyperNodeMember("Node", labels=LabelSelector(match_labels=(("rack", "r1"),))),)
    )
    by_regex = HyperNode("bees", 1, (HyperNodeMember("Node", regex="^b"),))
    top = of_hypernodes("spine", 3, "rack", "bees")
    tree = HyperNodeTree([top, by_regex, by_label], nodes)
    names = [n.name for n in nodes]
    assert [names[r] for r in tree.infos["rack"].rows] == ["a1", "a2"]
    assert [names[r] for r in tree.infos["bees"].rows] == ["b1", "b2"]
    assert [names[r] for r in tree.infos["spine"].rows] == ["a1", "a2", "b1", "b2"]
    assert tree.infos["rack"].parent == "spine"
    assert tree.top.tier == 4
    assert tree.top.children == ("spine",)
    assert len(tree.top.rows) == 5
    assert tree.lca("rack", "bees") == "spine"
    assert tree.lowest_of_row(names.index("b2")) == "bees"
    assert tree.lowest_of_row(names.index("c1")) is None
    assert tree.problems == []


def test_empty_label_selector_and_unknown_names_select_nothing() -> None:
    nodes = [node("a1")]
    empty = HyperNode(
        "e", 1, (HyperNodeMember("Node", labels=LabelSelector()), HyperNodeMember("Node", exact="zz"))
    )
    tree = HyperNodeTree([empty], nodes)
    assert tree.infos["e"].rows == ()


def test_cycles_double_parents_and_missing_children_are_reported_not_followed() -> None:
    hypernodes = [
        of_hypernodes("x", 2, "y", "ghost"),
        of_hypernodes("y", 2, "x"),
        of_hypernodes("z", 3, "y"),
    ]
    tree = HyperNodeTree(hypernodes, [node("n")])
    assert tree.infos["y"].parent == "x"
    assert tree.infos["x"].parent == CLUSTER_TOP
    assert len(tree.problems) == 3
    assert any("ghost" in p for p in tree.problems)
    assert any("cycle" in p for p in tree.problems)
    assert any("kept x" in p for p in tree.problems)


# ---------------------------------------------------------------------------- allocate


def _cluster(cpu: dict[str, int]) -> list:  # type: ignore[type-arg]
    return [node(name, cpu=amount) for name, amount in sorted(cpu.items())]


def test_hard_mode_keeps_the_gang_inside_one_tier_1_hypernode() -> None:
    nodes = _cluster({"a1": 6, "a2": 3, "b1": 4, "b2": 4})
    train = job("train", [task("train", i, cpu=4) for i in range(2)], min_resources={"cpu": 8000})
    free = snapshot(nodes, [train])
    free = dataclasses.replace(free, hypernodes=FABRIC)
    assert placed(free) == {"ns/train-w-0": "a1", "ns/train-w-1": "b1"}  # no constraint: split
    hard = dataclasses.replace(free, jobs=(with_topology(train),))
    assert placed(hard) == {"ns/train-w-0": "b1", "ns/train-w-1": "b2"}


def test_hard_mode_without_the_plugin_is_not_constrained_as_in_volcano() -> None:
    nodes = _cluster({"a1": 6, "a2": 3, "b1": 4, "b2": 4})
    train = with_topology(job("train", [task("train", i, cpu=4) for i in range(2)]))
    snap = dataclasses.replace(snapshot(nodes, [train]), hypernodes=FABRIC)
    assert placed(snap, WITHOUT_PLUGIN) == {"ns/train-w-0": "a1", "ns/train-w-1": "b1"}


def test_hard_mode_that_fits_nowhere_stays_pending_with_its_own_reason() -> None:
    nodes = _cluster({"a1": 6, "a2": 3, "b1": 6, "b2": 4})
    train = with_topology(
        job("train", [task("train", i, cpu=5) for i in range(2)], min_resources={"cpu": 10_000})
    )
    result = run_session(dataclasses.replace(snapshot(nodes, [train]), hypernodes=FABRIC), WITH_PLUGIN, NOW)
    assert not [d for d in result.decisions if isinstance(d, Bind)]
    reasons = {r.code: r for r in result.pending["ns/train"]}
    reason = reasons["network-topology-unsatisfied"]
    assert reason.detail["tried"] == ["s1"]  # s0 (9 cpu idle) fails the minResources pre-filter
    assert "In hyperNode s1: 0/2 nodes are unavailable: 2 Insufficient cpu." in reason.message
    # Ranked before the gang reason it explains.
    assert next(r.code for r in result.pending["ns/train"]) == "network-topology-unsatisfied"


def test_highest_tier_2_spans_two_tier_1_hypernodes_and_never_leaves_them() -> None:
    nodes = _cluster({"a1": 4, "a2": 4, "b1": 4, "b2": 4, "c1": 4})
    train = with_topology(job("train", [task("train", i, cpu=4) for i in range(3)]), tier=2)
    snap = dataclasses.replace(snapshot(nodes, [train]), hypernodes=FABRIC)
    assert placed(snap) == {"ns/train-w-0": "a1", "ns/train-w-1": "a2", "ns/train-w-2": "b1"}


def test_soft_mode_prefers_the_fuller_hypernode_and_falls_back_to_the_cluster() -> None:
    nodes = _cluster({"a1": 8, "a2": 8, "b1": 4, "b2": 4, "c1": 4})
    pair = with_topology(job("pair", [task("pair", i, cpu=4) for i in range(2)]), mode="soft", tier=None)
    snap = dataclasses.replace(snapshot(nodes, [pair]), hypernodes=FABRIC)
    assert placed(snap) == {"ns/pair-w-0": "b1", "ns/pair-w-1": "b2"}  # s1 is 8/8 full, s0 8/16
    # Five 4-cpu workers: no hyperNode holds them (s2 has four nodes), the cluster top does.
    nodes = _cluster({"a1": 4, "a2": 4, "b1": 4, "b2": 4, "c1": 4})
    wide = with_topology(job("wide", [task("wide", i, cpu=4) for i in range(5)]), mode="soft", tier=None)
    snap = dataclasses.replace(snapshot(nodes, [wide]), hypernodes=FABRIC)
    assert sorted(placed(snap).values()) == ["a1", "a2", "b1", "b2", "c1"]
    hard = dataclasses.replace(snap, jobs=(with_topology(wide, tier=2),))
    assert placed(hard) == {}


def test_highest_tier_name_is_translated_through_the_hypernodes_tier_names() -> None:
    nodes = _cluster({"a1": 6, "a2": 3, "b1": 4, "b2": 4})
    named = tuple(dataclasses.replace(h, tier_name="leaf" if h.tier == 1 else "spine") for h in FABRIC)
    train = with_topology(
        job("train", [task("train", i, cpu=4) for i in range(2)]), tier=None, tier_name="leaf"
    )
    snap = dataclasses.replace(snapshot(nodes, [train]), hypernodes=named)
    assert placed(snap) == {"ns/train-w-0": "b1", "ns/train-w-1": "b2"}


def test_a_job_with_tasks_running_stays_in_the_hypernode_they_span() -> None:
    nodes = _cluster({"a1": 4, "a2": 4, "b1": 8, "b2": 4})
    running = task("elastic", 0, cpu=4, status=TaskStatus.RUNNING, on="b2")
    more = [task("elastic", i, cpu=4) for i in (1, 2)]
    elastic = with_topology(job("elastic", [running, *more], min_member=1))
    snap = dataclasses.replace(snapshot(nodes, [elastic]), hypernodes=FABRIC)
    # Name order alone would start at a1; the running task pins the job to s1.
    assert placed(snap) == {"ns/elastic-w-1": "b1", "ns/elastic-w-2": "b1"}


def test_decisions_do_not_depend_on_the_order_of_the_hypernodes() -> None:
    nodes = _cluster({"a1": 4, "a2": 4, "b1": 4, "b2": 4})
    train = with_topology(job("train", [task("train", i, cpu=4) for i in range(2)]))
    forward = dataclasses.replace(snapshot(nodes, [train]), hypernodes=FABRIC)
    backward = dataclasses.replace(forward, hypernodes=tuple(reversed(FABRIC)))
    assert placed(forward) == placed(backward) == {"ns/train-w-0": "a1", "ns/train-w-1": "a2"}
    assert snapshot_digest(forward) == snapshot_digest(backward)
    assert snapshot_digest(forward) != snapshot_digest(dataclasses.replace(forward, hypernodes=()))


def test_the_plugin_warns_about_what_it_does_not_apply() -> None:
    body = {"actions": "allocate", "tiers": [{"plugins": [{"name": "network-topology-aware"}]}]}
    assert [path for path, _ in config_warnings(body)] == ["tiers[0].plugins[0]"]


# ---------------------------------------------------------------------------- manifests


def test_network_topology_spec_defaults_and_refusals() -> None:
    assert network_topology_from_spec({}, "t") == NetworkTopology("hard", None, "")
    assert network_topology_from_spec({"mode": "soft"}, "t") == NetworkTopology("soft", None, "")
    with pytest.raises(PodSpecError, match="simultaneously"):
        network_topology_from_spec({"highestTierAllowed": 1, "highestTierName": "leaf"}, "t")
    with pytest.raises(PodSpecError) as bad:
        network_topology_from_spec({"mode": "strict"}, "t")
    assert bad.value.path == "t.mode"


@pytest.mark.parametrize(
    ("members", "path"),
    [
        ([], "spec.members"),
        ([{"type": "Node", "selector": {}}], "spec.members[0].selector"),
        (
            [{"type": "Node", "selector": {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "a"}}}],
            "spec.members[0].selector",
        ),
        (
            [{"type": "Node", "selector": {"regexMatch": {"pattern": "(a"}}}],
            "spec.members[0].selector.regexMatch.pattern",
        ),
        (
            [{"type": "HyperNode", "selector": {"regexMatch": {"pattern": "a"}}}],
            "spec.members[0].selector.regexMatch",
        ),
        ([{"type": "Rack", "selector": {"exactMatch": {"name": "a"}}}], "spec.members[0].type"),
    ],
)
def test_hypernode_manifest_refusals_name_the_field(members: list[object], path: str) -> None:
    body = {"metadata": {"name": "s0"}, "spec": {"tier": 1, "members": members}}
    with pytest.raises(PodSpecError) as bad:
        hypernode_from_manifest(body)
    assert bad.value.path == path


def test_the_best_scored_hypernode_that_does_not_fit_gives_way_to_the_next() -> None:
    # s1 (8 cpu) packs best, (0 + 8) / 8, but b2 has 3 cpu: the gang fits only in s0 (8 / 16).
    nodes = _cluster({"a1": 8, "a2": 8, "b1": 5, "b2": 3})
    pair = with_topology(job("pair", [task("pair", i, cpu=4) for i in range(2)]), mode="soft", tier=None)
    result = run_session(dataclasses.replace(snapshot(nodes, [pair]), hypernodes=FABRIC), WITH_PLUGIN, NOW)
    assert {d.task: d.node for d in result.decisions if isinstance(d, Bind)} == {
        "ns/pair-w-0": "a1",
        "ns/pair-w-1": "a1",
    }
    tried = [(s.hypernode, s.outcome) for s in result.trace if isinstance(s, HyperNodeTried)]
    assert tried == [("s1", "no-fit"), ("s0", "fits"), ("s0", "chosen")]


def test_inside_a_wide_hypernode_a_gang_keeps_to_the_rack_of_its_first_task() -> None:
    # No rack holds three 4-cpu tasks (s0: a1 4 + c1 6 = 10, s1: 8), so the spine s2 is used.
    # After a1 (s0), c1 shares s0 (node score 1) where b1 shares only the spine ((3-2)/(3-1));
    # name order alone would take b1 second.
    fabric = (
        of_nodes("s0", 1, "a1", "c1"),
        of_nodes("s1", 1, "b1", "b2"),
        of_hypernodes("s2", 2, "s0", "s1"),
    )
    nodes = _cluster({"a1": 4, "b1": 4, "b2": 4, "c1": 6})
    train = with_topology(
        job("train", [task("train", i, cpu=4) for i in range(3)], min_resources={"cpu": 12_000}), tier=2
    )
    snap = dataclasses.replace(snapshot(nodes, [train]), hypernodes=fabric)
    assert placed(snap) == {"ns/train-w-0": "a1", "ns/train-w-1": "c1", "ns/train-w-2": "b1"}
    no_node_order = parse_scheduler_config(
        {
            "actions": "allocate",
            "tiers": [
                {
                    "plugins": [
                        {"name": "gang"},
                        {"name": "predicates"},
                        {"name": "network-topology-aware", "enableNodeOrder": False},
                    ]
                }
            ],
        }
    )
    assert placed(snap, no_node_order) == {"ns/train-w-0": "a1", "ns/train-w-1": "b1", "ns/train-w-2": "b2"}
