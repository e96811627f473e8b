"""scheduler.podspec: the pod request every door reads (defaults, init containers, overhead, gates)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.podspec import PodSpecError, is_extended_resource, pod_requests, scheduling_gates


def test_each_missing_request_defaults_to_its_limit() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    assert pod_requests(spec, "spec") == {"cpu": 1000, "nvidia.com/gpu": 1}


def test_a_request_beats_its_limit() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}}]}
    assert pod_requests(spec, "spec") == {"cpu": 500}


def test_init_containers_take_the_max_and_overhead_is_added() -> None:
    spec = {
        "overhead": {"cpu": "250m", "memory": "64Mi"},
        "initContainers": [
            {"resources": {"requests": {"cpu": "3"}}},
            {"resources": {"limits": {"memory": "4Gi"}}},
        ],
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        ],
    }
    # cpu max(3, 1 + 1) + 0.25; memory max(4Gi, 2Gi) + 64Mi
    assert pod_requests(spec, "spec") == {"cpu": 3250, "memory": 4 * 2**30 + 64 * 2**20}


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (
            {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "500m"}}}]},
            'spec.containers[0].resources.limits["nvidia.com/gpu"]',
        ),
        (
            {"containers": [{"resources": {"requests": {"example.com/fpga": 0.5}}}]},
            'spec.containers[0].resources.requests["example.com/fpga"]',
        ),
        ({"containers": [], "overhead": {"nvidia.com/gpu": "1.5"}}, 'spec.overhead["nvidia.com/gpu"]'),
    ],
)
def test_a_fractional_extended_resource_is_refused_as_the_api_server_refuses_it(
    spec: dict[str, Any], path: str
) -> None:
    with pytest.raises(PodSpecError) as info:
        pod_requests(spec, "spec")
    assert info.value.path == path
    assert "integer" in info.value.expected


def test_fractional_native_resources_are_fine() -> None:
    spec = {"containers": [{"resources": {"requests": {"cpu": "0.5", "example.kubernetes.io/x": "500m"}}}]}
    assert pod_requests(spec, "spec") == {"cpu": 500, "example.kubernetes.io/x": 1}


def test_extended_resource_names() -> None:
    assert is_extended_resource("nvidia.com/gpu")
    assert not is_extended_resource("cpu")
    assert not is_extended_resource("hugepages-2Mi")
    assert not is_extended_resource("kubernetes.io/batch-cpu")


def test_scheduling_gates_in_order_and_checked() -> None:
    assert scheduling_gates({"schedulingGates": [{"name": "b"}, {"name": "a"}]}, "spec") == ("b", "a")
    assert scheduling_gates({}, "spec") == ()
    with pytest.raises(PodSpecError) as info:
        scheduling_gates({"schedulingGates": [{"name": "a"}, {"name": "a"}]}, "spec")
    assert info.value.path == "spec.schedulingGates[1].name"
    with pytest.raises(PodSpecError):
        scheduling_gates({"schedulingGates": [{}]}, "spec")


def test_a_bad_quantity_names_its_path() -> None:
    with pytest.raises(PodSpecError) as info:
        pod_requests({"containers": [{"resources": {"requests": {"memory": "lots"}}}]}, "spec")
    assert info.value.path == "spec.containers[0].resources.requests.memory"
    assert info.value.got == "lots"
