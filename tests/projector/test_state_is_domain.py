"""The fold and its state are plain typed domain code (issue 21, "a typed fold").

The state imports nothing of the archive's format nor a serialiser; neither
module reads a model's ``__dict__``; statuses are enums whose text is what
the rows and snapshots have always shown.
"""

from __future__ import annotations

import ast
from pathlib import Path

from projector.state import JobPhase, QueueStatus, TaskStatus

_PROJECTOR = Path(__file__).resolve().parents[2] / "projector"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
    return found


def test_the_state_imports_only_the_event_models_and_the_standard_library() -> None:
    imports = _imports(_PROJECTOR / "state.py")
    assert imports <= {
        "__future__",
        "collections.abc",
        "dataclasses",
        "datetime",
        "enum",
        "heapq",
        "typing",
        "events.models",
    }


def test_the_fold_imports_only_the_event_models_and_the_state() -> None:
    imports = _imports(_PROJECTOR / "fold.py")
    assert imports <= {
        "__future__",
        "dataclasses",
        "datetime",
        "heapq",
        "typing",
        "events.models",
        # Ed25519 checks of sessions against the leadership in the log: pure, deterministic.
        "events.signing",
        "projector.state",
    }


def test_neither_reads_a_models_internals() -> None:
    for name in ("state.py", "fold.py"):
        text = (_PROJECTOR / name).read_text(encoding="utf-8")
        assert "__dict__" not in text, name
        assert "vars(" not in text, name


def test_the_statuses_keep_their_text() -> None:
    assert [s.value for s in TaskStatus] == [
        "Pending",
        "Bound",
        "Running",
        "Releasing",
        "Succeeded",
        "Failed",
    ]
    assert [p.value for p in JobPhase] == [
        "Pending",
        "Inqueue",
        "Running",
        "Completed",
        "Failed",
        "Cancelled",
    ]
    assert [q.value for q in QueueStatus] == ["Open", "Closed", "Closing"]
    assert str(TaskStatus.RUNNING) == f"{TaskStatus.RUNNING}" == "Running"
