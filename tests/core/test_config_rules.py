"""New scheduler configurations: honoured, refused, or warned — never accepted and ignored."""

from __future__ import annotations

from typing import Any

import pytest

from events.models import ActionConfiguration, PluginSpec, SchedulerConfigSpec, TierSpec
from scheduler.core.config import ConfigError, SchedulerConfig, config_warnings, parse_scheduler_config


def config(*plugins: dict[str, Any], configurations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "actions": "allocate, preempt",
        "tiers": [{"plugins": list(plugins)}],
        "configurations": configurations or [],
    }


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        (
            config({"name": "binpack", "arguments": {"binpack.wieght": 2}}),
            "tiers[0].plugins[0].arguments.binpack.wieght",
            "unknown argument 'binpack.wieght' for plugin 'binpack'; known arguments: binpack.weight,",
        ),
        (
            config({"name": "gang", "arguments": {"anything": 1}}),
            "tiers[0].plugins[0].arguments.anything",
            "unknown argument 'anything' for plugin 'gang'; known arguments: none",
        ),
        (
            config({"name": "predicates", "arguments": {"predicate.NodeAffinityEnable": "false"}}),
            "tiers[0].plugins[0].arguments.predicate.NodeAffinityEnable",
            "expected true or false, got 'false'",
        ),
        (
            config({"name": "nodeorder", "arguments": {"podaffinity.weight": 2}}),
            "tiers[0].plugins[0].arguments.podaffinity.weight",
            "only 0 is supported",
        ),
        (
            config({"name": "drf", "enableHierarchy": True}, {"name": "proportion"}),
            "tiers",
            "proportion and drf with hierarchy enabled conflicts",
        ),
        (
            config({"name": "drf", "enableHierarchy": True}),
            "tiers[0].plugins[0].enableHierarchy",
            "hierarchical mode of 'drf' is not implemented by Tephra (capacity's is)",
        ),
        (
            config({"name": "capacity", "enableHierarchy": True, "arguments": {"ancestorReclaimLevel": "1"}}),
            "tiers[0].plugins[0].arguments.ancestorReclaimLevel",
            "expected an integer",
        ),
        (
            config({"name": "gang"}, configurations=[{"name": "allocate", "arguments": {"x": 1}}]),
            "configurations[allocate].arguments.x",
            "unknown argument 'x' for action 'allocate'; known arguments: none",
        ),
        (
            config(
                {"name": "gang"},
                configurations=[{"name": "preempt", "arguments": {"enableTopologyAwarePreemption": True}}],
            ),
            "configurations[preempt].arguments.enableTopologyAwarePreemption",
            "only False is supported",
        ),
        (
            {**config({"name": "gang"}), "metrics": "prometheus"},
            "metrics",
            "expected a mapping",
        ),
    ],
)
def test_refused_with_the_path_and_what_is_known(body: dict[str, Any], where: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scheduler_config(body)
    assert info.value.where == where
    assert message in info.value.why


def test_known_arguments_and_off_switches_are_accepted() -> None:
    parsed = parse_scheduler_config(
        config(
            {
                "name": "binpack",
                "arguments": {"binpack.resources": "nvidia.com/gpu", "binpack.resources.nvidia.com/gpu": 5},
            },
            {"name": "nodeorder", "arguments": {"leastrequested.weight": 2, "imagelocality.weight": 0}},
            {"name": "overcommit", "arguments": {"overcommit-factor": 1.5}},
            configurations=[{"name": "preempt", "arguments": {"enableTopologyAwarePreemption": False}}],
        )
    )
    assert parsed.action_arguments("preempt") == {"enableTopologyAwarePreemption": False}


def test_a_metrics_section_is_accepted_and_named_as_having_no_effect() -> None:
    body = {**config({"name": "gang"}), "metrics": {"type": "prometheus", "address": "http://p:9090"}}
    parse_scheduler_config(body)
    assert [path for path, _ in config_warnings(body)] == ["metrics"]
    assert config_warnings(config({"name": "gang"})) == []


def test_an_archived_configuration_replays_without_the_new_checks() -> None:
    spec = SchedulerConfigSpec(
        actions=["allocate"],
        tiers=[TierSpec(plugins=[PluginSpec(name="gang", arguments={"legacy": 1})])],
        configurations=[ActionConfiguration(name="allocate", arguments={"old": True})],
    )
    assert SchedulerConfig.from_spec(spec).tiers[0].plugins[0].arguments == {"legacy": 1}
