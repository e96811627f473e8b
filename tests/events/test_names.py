"""Names as Kubernetes requires them: the one check every door uses (events.names)."""

from __future__ import annotations

import pytest

from events.names import invalid_name, is_dns_label, is_dns_subdomain
from tests.events.samples import job_submitted, node_reported, sample_events


@pytest.mark.parametrize("name", ["a", "job-1", "x" * 63, "0abc"])
def test_labels(name: str) -> None:
    assert is_dns_label(name)


@pytest.mark.parametrize("name", ["", "My Job!!", "a_b", "-a", "a-", "x" * 64, "a.b", "ä"])
def test_not_labels(name: str) -> None:
    assert not is_dns_label(name)


def test_subdomains_allow_dotted_labels_up_to_253() -> None:
    assert is_dns_subdomain("gpu-node-01.zone-a.example")
    assert not is_dns_subdomain("a..b")
    assert not is_dns_subdomain(".a")
    assert not is_dns_subdomain(".".join(["x" * 63] * 4) + "xx")  # 254 characters


def test_the_samples_are_valid_and_each_bad_name_is_named() -> None:
    assert [invalid_name(event) for event in sample_events()] == [None] * len(sample_events())
    job = job_submitted()
    bad = job.model_copy(update={"data": job.data.model_copy(update={"name": "My Job!!"})})
    assert invalid_name(bad) == (
        "data.name: 'My Job!!' is not a DNS-1123 label (at most 63 lowercase letters, digits and '-',"
        " starting and ending with a letter or digit)"
    )
    tasks = [job.data.tasks[0].model_copy(update={"name": "Master"})]
    bad_task = job.model_copy(update={"data": job.data.model_copy(update={"tasks": tasks})})
    assert (invalid_name(bad_task) or "").startswith("data.tasks[0].name: 'Master'")
    node = node_reported()
    bad_node = node.model_copy(update={"data": node.data.model_copy(update={"name": "Node_1"})})
    assert (invalid_name(bad_node) or "").startswith("data.name: 'Node_1' is not a DNS-1123 subdomain")
