"""The scheduling-relevant parts of a Kubernetes pod spec, read the same way by every door.

``tephra submit`` (``api/manifests.py``) and ``tephra simulate``
(``scheduler/scenario.py``) both read pod templates through this module, so a
manifest requests the same resources whichever door it comes through.  What it
reproduces from Kubernetes:

* **requests defaulted from limits, per resource** (the API server's
  ``SetDefaults_ResourceRequirements``): ``requests: {cpu: 1}`` with
  ``limits: {nvidia.com/gpu: 1}`` requests one GPU;
* **the effective pod request** (``resourcehelper.PodRequests``, which
  Volcano's ``GetPodResourceRequest`` calls): per resource
  ``max(largest init container, sum of containers) + overhead``;
* **whole extended resources**: an extended resource (a name with a domain
  prefix other than ``kubernetes.io``, e.g. ``nvidia.com/gpu``) must be an
  integer, as the API server's ``ValidateResourceQuantityValue`` refuses
  ``500m`` ("must be an integer");
* ``schedulingGates``: their names, in order (a gated pod is not placed);
* ``matchFields`` of node selector terms (``metadata.name`` only);
* required pod affinity and anti-affinity terms and ``topologySpreadConstraints``
  (:func:`pod_constraints`), and the labels Volcano's job controller puts on a job's
  pods (:func:`job_pod_labels`);
* the VolcanoJob fields that are accepted with a warning because they have no
  effect on scheduling (:func:`ignored_job_fields`).

Problems raise :class:`PodSpecError` with the field path, what was expected and
what was given; each door turns it into its own error type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from events.quantity import QuantityError, parse_quantity
from scheduler.core.snapshot import (
    LabelSelector,
    NodeSelectorRequirement,
    PodAffinityTerm,
    TopologySpreadConstraint,
)

__all__ = [
    "MISSING",
    "NODE_NAME_FIELD",
    "PodConstraints",
    "PodSpecError",
    "ignored_job_fields",
    "ignored_pod_fields",
    "is_extended_resource",
    "job_pod_labels",
    "match_fields",
    "pod_constraints",
    "pod_requests",
    "scheduling_gates",
]

#: ``PodSpecError.got`` when there is no offending value to show.
MISSING: Final[Any] = object()


@dataclass(frozen=True)
class PodSpecError(Exception):
    path: str
    expected: str
    got: Any = MISSING

    def __str__(self) -> str:
        got = "" if self.got is MISSING else f", got {self.got!r}"
        return f"{self.path}: {self.expected}{got}"


def is_extended_resource(name: str) -> bool:
    """Kubernetes' ``IsExtendedResourceName``: a prefixed name outside ``kubernetes.io``."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(path, "expected a mapping", value)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSpecError(path, "expected a list", value)
    return value


def _at(path: str, key: str) -> str:
    return f'{path}["{key}"]' if "/" in key or "." in key else f"{path}.{key}"


def _quantities(value: Any, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, quantity in _mapping(value, path).items():
        if not isinstance(name, str):
            raise PodSpecError(path, "expected resource names as strings", name)
        try:
            amount = parse_quantity(name, quantity)
        except QuantityError as exc:
            raise PodSpecError(
                _at(path, name),
                f"expected a Kubernetes quantity such as '500m', '2' or '8Gi' ({exc.why})",
                quantity,
            ) from None
        if is_extended_resource(name) and _fractional(name, quantity):
            raise PodSpecError(
                _at(path, name), "expected a whole number: an extended resource must be an integer", quantity
            )
        out[name] = amount
    return out


def _fractional(name: str, quantity: Any) -> bool:
    """Whether the quantity is not a whole count (``500m``, ``0.5``): parse_quantity rounds those up."""
    try:
        return parse_quantity("cpu", quantity) % 1000 != 0  # millis of the same quantity
    except QuantityError:
        return False


def _container_requests(container: Any, path: str) -> dict[str, int]:
    resources = _mapping(_mapping(container, path).get("resources"), f"{path}.resources")
    limits = _quantities(resources.get("limits"), f"{path}.resources.limits")
    requests = _quantities(resources.get("requests"), f"{path}.resources.requests")
    return limits | requests  # each missing request defaults to its limit


def pod_requests(spec: Mapping[str, Any], path: str) -> dict[str, int]:
    """The pod's effective request per resource (no ``pods`` unit), keys sorted."""
    total: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("containers"), f"{path}.containers")):
        for name, amount in _container_requests(container, f"{path}.containers[{i}]").items():
            total[name] = total.get(name, 0) + amount
    for i, container in enumerate(_list(spec.get("initContainers"), f"{path}.initContainers")):
        for name, amount in _container_requests(container, f"{path}.initContainers[{i}]").items():
            total[name] = max(total.get(name, 0), amount)
    for name, amount in _quantities(spec.get("overhead"), f"{path}.overhead").items():
        total[name] = total.get(name, 0) + amount
    return dict(sorted(total.items()))


def scheduling_gates(spec: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """The names of the pod's ``schedulingGates`` in order; a pod with any is not placed."""
    gates: list[str] = []
    for i, raw in enumerate(_list(spec.get("schedulingGates"), f"{path}.schedulingGates")):
        name = _mapping(raw, f"{path}.schedulingGates[{i}]").get("name")
        if not isinstance(name, str) or not name:
            raise PodSpecError(f"{path}.schedulingGates[{i}].name", "expected a non-empty string", name)
        if name in gates:
            raise PodSpecError(f"{path}.schedulingGates[{i}].name", "expected unique gate names", name)
        gates.append(name)
    return tuple(gates)


#: The only node field Kubernetes lets ``matchFields`` select on.
NODE_NAME_FIELD: Final = "metadata.name"


def match_fields(term: Mapping[str, Any], path: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """A node selector term's ``matchFields`` as ``(key, operator, values)``, validated as the API
    server validates them (``ValidateNodeFieldSelectorRequirement``): key ``metadata.name``,
    operator ``In`` or ``NotIn``, exactly one value."""
    out: list[tuple[str, str, tuple[str, ...]]] = []
    for i, raw in enumerate(_list(term.get("matchFields"), f"{path}.matchFields")):
        where = f"{path}.matchFields[{i}]"
        item = _mapping(raw, where)
        if item.get("key") != NODE_NAME_FIELD:
            raise PodSpecError(
                f"{where}.key", f"expected {NODE_NAME_FIELD} (the only node field)", item.get("key")
            )
        if item.get("operator") not in ("In", "NotIn"):
            raise PodSpecError(f"{where}.operator", "expected In or NotIn", item.get("operator"))
        values = _list(item.get("values"), f"{where}.values")
        if len(values) != 1 or not isinstance(values[0], str) or not values[0]:
            raise PodSpecError(f"{where}.values", "expected exactly one node name", values)
        out.append((NODE_NAME_FIELD, str(item["operator"]), (values[0],)))
    return tuple(out)


#: The labels Volcano's job controller (``createJobPod``) sets on every pod of a VolcanoJob.
JOB_NAME_LABEL: Final = "volcano.sh/job-name"
JOB_NAMESPACE_LABEL: Final = "volcano.sh/job-namespace"
QUEUE_NAME_LABEL: Final = "volcano.sh/queue-name"
TASK_SPEC_LABEL: Final = "volcano.sh/task-spec"


#: The job-level label Volcano's job controller copies over the template's.
PREEMPTABLE_LABEL: Final = "volcano.sh/preemptable"


def job_pod_labels(
    template_labels: Mapping[str, str],
    *,
    job_labels: Mapping[str, str],
    job: str,
    namespace: str,
    queue: str,
    task: str,
) -> dict[str, str]:
    """A VolcanoJob pod's labels: its template's, the job's ``volcano.sh/preemptable`` over
    them, then the controller's own keys (which win).  The per-replica
    ``volcano.sh/task-index`` is left out: a task's replicas share one spec."""
    labels = dict(template_labels)
    if PREEMPTABLE_LABEL in job_labels:
        labels[PREEMPTABLE_LABEL] = job_labels[PREEMPTABLE_LABEL]
    labels |= {
        JOB_NAME_LABEL: job,
        JOB_NAMESPACE_LABEL: namespace,
        QUEUE_NAME_LABEL: queue,
        TASK_SPEC_LABEL: task,
    }
    return dict(sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """A pod's placement constraints on other pods (the required ones; preferred terms are
    warned about by :func:`ignored_pod_fields`)."""

    affinity: tuple[PodAffinityTerm, ...] = ()
    anti_affinity: tuple[PodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()


_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise PodSpecError(path, "expected a non-empty string", value)
    return value


def label_selector(value: Any, path: str) -> LabelSelector | None:
    """A ``metav1.LabelSelector`` as the API server validates it; absent is None (no pod)."""
    if value is None:
        return None
    raw = _mapping(value, path)
    unknown = sorted(set(raw) - {"matchLabels", "matchExpressions"})
    if unknown:
        raise PodSpecError(f"{path}.{unknown[0]}", "expected only matchLabels and matchExpressions")
    labels = _mapping(raw.get("matchLabels"), f"{path}.matchLabels")
    for key, label in labels.items():
        if not isinstance(label, str):
            raise PodSpecError(_at(f"{path}.matchLabels", str(key)), "expected a string", label)
    expressions: list[NodeSelectorRequirement] = []
    for i, item in enumerate(_list(raw.get("matchExpressions"), f"{path}.matchExpressions")):
        where = f"{path}.matchExpressions[{i}]"
        req = _mapping(item, where)
        key = _string(req.get("key"), f"{where}.key")
        operator = req.get("operator")
        if operator not in _SELECTOR_OPERATORS:
            raise PodSpecError(f"{where}.operator", "expected In, NotIn, Exists or DoesNotExist", operator)
        values = [
            _string(v, f"{where}.values[{j}]")
            for j, v in enumerate(_list(req.get("values"), f"{where}.values"))
        ]
        if operator in ("In", "NotIn") and not values:
            raise PodSpecError(f"{where}.values", f"expected at least one value for {operator}", values)
        if operator in ("Exists", "DoesNotExist") and values:
            raise PodSpecError(f"{where}.values", f"expected no values for {operator}", values)
        expressions.append(NodeSelectorRequirement(key, str(operator), tuple(values)))
    return LabelSelector(
        match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        match_expressions=tuple(expressions),
    )


def _affinity_terms(value: Any, path: str) -> tuple[PodAffinityTerm, ...]:
    terms: list[PodAffinityTerm] = []
    for i, item in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        raw = _mapping(item, where)
        for unsupported in ("namespaceSelector", "matchLabelKeys", "mismatchLabelKeys"):
            if raw.get(unsupported) not in (None, [], {}):
                raise PodSpecError(
                    f"{where}.{unsupported}",
                    "not supported by Tephra (it has no namespace labels and no pod-template hashes); "
                    "list the namespaces and select by labels",
                    raw[unsupported],
                )
        namespaces = [
            _string(n, f"{where}.namespaces[{j}]")
            for j, n in enumerate(_list(raw.get("namespaces"), f"{where}.namespaces"))
        ]
        terms.append(
            PodAffinityTerm(
                topology_key=_string(raw.get("topologyKey"), f"{where}.topologyKey"),
                selector=label_selector(raw.get("labelSelector"), f"{where}.labelSelector"),
                namespaces=tuple(sorted(set(namespaces))),
            )
        )
    return tuple(terms)


def _spread_constraints(value: Any, path: str) -> tuple[TopologySpreadConstraint, ...]:
    out: list[TopologySpreadConstraint] = []
    for i, item in enumerate(_list(value, path)):
        where = f"{path}[{i}]"
        raw = _mapping(item, where)
        skew = raw.get("maxSkew")
        if not isinstance(skew, int) or isinstance(skew, bool) or skew < 1:
            raise PodSpecError(f"{where}.maxSkew", "expected an integer of at least 1", skew)
        when = raw.get("whenUnsatisfiable")
        if when not in ("DoNotSchedule", "ScheduleAnyway"):
            raise PodSpecError(f"{where}.whenUnsatisfiable", "expected DoNotSchedule or ScheduleAnyway", when)
        min_domains = raw.get("minDomains")
        if min_domains is not None:
            if not isinstance(min_domains, int) or isinstance(min_domains, bool) or min_domains < 1:
                raise PodSpecError(f"{where}.minDomains", "expected an integer of at least 1", min_domains)
            if when != "DoNotSchedule":
                raise PodSpecError(
                    f"{where}.minDomains", "expected only with whenUnsatisfiable DoNotSchedule", min_domains
                )
        # Kubernetes' defaults (Honor node affinity, Ignore taints) are what Tephra counts by.
        for key, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            if raw.get(key) not in (None, default):
                raise PodSpecError(
                    f"{where}.{key}", f"only {default} (the default) is supported by Tephra", raw[key]
                )
        if raw.get("matchLabelKeys") not in (None, []):
            raise PodSpecError(f"{where}.matchLabelKeys", "not supported by Tephra", raw["matchLabelKeys"])
        out.append(
            TopologySpreadConstraint(
                max_skew=skew,
                topology_key=_string(raw.get("topologyKey"), f"{where}.topologyKey"),
                when_unsatisfiable=str(when),
                selector=label_selector(raw.get("labelSelector"), f"{where}.labelSelector"),
                min_domains=min_domains,
            )
        )
    return tuple(out)


def pod_constraints(spec: Mapping[str, Any], path: str) -> PodConstraints:
    """The pod's required pod (anti-)affinity terms and its topology spread constraints."""
    affinity = _mapping(spec.get("affinity"), f"{path}.affinity")
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    terms: list[tuple[PodAffinityTerm, ...]] = []
    for kind in ("podAffinity", "podAntiAffinity"):
        where = f"{path}.affinity.{kind}"
        terms.append(
            _affinity_terms(_mapping(affinity.get(kind), where).get(required), f"{where}.{required}")
        )
    return PodConstraints(
        affinity=terms[0],
        anti_affinity=terms[1],
        topology_spread=_spread_constraints(
            spec.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints"
        ),
    )


#: VolcanoJob fields that Volcano's job controller acts on and Tephra's scheduling does not:
#: accepted with a warning naming their path (never silently).
_NO_EFFECT_JOB_FIELDS: Final = {
    "policies": "lifecycle policies (restart/abort on events) are not run by Tephra",
    "maxRetry": "job restarts are not run by Tephra",
}
_NO_EFFECT_TASK_FIELDS: Final = {
    "policies": "lifecycle policies (restart/abort on events) are not run by Tephra",
    "maxRetry": "task restarts are not run by Tephra",
    "dependsOn": "task dependencies are the job controller's; all tasks are created at once",
}


def ignored_job_fields(spec: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """``(path, why)`` for each field of a VolcanoJob ``spec`` that has no effect in Tephra."""
    out = [
        (f"{path}.{key}", f"accepted, no effect: {why}")
        for key, why in _NO_EFFECT_JOB_FIELDS.items()
        if spec.get(key) not in (None, [], {})
    ]
    tasks = spec.get("tasks")
    for i, task in enumerate(tasks if isinstance(tasks, list) else []):
        if isinstance(task, Mapping):
            out.extend(
                (f"{path}.tasks[{i}].{key}", f"accepted, no effect: {why}")
                for key, why in _NO_EFFECT_TASK_FIELDS.items()
                if task.get(key) not in (None, [], {})
            )
    return out


def ignored_pod_fields(spec: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """``(path, why)`` for each scheduling field of a pod ``spec`` that Tephra does not honour."""
    out: list[tuple[str, str]] = []
    affinity = spec.get("affinity")
    affinity = affinity if isinstance(affinity, Mapping) else {}
    for other in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(other)
        if isinstance(terms, Mapping) and terms.get("preferredDuringSchedulingIgnoredDuringExecution"):
            out.append(
                (
                    f"{path}.affinity.{other}.preferredDuringSchedulingIgnoredDuringExecution",
                    "not supported by Tephra; ignored (the required terms are honoured)",
                )
            )
    node_affinity = affinity.get("nodeAffinity")
    if isinstance(node_affinity, Mapping) and node_affinity.get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ):
        out.append(
            (
                f"{path}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
                "not supported by Tephra; ignored",
            )
        )
    return out
