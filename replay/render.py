"""How replay's answers look: rich text for people, stable JSON (and CSV) for tools.

Text goes through a :class:`rich.console.Console`, which drops colour and
styles by itself when the output is not a terminal; JSON is sorted and
indented so two runs over the same archive print the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from events.display import hidden, printable
from replay.actions import ActionRow, actions_to_csv
from replay.audit import EvictionRow, QueueShare, rows_to_csv
from replay.counterfactual import Counterfactual
from replay.explain import Explanation
from replay.quantities import detail_quantities
from replay.queries import SessionView
from replay.verify import VerifyReport

__all__ = ["detail_text", "dump_json", "print_audit", "print_explanation", "print_session", "print_verify"]


def _text(value: object) -> str:
    """A value from the archive as console text: control characters escaped (events.display),
    rich markup not read from it."""
    return escape(printable(value))


def dump_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
    if text.isascii() and "\x7f" not in text:
        return text
    # json escapes C0 itself; DEL, C1 and the invisible format characters it leaves raw.  They can
    # only stand inside strings, where a \u escape means the same character.
    return "".join(f"\\u{ord(c):04x}" if ord(c) >= 0x7F and hidden(c) else c for c in text)


def detail_text(detail: dict[str, Any]) -> str:
    """A reason's detail as ``key=value, ...`` (nested values in braces; whole floats as integers)."""

    def show(v: Any) -> str:
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {show(x)}" for k, x in sorted(v.items())) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(show(x) for x in v) + "]"
        return str(v)

    return ", ".join(f"{k}={show(v)}" for k, v in sorted(detail.items()))


def _print_header(console: Console, e: Explanation) -> None:
    facts = e.facts
    traced = "" if e.trace_id is None else f"  (trace id {_text(e.trace_id)})"
    console.print(f"[bold]Job {_text(e.job)}[/bold]{traced}")
    if not facts:
        return
    tasks = _text(", ".join(f"{n} {status}" for status, n in facts["tasks"].items()) or "none")
    start = facts["phaseAtStart"]
    phase = _text(facts["phase"]) + ("" if start == facts["phase"] else f" (was {_text(start)})")
    # The incarnation the session saw (a name is reused once its job finished).
    uid = "" if facts.get("uid") is None else f"uid {facts['uid']}, "
    console.print(
        f"  {uid}queue {_text(facts['queue'])}, phase {phase} after this session, "
        f"minAvailable {facts['minAvailable']}, tasks: {tasks}"
    )


def _print_blockers(console: Console, e: Explanation) -> None:
    check = (
        "[green]the recorded ones re-derived[/green]"
        if e.reasons_rederived
        else "[red]the re-run's differ from the recorded ones[/red]"
    )
    shown: list[dict[str, Any]] = (
        [b.to_json() for b in e.blockers]
        if e.blockers
        else [{**r, "detail": detail_quantities(r["detail"]), "hiddenBehind": None} for r in e.reasons]
    )
    if not shown:
        return
    console.print(f"  blocking reasons, most fundamental first ({check}):")
    for i, reason in enumerate(shown, 1):
        behind = reason["hiddenBehind"]
        hidden = "" if behind is None else f" [yellow](hidden behind {_text(behind)})[/yellow]"
        console.print(f"   {i}. [bold]{_text(reason['code'])}[/bold]{hidden}: {_text(reason['message'])}")
        if reason["detail"]:
            console.print(f"      [dim]{_text(detail_text(reason['detail']))}[/dim]")
    if not e.blockers_complete:
        console.print(
            "  [yellow]the search for reasons hidden behind these was cut by its time budget[/yellow]"
        )


def _print_counterfactual(console: Console, cf: Counterfactual) -> None:
    budget = "" if cf.budget is None else f" of a {cf.budget:g} s budget"
    console.print(
        "\n[bold]What would have let it fit[/bold] "
        f"(found by re-running the session {cf.sessions_run} times, {cf.seconds:.1f} s{budget}):"
    )
    if cf.found:
        console.print(f"  -> {_text(cf.summary)}")
    if cf.tried:
        console.print("  tried first, and why it was not enough:" if cf.found else "  tried:")
        for attempt in cf.tried:
            console.print(f"     x {_text(attempt.change)}: {_text(attempt.why)}")
    if cf.note:
        console.print(f"  {'[yellow]' if cf.cut else ''}{_text(cf.note)}{'[/yellow]' if cf.cut else ''}")


def print_explanation(console: Console, explanation: Explanation) -> None:
    e = explanation
    _print_header(console, e)
    table = Table(title="Timeline", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("seq", "time", "session", "what"):
        table.add_column(column)
    for entry in e.timeline:
        seq = str(entry.seq)
        session = (entry.session_id or "")[:8]
        text = entry.text
        if entry.kind == "sessions" and entry.count > 1:
            seq = f"{entry.seq}..{entry.last_seq}"
            session = f"{session}..{(entry.last_session_id or '')[:8]}"
            text = f"{entry.count} sessions: {text}"
        shown = f"[red]{_text(text)}[/red]" if entry.kind == "voided" else _text(text)
        table.add_row(seq, entry.time.strftime("%Y-%m-%d %H:%M:%S"), _text(session), shown)
    console.print(table)
    if e.session is None:
        console.print(f"\n{_text(e.verdict)}")
        return
    s = e.session
    console.print(
        f"\n[bold]Session {_text(s.session_id)}[/bold] "
        f"(seq {s.seq}, input seq {s.input_seq}, now {s.now.isoformat()})"
    )
    console.print(f"  verdict: {_text(e.verdict)}")
    _print_blockers(console, e)
    if e.counterfactual is not None:
        _print_counterfactual(console, e.counterfactual)


def print_session(console: Console, view: SessionView) -> None:
    doc = view.to_json()
    console.print(
        f"[bold]Session {_text(doc['session'])}[/bold] seq {doc['seq']}, "
        f"input seq {doc['inputSeq']}, now {_text(doc['now'])}"
    )
    console.print(
        f"  leader epoch {doc['leaderEpoch']}, config version {doc['configVersion']}, "
        f"logic flags {_text(doc['logicFlags'] or 'none')}"
    )
    counts = doc["input"]
    tasks = _text(", ".join(f"{n} {k}" for k, n in counts["tasks"].items()) or "no tasks")
    console.print(
        f"  input: {counts['nodes']} nodes, {counts['queues']} queues, "
        f"{counts['priorityClasses']} priority classes, "
        f"{counts['jobs']} jobs ({tasks})"
    )
    status = "[green]verified[/green]" if doc["verified"] else f"[red]{_text(doc['divergence'])}[/red]"
    console.print(f"  re-run: {status}")
    table = Table(title="Decisions", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("#", "kind", "task / job", "node", "detail", "re-derived"):
        table.add_column(column)
    for d in doc["decisions"]:
        detail = ""
        if d["kind"] == "evict":
            detail = f"{d['action']} for {d['preemptor_task']} ({d['rule']})"
        table.add_row(
            str(d["position"]),
            _text(d["kind"]),
            _text(d.get("task") or d["job"]),
            _text(d.get("node", "")),
            _text(detail),
            "yes" if d["rederived"] else "[red]no[/red]",
        )
    console.print(table)
    if doc["pending"]:
        console.print("[bold]Pending[/bold]")
        for p in doc["pending"]:
            console.print(
                f"  {_text(p['job'])}: "
                + "; ".join(_text(f"{r['code']}: {r['message']}") for r in p["reasons"])
            )
    console.print("[bold]Trace[/bold]")
    for step in doc["trace"]:
        fields = ", ".join(f"{k}={v}" for k, v in step.items() if k != "step")
        console.print(f"  {_text(step['step'])}: {_text(fields)}")


def print_verify(console: Console, report: VerifyReport) -> None:
    if report.chain:
        console.print(f"chain: {_text(report.chain)}", highlight=False)
    console.print(f"checkpoints: {_text(report.checkpoints)}", highlight=False)
    for warning in report.warnings:
        console.print(f"[yellow]warning: {_text(str(warning))}[/yellow]")
    if report.ok:
        console.print(
            f"[green]OK[/green]: hash chain of {report.events} events holds; "
            f"{report.sessions} sessions re-derive (input digest, decisions)"
        )
        return
    for divergence in report.divergences:
        console.print(f"[red]{_text(str(divergence))}[/red]")
    console.print(
        f"{len(report.divergences)} divergence(s); {report.events} events, {report.sessions} sessions checked"
    )


def _share(before: QueueShare, after: QueueShare) -> str:
    return f"{before.share:.2f} -> {after.share:.2f}"


def _verified(row: EvictionRow) -> str:
    shown = "[green]verified[/green]" if row.verified else "[red]not verified[/red]"
    return shown + (f" (voided: {_text(row.voided)})" if row.voided else "")


def _print_audit_blocks(console: Console, rows: Sequence[EvictionRow]) -> None:
    """One short block per eviction: what happened on one line, then who lost and who gained."""
    console.print(f"{len(rows)} eviction(s)")
    for r in rows:
        console.print(
            f"\n[bold]{r.time.strftime('%Y-%m-%d %H:%M:%S')}[/bold]  {_text(r.action)}  "
            f"session {_text(r.session_id[:8])}  seq {r.seq}#{r.position}  {_verified(r)}"
        )
        console.print(
            f"  victim     {_text(r.victim_task)} on {_text(r.node)}  queue {_text(r.victim_queue)}, "
            f"prio {r.victim_priority}, share {_share(r.victim_share_before, r.victim_share_after)}",
            highlight=False,
        )
        console.print(
            f"  preemptor  {_text(r.preemptor_task)}  queue {_text(r.preemptor_queue)}, "
            f"prio {r.preemptor_priority}, share {_share(r.preemptor_share_before, r.preemptor_share_after)}",
            highlight=False,
        )
        console.print(f"  rule       {_text(r.rule)}", highlight=False)


def print_audit(console: Console, rows: Sequence[EvictionRow], output_format: str) -> None:
    """``table``: a block per eviction; ``wide``: one row each; ``json``; ``csv``."""
    if output_format == "json":
        console.out(dump_json({"items": [r.to_json() for r in rows]}), highlight=False)
        return
    if output_format == "csv":
        console.out(rows_to_csv(rows), end="", highlight=False)
        return
    if output_format == "table":
        _print_audit_blocks(console, rows)
        return
    table = Table(title=f"{len(rows)} eviction(s)", title_justify="left", show_edge=False, pad_edge=False)
    for column in (
        "time", "session", "seq", "action", "victim", "prio", "preemptor", "prio", "rule",
        "victim queue share", "preemptor queue share", "verified",
    ):  # fmt: skip
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.time.strftime("%Y-%m-%d %H:%M:%S"),
            _text(r.session_id[:8]),
            f"{r.seq}#{r.position}",
            _text(r.action),
            _text(f"{r.victim_task} ({r.victim_queue}) on {r.node}"),
            str(r.victim_priority),
            _text(f"{r.preemptor_task} ({r.preemptor_queue})"),
            str(r.preemptor_priority),
            _text(r.rule),
            _share(r.victim_share_before, r.victim_share_after),
            _share(r.preemptor_share_before, r.preemptor_share_after),
            _verified(r),
        )
    console.print(table)


def print_actions(console: Console, rows: Sequence[ActionRow], output_format: str) -> None:
    """``table``: one row per action; ``csv``."""
    if output_format == "csv":
        console.out(actions_to_csv(rows), end="", highlight=False)
        return
    table = Table(title=f"{len(rows)} action(s)", title_justify="left", show_edge=False, pad_edge=False)
    for column in ("seq", "time", "principal", "action", "object", "detail"):
        table.add_column(column)
    for r in rows:
        who = (
            "(unsigned)" if r.principal is None else r.principal if r.signed else f"{r.principal} (unsigned)"
        )
        table.add_row(
            str(r.seq),
            r.time.strftime("%Y-%m-%d %H:%M:%S"),
            _text(who),
            r.action,
            _text(r.object),
            _text(r.detail),
        )
    console.print(table)
