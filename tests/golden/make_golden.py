"""Write the golden archives: ``python -m tests.golden.make_golden [--check]``.

Each scenario of :mod:`tests.golden.scenarios` is played by a fresh
:class:`~tests.golden.history.LiveRun` (the production fold, snapshot
builder, session and session publisher) and dumped as ``<name>.jsonl`` plus
``<name>.expect.json``.  Regenerate only when a change to the core or the
archive format is meant to alter history; ``--check`` reports whether the
committed files are what the current code would write (it never fails CI:
old goldens must keep replaying, that is their point).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from events.models import SessionCommitted
from tests.golden.archive import GOLDEN_DIR, write_golden
from tests.golden.history import LiveRun
from tests.golden.scenarios import DIVERGED_AT, SCENARIOS, Scenario


def play(scenario: Scenario) -> tuple[LiveRun, dict[str, Any]]:
    run = LiveRun()
    scenario.build(run)
    markers = [r for r in run.rows if isinstance(r.event, SessionCommitted)]
    expect: dict[str, Any] = {
        "scenario": scenario.name,
        "events": len(run.rows),
        "sessions": [{"id": r.event.data.session_id, "seq": r.seq} for r in markers],  # type: ignore[union-attr]
        "verify": {"ok": scenario.expect_code is None},
    }
    if scenario.expect_code is not None:
        index, _ = DIVERGED_AT
        marker = markers[index]
        decisions = run.results[run.sessions[index]].events()
        position = next(i for i, d in enumerate(decisions) if d.kind == "bind")
        expect["verify"] = {
            "ok": False,
            "code": scenario.expect_code,
            "session": run.sessions[index],
            "seq": marker.seq,
            "position": position,
        }
    return run, expect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the committed files, write nothing"
    )
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR)
    args = parser.parse_args(argv)
    stale = []
    for scenario in SCENARIOS:
        run, expect = play(scenario)
        rows = [row.to_json() for row in run.rows]
        if args.check:
            scratch = Path(args.out) / ".check"
            scratch.mkdir(exist_ok=True)
            for written in write_golden(scratch, scenario.name, rows, expect):
                committed = Path(args.out) / written.name
                if not committed.exists() or committed.read_bytes() != written.read_bytes():
                    stale.append(committed.name)
                written.unlink()
            scratch.rmdir()
            continue
        for path in write_golden(args.out, scenario.name, rows, expect):
            print(f"{path}  ({len(rows)} events, {len(expect['sessions'])} sessions)")
    if args.check:
        print("stale: " + ", ".join(stale) if stale else "golden archives are current")
        return 1 if stale else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
