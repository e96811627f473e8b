"""The histories behind the golden archives, each a function of a fresh :class:`LiveRun`.

* ``gpu_cluster`` — two queues on four a100 nodes and two cpu nodes: a small
  training job binds, a 4x8-GPU gang stays Pending (only 3 nodes have 8 free
  GPUs once the others run), a high-priority job preempts low-priority work in
  its own queue, a training gang that needs more GPUs than its queue and the cluster have, tasks
  finish; preempt and reclaim are enabled.
* ``split_sessions`` — a burst of many small jobs whose first session is
  larger than a (deliberately small) message limit, so it is archived as
  SessionPart events plus the commit marker.
* ``divergent`` — ``gpu_cluster`` whose third session was recorded by "another
  core": two of its bindings are swapped.  ``replay verify`` must reject it
  with ``[REPLAY-DIVERGED]`` at that session and position.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from events.models import BindDecision, Decision
from tests.golden.history import LiveRun, gpu_node, job

__all__ = ["DIVERGED_AT", "SCENARIOS", "Scenario", "divergent", "gpu_cluster", "split_sessions"]

#: The session (0-based index) and decision position the divergent log tampers with.
DIVERGED_AT = (2, 0)


def gpu_cluster(run: LiveRun) -> None:
    run.configure_actions(["enqueue", "allocate", "preempt", "reclaim", "backfill"])
    run.priority_class("low", 10)
    run.priority_class("high", 1000)
    run.queue("research", weight=1)
    run.queue("training", weight=1, capability={"nvidia.com/gpu": 16})
    for i in range(1, 5):
        run.node(gpu_node(f"a100-{i}", 8, labels={"gpu-type": "a100"}))
    for i in range(1, 3):
        run.node(gpu_node(f"cpu-{i}", 0, cpu=32, mem_gi=128))
    run.tick()

    # Session 0: a low-priority research job takes 4 GPUs on one node each of two nodes.
    run.submit(
        job("sweep", queue="research", replicas=2, gpu=4, priority_class="low", selector={"gpu-type": "a100"})
    )
    run.submit(job("demo-training", queue="training", replicas=2, gpu=1, min_available=2))
    run.cycle()

    # Session 1: a gang that needs four whole a100 nodes; only two and a half are free.
    run.submit(
        job("llm-pretrain", queue="research", replicas=4, gpu=8, min_available=4, priority_class="low")
    )
    run.submit(job("etl", queue="training", replicas=3, cpu=8))
    run.cycle()

    # Session 2: more work; the divergent log tampers here.
    run.submit(job("finetune", queue="training", replicas=2, gpu=2, min_available=2))
    run.submit(job("notebook", queue="research", replicas=1, cpu=2))
    run.cycle()

    # Session 3: a high-priority job in research preempts the low-priority sweep.
    run.submit(
        job(
            "urgent-eval",
            queue="research",
            replicas=1,
            gpu=8,
            priority_class="high",
            selector={"gpu-type": "a100"},
        )
    )
    run.cycle()
    run.cycle()

    # Session 5: training asks for two whole nodes more than are free while etl finishes.
    run.submit(job("big-sweep", queue="training", replicas=2, gpu=8, min_available=2))
    for i in range(3):
        run.finish(f"ml/etl-worker-{i}", "ml/etl")
    run.cycle()
    run.cycle()


def split_sessions(run: LiveRun) -> None:
    run.max_message_bytes = 4_000
    run.queue("default")
    for i in range(1, 4):
        run.node(gpu_node(f"n{i}", 0, cpu=64, mem_gi=256))
    run.submit_all(job(f"batch-{i:02d}", queue="default", replicas=3, cpu=1) for i in range(20))
    run.cycle()
    run.submit_all(job(f"late-{i:02d}", queue="default", replicas=2, cpu=2) for i in range(5))
    run.cycle()


def _swap_first_two_binds(session: int, decisions: list[Decision]) -> list[Decision]:
    if session != DIVERGED_AT[0]:
        return decisions
    binds = [i for i, d in enumerate(decisions) if isinstance(d, BindDecision)]
    if len(binds) < 2:
        raise AssertionError("the divergent scenario needs two bindings in its tampered session")
    first, second = binds[0], binds[1]
    a, b = decisions[first], decisions[second]
    assert isinstance(a, BindDecision)
    assert isinstance(b, BindDecision)
    if a.node == b.node:
        raise AssertionError("swapping two bindings to the same node would not diverge")
    out = list(decisions)
    out[first] = a.model_copy(update={"node": b.node})
    out[second] = b.model_copy(update={"node": a.node})
    return out


def divergent(run: LiveRun) -> None:
    run.tamper = _swap_first_two_binds
    gpu_cluster(run)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    build: Callable[[LiveRun], None]
    #: What ``replay verify`` must say: None for a good archive, else the code.
    expect_code: str | None = None


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("gpu_cluster", gpu_cluster),
    Scenario("split_sessions", split_sessions),
    Scenario("divergent", divergent, "REPLAY-DIVERGED"),
)
