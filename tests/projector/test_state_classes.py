"""The classes the fold builds per event spell out ``__init__`` (projector/state.py): it must
behave as the one ``@dataclass`` would generate, in the compiled and the interpreted form."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from projector.fold import FoldOutcome, apply
from projector.state import ClusterState, JobState, NodeState, SessionRecord, TaskState, VoidedDecision
from tests.projector.streams import event_stream

SPELLED_OUT: tuple[type[Any], ...] = (
    FoldOutcome,
    NodeState,
    TaskState,
    JobState,
    VoidedDecision,
    SessionRecord,
)


@pytest.mark.parametrize("cls", SPELLED_OUT, ids=lambda cls: cls.__name__)
def test_init_takes_the_fields_in_order_with_their_defaults(cls: type[Any]) -> None:
    parameters = list(inspect.signature(cls).parameters.values())
    fields = dataclasses.fields(cls)
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        assert parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, field.name
        if field.default is not dataclasses.MISSING:
            assert parameter.default == field.default, field.name
        elif field.default_factory is not dataclasses.MISSING:
            assert parameter.default is None, field.name  # None: a new value from the factory
        else:
            assert parameter.default is inspect.Parameter.empty, field.name


def test_default_factories_give_each_instance_its_own_value() -> None:
    node = _instances()[NodeState]
    required = {
        f.name: getattr(node, f.name)
        for f in dataclasses.fields(NodeState)
        if f.name not in ("used", "tasks")
    }
    first, second = NodeState(**required), NodeState(**required)
    assert (first.used, first.tasks) == ({}, set())
    assert first.used is not second.used
    assert first.tasks is not second.tasks


@pytest.mark.parametrize("cls", SPELLED_OUT, ids=lambda cls: cls.__name__)
def test_instances_behave_as_dataclasses(cls: type[Any]) -> None:
    original = _instances()[cls]
    values = [getattr(original, f.name) for f in dataclasses.fields(cls)]
    by_position = cls(*values)
    by_name = cls(**{f.name: getattr(original, f.name) for f in dataclasses.fields(cls)})
    for built in (by_position, by_name):
        assert [getattr(built, f.name) for f in dataclasses.fields(cls)] == values
    assert repr(by_position) == repr(dataclasses.replace(original)) == repr(original)
    for twin in (by_position, dataclasses.replace(original), copy.copy(original), copy.deepcopy(original)):
        assert twin == original
    assert pickle.loads(pickle.dumps(original)) == original  # noqa: S301 - our own bytes
    assert dataclasses.asdict(original) == dataclasses.asdict(by_name)
    if cls.__hash__ is not None:  # unsafe_hash: FoldOutcome, VoidedDecision
        assert hash(by_position) == hash(original)
    with pytest.raises(AttributeError):
        original.not_a_field = 1


def test_a_folded_state_copies_and_pickles() -> None:
    state = _instances()[ClusterState]
    assert pickle.loads(pickle.dumps(state)) == state  # noqa: S301 - our own bytes
    assert copy.deepcopy(state) == state


def _instances() -> dict[type[Any], Any]:
    """One instance of each class, and the state, as folded from a generated stream."""
    state = ClusterState()
    found: dict[type[Any], Any] = {}
    for seq, event in enumerate(event_stream(3, 3000), start=1):
        outcome = apply(state, seq, event)
        if outcome.decisions:
            found[FoldOutcome] = outcome
    found[NodeState] = next(n for n in state.nodes.values() if n.tasks)
    found[TaskState] = next(t for t in state.tasks.values() if t.node is not None)
    found[JobState] = next(iter(state.jobs.values()))
    found[SessionRecord] = next(s for s in state.sessions.values() if s.voided)
    found[VoidedDecision] = found[SessionRecord].voided[0]
    found[ClusterState] = state
    return found
