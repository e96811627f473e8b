"""Issue 26's acceptance: ``tephra up`` configured only through environment variables exports one
trace per job's path to an OTLP/HTTP receiver, and serves Prometheus metrics that agree with
``tephra get``.

A real ``tephra up`` process and real ``tephra submit`` processes; the receiver decodes what they
export with ``opentelemetry-proto``.  One low-priority job is bound, then preempted by a
high-priority one, which is bound in turn.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from events.quantity import CPU, parse_resources
from scheduler.service.metrics import GPU
from tests.api.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.api.test_live_scheduling import NODE, SETUP, vcjob
from tests.api.test_up import (
    TEPHRA,
    data_dir,  # noqa: F401 - the fixture
    environment,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")


def _env(home: Path, receiver: OtlpReceiver) -> dict[str, str]:
    env = environment(home)
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_TRACES_SAMPLER="always_on",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=test",
        OTEL_BSP_SCHEDULE_DELAY="100",
        TEPHRA_METRICS_ADDR="127.0.0.1:0",
        TEPHRA_LOG_FORMAT="json",
    )
    env.pop("OTEL_SERVICE_NAME", None)
    env.pop("OTEL_SDK_DISABLED", None)
    return env


def _submit(home: Path, receiver: OtlpReceiver, name: str, text: str) -> None:
    path = home / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    result = subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, "submit", str(path)],
        env=_env(home, receiver),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def _get(home: Path, receiver: OtlpReceiver, kind: str) -> list[dict[str, object]]:
    result = subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
        [*TEPHRA, "get", kind, "-o", "json"],
        env=_env(home, receiver),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    items: list[dict[str, object]] = json.loads(result.stdout)["items"]
    return items


def _eventually(what: str, probe: Callable[[], T | str]) -> T:
    """``probe()`` until it returns something other than a string (a string says what is missing)."""
    deadline = time.monotonic() + 90
    while True:
        found = probe()
        if not isinstance(found, str):
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: {found}")
        time.sleep(0.3)


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local server
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our own local server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _one(spans: list[ReceivedSpan], name: str, count: int = 1, **attributes: object) -> ReceivedSpan | str:
    """The first of the ``count`` spans called ``name`` with ``attributes`` (a string: not so many)."""
    found = [
        s for s in spans if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    if len(found) != count:
        return f"{len(found)} spans {name} {attributes} among {sorted({s.name for s in spans})}"
    return found[0]


def _story(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan] | str:
    """Every span of both jobs' paths, checked for parents and links; what is missing otherwise."""
    by_id = {s.span_id: s for s in spans}
    story: dict[str, ReceivedSpan] = {}
    for key, name, attributes in [
        ("submit low", "tephra.submit", {"tephra.ref": "job/default/low"}),
        ("submit high", "tephra.submit", {"tephra.ref": "job/default/high"}),
        ("archive low", "tephra.archive tephra.job.submitted.v1", {"tephra.job": "default/low"}),
        ("archive high", "tephra.archive tephra.job.submitted.v1", {"tephra.job": "default/high"}),
        ("evict low", "tephra.sim evict", {"tephra.job": "default/low"}),
        ("bind high", "tephra.sim bind", {"tephra.job": "default/high"}),
        ("bind low", "tephra.sim bind", {"tephra.job": "default/low", "count": 2}),
        ("started high", "tephra.archive tephra.task.started.v1", {"tephra.job": "default/high"}),
        ("finished low", "tephra.archive tephra.task.finished.v1", {"tephra.job": "default/low"}),
    ]:
        span = _one(spans, name, **attributes)  # type: ignore[arg-type]
        if isinstance(span, str):
            return span
        story[key] = span
    for key in ("evict low", "bind high", "bind low"):
        session = by_id.get(story[key].parent_span_id)
        if session is None:
            return f"the session span, parent of {key}, has not arrived"
        story[f"session of {key}"] = session
    return story


def test_one_trace_per_job_path_and_metrics_that_agree_with_tephra_get(data_dir: Path) -> None:  # noqa: F811 - the fixture
    with otlp_receiver() as receiver:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
            [*TEPHRA, "up"],
            env=_env(data_dir, receiver),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output: list[str] = []
        # Drained all along: a full pipe would block the process's logging.
        reader = threading.Thread(target=lambda: output.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
        reader.start()
        try:
            (metrics_url,) = _eventually(
                "tephra up prints where its metrics are",
                lambda: next(
                    (
                        (m[1],)
                        for line in list(output)
                        if (m := re.search(r"metrics on (http://\S+)/metrics", line))
                    ),
                    f"not yet; output so far: {''.join(output)[-2000:]}",
                ),
            )
            assert _status(f"{metrics_url}/healthz") == 200
            nodes = "---\n".join(NODE.format(name=name) for name in ("gpu-1", "gpu-2"))
            _submit(data_dir, receiver, "setup", SETUP + "---\n" + nodes)
            # Three of each node's four GPUs; high needs two on one node: one of low's tasks goes.
            _submit(data_dir, receiver, "low", vcjob("low", replicas=2, gpu=3, priority="low"))
            _eventually("low runs", lambda: _phase(data_dir, receiver, "default/low", "Running"))
            _submit(data_dir, receiver, "high", vcjob("high", replicas=1, gpu=2, priority="high"))
            _eventually("high runs", lambda: _phase(data_dir, receiver, "default/high", "Running"))

            story = _eventually("both jobs' spans arrive", lambda: _story(receiver.snapshot()))
            _assert_trace(story, receiver.snapshot())
            # replay explain names the trace the job's story starts in, read from the archive.
            explained = subprocess.run(
                [sys.executable, "-m", "replay.cli", "explain", "default/high", "--format", "json"],
                env=_env(data_dir, receiver),
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            assert json.loads(explained.stdout)["traceId"] == story["submit high"].trace_id
            _assert_metrics(data_dir, receiver, metrics_url)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            reader.join(timeout=10)
            proc.stdout.close()  # type: ignore[union-attr]
        assert proc.returncode == 0, "".join(output)[-5000:]
    # TEPHRA_LOG_FORMAT=json: the services' log lines are JSON objects; one INFO line per session.
    logged = [json.loads(line) for line in output if line.startswith("{")]
    sessions = [
        r for r in logged if r["logger"] == "tephra.scheduler" and r["message"].startswith("session ")
    ]
    assert sessions, "".join(output)[-5000:]
    assert {r["level"] for r in sessions} == {"INFO"}


def _phase(home: Path, receiver: OtlpReceiver, job: str, phase: str) -> bool | str:
    jobs = {j["id"]: j for j in _get(home, receiver, "jobs")}
    return True if job in jobs and jobs[job]["phase"] == phase else f"{job}: {jobs.get(job)}"


def _assert_trace(story: dict[str, ReceivedSpan], spans: list[ReceivedSpan]) -> None:
    submit_low, submit_high = story["submit low"], story["submit high"]
    assert {submit_low.service, submit_high.service} == {"tephra-submit"}
    # The projector's archive span continues the producer's trace.
    for job in ("low", "high"):
        archive, submit = story[f"archive {job}"], story[f"submit {job}"]
        assert (archive.trace_id, archive.parent_span_id) == (submit.trace_id, submit.span_id)
        assert archive.service == "tephra"
        assert archive.resource["deployment.environment"] == "test"  # OTEL_RESOURCE_ATTRIBUTES
    # The session that evicted low links to the submissions of the victim and of the preemptor,
    # and has a child per action; the eviction is executed inside its trace and the TaskFinished
    # archived as the eviction's child.
    evicting = story["session of evict low"]
    assert evicting.name == "tephra.session"
    linked = {(trace_id, span_id) for trace_id, span_id, _ in evicting.links}
    assert {(submit_low.trace_id, submit_low.span_id), (submit_high.trace_id, submit_high.span_id)} <= linked
    children = sorted(s.name for s in spans if s.parent_span_id == evicting.span_id)
    # The projector archived the commit as the session's child, the simulated cluster executed it.
    assert {"tephra.archive tephra.session.committed.v1", "tephra.sim evict"} <= set(children)
    actions = [name for name in children if name.startswith("tephra.action")]
    assert actions == sorted(f"tephra.action {a}" for a in ("enqueue", "allocate", "preempt", "backfill"))
    evict = story["evict low"]
    assert evict.trace_id == evicting.trace_id
    assert [link[:2] for link in evict.links] == [(submit_low.trace_id, submit_low.span_id)]
    assert story["finished low"].parent_span_id == evict.span_id
    # High is bound by a later session (after the eviction freed its GPUs), linked to its submission;
    # the binding executes in that session's trace and TaskStarted is archived as its child.
    binding = story["session of bind high"]
    assert binding.name == "tephra.session"
    assert (submit_high.trace_id, submit_high.span_id) in {link[:2] for link in binding.links}
    bind = story["bind high"]
    assert (bind.trace_id, story["started high"].parent_span_id) == (binding.trace_id, bind.span_id)
    assert story["session of bind low"].name == "tephra.session"
    # Low's first binding was decided in another session than its eviction.
    assert story["session of bind low"].span_id != evicting.span_id


def _assert_metrics(home: Path, receiver: OtlpReceiver, url: str) -> None:
    def agreeing() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | str:
        samples = _scrape(f"{url}/metrics")
        (queue,) = _get(home, receiver, "queues")
        jobs = _get(home, receiver, "jobs")
        nodes = {n["name"]: parse_resources(n["used"]) for n in _get(home, receiver, "nodes")}  # type: ignore[arg-type]
        allocated = parse_resources(queue["allocated"])  # type: ignore[arg-type]
        gpus = float(allocated.get(GPU, 0))
        in_queue = (("queue_name", "default"),)
        expected = {
            ("volcano_queue_allocated_scalar_resources", (*in_queue, ("resource", GPU))): gpus,
            ("volcano_queue_allocated_milli_cpu", in_queue): float(allocated.get(CPU, 0)),
            ("tephra_gpu_allocatable", (("node", "gpu-1"),)): 4.0,
            ("volcano_queue_weight", in_queue): float(queue["weight"]),  # type: ignore[arg-type]
        }
        for node, used in nodes.items():
            in_node = (("node", str(node)), ("queue", "default"))
            expected[("tephra_gpu_allocated", in_node)] = float(used.get(GPU, 0))
        codes = [str(j["pendingReasons"][0]["code"]) for j in jobs if j.get("pendingReasons")]  # type: ignore[index]
        if not codes:
            return f"no pending job in {jobs}"
        for code in codes:
            expected[("tephra_pending_jobs", (("code", code),))] = float(codes.count(code))
        exported = {key for key in samples if key[0] == "tephra_pending_jobs"}
        if exported != {key for key in expected if key[0] == "tephra_pending_jobs"}:
            return f"pending series {exported}, jobs {jobs}"
        wrong = {
            key: (samples.get(key), value) for key, value in expected.items() if samples.get(key) != value
        }
        return samples if not wrong else f"(scraped, expected): {wrong}"

    samples = _eventually("the metrics agree with tephra get", agreeing)
    assert samples[("volcano_eviction_transactions_total", (("action", "preempt"),))] == 1
    assert samples[("tephra_evictions_total", (("action", "preempt"),))] == 1
    assert samples[("tephra_sim_executed_total", (("kind", "evict"),))] == 1
    assert samples[("tephra_sim_executed_total", (("kind", "bind"),))] == 3
    assert samples[("volcano_total_preemption_attempts_total", ())] >= 1
    assert samples[("tephra_job_wait_seconds_count", (("queue", "default"),))] == 2
    assert samples[("volcano_e2e_job_scheduling_latency_milliseconds_count", ())] == 2
    assert (
        samples[("volcano_e2e_scheduling_latency_milliseconds_count", ())]
        == samples[("tephra_sessions_total", ())]
    )
    assert samples[("volcano_action_scheduling_latency_milliseconds_count", (("action", "preempt"),))] >= 1
    assert samples[("tephra_events_archived_total", ())] == samples[("tephra_projector_seq", ())] > 0
    assert samples[("tephra_leader_epoch", ())] >= 1
    assert samples[("tephra_scheduler_leading", ())] == 1
    assert _eventually("the stack is ready", lambda: True if _status(f"{url}/readyz") == 200 else "503")
