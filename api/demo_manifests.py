"""The manifests ``tephra demo`` submits, in the order it submits them.

They are the seed articles' examples on a small GPU cluster: three nodes with
8 GPUs each (24 in all).

1. ``cluster``: the nodes, two queues, the article's PriorityClasses and a
   scheduler configuration with ``preempt`` enabled (Volcano's Helm tiers).
2. ``workloads``: the article's minimal ``demo-training`` job (2 workers x
   1 GPU, minAvailable 2) in queue ``default``; a low-priority
   ``batch-inference`` job (3 x 6 GPU, minAvailable 1) in queue ``training``;
   and ``llm-pretrain``, the 4 machines x 8 GPU gang (minAvailable 4) that
   cannot fit in 24 GPUs.
3. ``urgent``: ``urgent-train`` (high priority, 1 x 4 GPU) arrives when no
   node has 4 free GPUs, so it preempts one ``batch-inference`` pod in its
   queue (Volcano's preempt is intra-queue, so ``demo-training`` in queue
   ``default`` is never a victim).
"""

from __future__ import annotations

__all__ = ["CLUSTER", "STAGES", "URGENT", "WORKLOADS"]

_NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{gpu-type: a100}}
status:
  allocatable: {{cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110"}}
"""

CLUSTER = (
    "\n---\n".join(_NODE.format(name=f"gpu-{i}") for i in (1, 2, 3))
    + """
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: training}
spec: {weight: 3}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority}
value: 1000
description: urgent training
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low-priority}
value: 100
description: batch work that may be preempted
---
apiVersion: tephra.dev/v1alpha1
kind: SchedulerConfiguration
metadata: {name: demo}
spec:
  actions: "enqueue, allocate, preempt, backfill"
  tiers:
    - plugins:
        - name: priority
        - name: gang
          enablePreemptable: false
        - name: conformance
    - plugins:
        - name: overcommit
        - name: drf
          enablePreemptable: false
        - name: predicates
        - name: proportion
        - name: nodeorder
        - name: binpack
"""
)

WORKLOADS = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: demo-training}
spec:
  minAvailable: 2
  schedulerName: volcano
  queue: default
  tasks:
    - replicas: 2
      name: worker
      template:
        spec:
          containers:
            - name: trainer
              image: demo/trainer:latest
              resources:
                limits: {nvidia.com/gpu: 1}
          restartPolicy: Never
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: batch-inference}
spec:
  minAvailable: 1
  queue: training
  priorityClassName: low-priority
  tasks:
    - replicas: 3
      name: worker
      template:
        spec:
          containers:
            - name: infer
              image: demo/infer:latest
              resources:
                requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 6}
                limits: {nvidia.com/gpu: 6}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: llm-pretrain}
spec:
  minAvailable: 4
  queue: training
  tasks:
    - replicas: 4
      name: worker
      template:
        spec:
          containers:
            - name: trainer
              image: demo/trainer:latest
              resources:
                requests: {cpu: "32", memory: 256Gi, nvidia.com/gpu: 8}
                limits: {nvidia.com/gpu: 8}
"""

URGENT = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: urgent-train}
spec:
  minAvailable: 1
  queue: training
  priorityClassName: high-priority
  tasks:
    - replicas: 1
      name: worker
      template:
        spec:
          priorityClassName: high-priority
          containers:
            - name: trainer
              image: demo/trainer:latest
              resources:
                requests: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 4}
                limits: {nvidia.com/gpu: 4}
"""

#: (stage name, file name shown in messages, manifests)
STAGES: tuple[tuple[str, str, str], ...] = (
    ("cluster", "demo/cluster.yaml", CLUSTER),
    ("workloads", "demo/workloads.yaml", WORKLOADS),
    ("urgent", "demo/urgent.yaml", URGENT),
)
