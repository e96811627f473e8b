"""``tephra simulate``: run scenario files through the pure session engine.

``simulate_scenario`` is the one code path shared by the CLI and the
conformance tests: load, run ``sessions`` sessions with :func:`advance`
between them, and build the JSON document of conformance/README.md.  The
document's key order is fixed and every list is in decision (or sorted)
order, so the output is byte-identical across processes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.core.decisions import Bind, Enqueue, Evict
from scheduler.core.session import advance, run_session
from scheduler.scenario import ScenarioError, load_scenario

__all__ = ["SIMULATION_EPOCH", "render_json", "simulate_command", "simulate_scenario"]

#: ``now`` of the first session when a scenario gives none; one second per session after it.
SIMULATION_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def simulate_scenario(
    path: Path | str, sessions: int | None = None, warnings: list[str] | None = None
) -> dict[str, Any]:
    """The JSON document of one scenario; its load warnings are appended to ``warnings`` if given."""
    scenario = load_scenario(path)
    if warnings is not None:
        warnings.extend(scenario.warnings)
    count = sessions if sessions is not None else scenario.sessions
    start = scenario.now or SIMULATION_EPOCH
    snapshot = scenario.snapshot
    out: list[dict[str, Any]] = []
    for index in range(count):
        result = run_session(snapshot, scenario.config, start + timedelta(seconds=index))
        out.append(
            {
                "index": index,
                "bindings": [
                    {"task": d.task, "job": d.job, "node": d.node}
                    for d in result.decisions
                    if isinstance(d, Bind)
                ],
                "evictions": [
                    {
                        "task": d.task,
                        "job": d.job,
                        "node": d.node,
                        "action": d.action,
                        "preemptor": d.preemptor_job,
                    }
                    for d in result.decisions
                    if isinstance(d, Evict)
                ],
                "pipelined": [{"task": p.task, "job": p.job, "node": p.node} for p in result.pipelined],
                "enqueued": [d.job for d in result.decisions if isinstance(d, Enqueue)],
                "phases": {job: result.phases[job] for job in sorted(result.phases)},
                "pending": [
                    {
                        "job": job,
                        "reasons": [{"code": r.code, "message": r.message} for r in reasons],
                    }
                    for job, reasons in sorted(result.pending.items())
                ],
            }
        )
        snapshot = advance(snapshot, result)
    return {"scenario": scenario.name, "sessions": out}


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def _render_table(document: dict[str, Any]) -> None:
    # rich is only needed for the table; JSON runs (tests, checker) skip importing it.
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    console = Console()
    console.print(f"[bold]scenario {document['scenario']}[/bold]")
    for session in document["sessions"]:
        table = Table(title=f"session {session['index']}", show_lines=False)
        table.add_column("decision")
        table.add_column("task / job", overflow="fold")
        table.add_column("node")
        table.add_column("detail")
        for job in session["enqueued"]:
            table.add_row("enqueue", job, "", "")
        for b in session["bindings"]:
            table.add_row("bind", b["task"], b["node"], b["job"])
        for e in session["evictions"]:
            table.add_row(e["action"], e["task"], e["node"], f"for {e['preemptor']}")
        for p in session["pipelined"]:
            table.add_row("pipelined", p["task"], p["node"], p["job"])
        for pending in session["pending"]:
            for i, r in enumerate(pending["reasons"]):
                table.add_row(
                    "pending" if i == 0 else "",
                    pending["job"] if i == 0 else "",
                    "",
                    f"{r['code']}: {r['message']}",
                )
        console.print(table)
        phases = ", ".join(f"{k}={v}" for k, v in session["phases"].items())
        console.print(f"phases: {phases}")


def simulate_command(files: Sequence[Path], output_format: str = "table", sessions: int | None = None) -> int:
    """Exit 0 on success, 2 on a bad file or argument."""
    if output_format not in ("table", "json"):
        print(f"tephra simulate: -o/--output must be table or json, got {output_format!r}", file=sys.stderr)
        return 2
    if sessions is not None and sessions < 1:
        print("tephra simulate: --sessions must be at least 1", file=sys.stderr)
        return 2
    documents = []
    warnings: list[str] = []
    for path in files:
        try:
            documents.append(simulate_scenario(path, sessions, warnings))
        except ScenarioError as exc:
            print(f"tephra simulate: {exc}", file=sys.stderr)
            return 2
    for warning in warnings:  # stderr: the JSON on stdout keeps the conformance format
        print(f"tephra simulate: warning: {warning}", file=sys.stderr)
    for document in documents:
        if output_format == "json":
            sys.stdout.write(render_json(document) + "\n")
        else:
            _render_table(document)
    return 0
