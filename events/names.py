"""Object names as Kubernetes requires them (RFC 1123), checked the same way at every door.

A name that Kubernetes would refuse cannot become a pod, a node or a queue
there, so Tephra refuses it too, wherever an event comes in: ``tephra
submit`` (:mod:`api.manifests`) and the projector, for raw events
(``invalid-name``).  Two rules, as the Kubernetes API uses them:

* a *DNS label* (job and task names, namespaces): at most 63 lowercase
  letters, digits and ``-``, starting and ending with a letter or digit;
* a *DNS subdomain* (queues, priority classes, nodes): at most 253 of those
  and ``.``, each dot-separated part a label.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Final

from events.models import (
    Event,
    HyperNodeDeleted,
    HyperNodeUpserted,
    JobSubmitted,
    NodeRemoved,
    NodeReported,
    PriorityClassUpserted,
    QueueDeleted,
    QueueUpserted,
)

__all__ = ["DNS_LABEL", "DNS_SUBDOMAIN", "dns_label", "invalid_name", "is_dns_label", "is_dns_subdomain"]

DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", re.ASCII)
DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*", re.ASCII
)
_SUBDOMAIN_MAX: Final = 253


def is_dns_label(name: str) -> bool:
    return DNS_LABEL.fullmatch(name) is not None


def dns_label(name: str) -> str:
    """``name`` when it is a DNS label, else a label made of its head and a digest of it (a job's
    name, from a PodGroup's or Pod's, which may be a subdomain: the same at every door)."""
    if is_dns_label(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    head = "".join(c if c.isalnum() or c == "-" else "-" for c in name.lower()[:40]).strip("-")
    return f"{head}-{digest}" if head else f"x{digest}"


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= _SUBDOMAIN_MAX and DNS_SUBDOMAIN.fullmatch(name) is not None


def _names(event: Event) -> Iterator[tuple[str, str, bool]]:
    """(field path, name, whether a label is required) for each name an event gives an object."""
    match event:
        case JobSubmitted(data=job):
            yield "data.namespace", job.namespace, True
            yield "data.name", job.name, True
            yield "data.queue", job.queue, False
            if job.priority_class is not None:
                yield "data.priority_class", job.priority_class, False
            for index, task in enumerate(job.tasks):
                yield f"data.tasks[{index}].name", task.name, True
                for pod, pod_name in enumerate(task.pod_names):
                    yield f"data.tasks[{index}].pod_names[{pod}]", pod_name, False
                if task.priority_class is not None:
                    yield f"data.tasks[{index}].priority_class", task.priority_class, False
        case QueueUpserted(data=queue):
            yield "data.name", queue.name, False
            if queue.parent is not None:
                yield "data.parent", queue.parent, False
        case QueueDeleted(data=queue):
            yield "data.name", queue.name, False
        case PriorityClassUpserted(data=priority_class):
            yield "data.name", priority_class.name, False
        case NodeReported(data=node) | NodeRemoved(data=node):
            yield "data.name", node.name, False
        case HyperNodeUpserted(data=hypernode) | HyperNodeDeleted(data=hypernode):
            yield "data.name", hypernode.name, False
        case _:
            # The other events name objects that one of these created (the fold checks the reference).
            return


def invalid_name(event: Event) -> str | None:
    """Why one of the names ``event`` gives is not one Kubernetes accepts; None when all are."""
    for path, name, label in _names(event):
        if label and not is_dns_label(name):
            return (
                f"{path}: {name!r} is not a DNS-1123 label (at most 63 lowercase letters, digits"
                " and '-', starting and ending with a letter or digit)"
            )
        if not label and not is_dns_subdomain(name):
            return (
                f"{path}: {name!r} is not a DNS-1123 subdomain (at most 253 lowercase letters,"
                " digits, '-' and '.', each part starting and ending with a letter or digit)"
            )
    return None
