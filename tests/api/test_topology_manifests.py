"""``tephra submit`` reads HyperNode documents and a VolcanoJob's ``spec.networkTopology``."""

from __future__ import annotations

from events.models import (
    HyperNodeExactMember,
    HyperNodeLabelMember,
    HyperNodeRegexMember,
    HyperNodeUpserted,
    JobSubmitted,
    LabelSelector,
    NetworkTopologySpec,
)
from tests.api.test_manifests import errors_of, parse

HYPERNODES = """
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: leaf-a}
spec:
  tier: 1
  tierName: leaf
  members:
    - {type: Node, selector: {exactMatch: {name: n1}}}
    - {type: Node, selector: {regexMatch: {pattern: "^gpu-"}}}
    - {type: Node, selector: {labelMatch: {matchLabels: {rack: r1}}}}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: spine}
spec:
  tier: 2
  members:
    - {type: HyperNode, selector: {exactMatch: {name: leaf-a}}}
"""

JOB = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train}
spec:
  networkTopology: {NETWORK}
  tasks:
    - name: w
      replicas: 2
      template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"""


def test_hypernodes_become_hypernode_upserted() -> None:
    manifests = parse(HYPERNODES)
    assert [o.ref for o in manifests.objects] == ["hypernode/leaf-a", "hypernode/spine"]
    leaf, spine = (o.event for o in manifests.objects)
    assert isinstance(leaf, HyperNodeUpserted)
    assert isinstance(spine, HyperNodeUpserted)
    assert leaf.data.tier_name == "leaf"
    assert leaf.data.members == [
        HyperNodeExactMember(type="Node", exact_match="n1"),
        HyperNodeRegexMember(type="Node", regex_match="^gpu-"),
        HyperNodeLabelMember(type="Node", label_match=LabelSelector(match_labels={"rack": "r1"})),
    ]
    assert spine.data.members == [HyperNodeExactMember(type="HyperNode", exact_match="leaf-a")]
    assert manifests.warnings == ()


def test_a_bad_member_is_an_error_naming_its_field() -> None:
    text = HYPERNODES.replace('pattern: "^gpu-"', 'pattern: "(gpu"')
    (error,) = errors_of(text)
    assert "spec.members[1].selector.regexMatch.pattern" in error
    assert "member regexMatch pattern is invalid" in error


def test_network_topology_reaches_the_job() -> None:
    event = parse(JOB.replace("{NETWORK}", "{mode: soft}")).objects[0].event
    assert isinstance(event, JobSubmitted)
    assert event.data.network_topology == NetworkTopologySpec(mode="soft")
    hard = parse(JOB.replace("{NETWORK}", "{highestTierAllowed: 2}")).objects[0].event
    assert isinstance(hard, JobSubmitted)
    assert hard.data.network_topology == NetworkTopologySpec(mode="hard", highest_tier_allowed=2)


def test_hard_mode_without_a_tier_is_accepted_with_a_warning() -> None:
    manifests = parse(JOB.replace("{NETWORK}", "{mode: hard}"))
    assert [w.field for w in manifests.warnings] == ["spec.networkTopology"]


def test_both_tier_fields_are_refused() -> None:
    (error,) = errors_of(JOB.replace("{NETWORK}", "{highestTierAllowed: 1, highestTierName: leaf}"))
    assert "cannot be set simultaneously" in error


POD_GROUP = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: train}
spec:
  minMember: 1
  networkTopology: {NETWORK}
---
apiVersion: v1
kind: Pod
metadata:
  name: train-0
  annotations: {scheduling.k8s.io/group-name: train}
spec:
  containers: [{name: c, resources: {requests: {cpu: "1"}}}]
"""


def test_a_pod_groups_network_topology_reaches_its_job_as_a_volcano_jobs_does() -> None:
    event = parse(POD_GROUP.replace("{NETWORK}", "{highestTierAllowed: 1}")).objects[0].event
    assert isinstance(event, JobSubmitted)
    assert event.data.network_topology == NetworkTopologySpec(mode="hard", highest_tier_allowed=1)
    warned = parse(POD_GROUP.replace("{NETWORK}", "{mode: hard}"))
    assert [w.field for w in warned.warnings] == ["spec.networkTopology"]
    (error,) = errors_of(POD_GROUP.replace("{NETWORK}", "{highestTierAllowed: 1, highestTierName: leaf}"))
    assert "cannot be set simultaneously" in error
