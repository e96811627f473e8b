"""The import rules of design §2, enforced on the source with ``ast``.

Each top-level package may depend only on the packages below it; the pure
session engine (``scheduler/core``) additionally imports no I/O and reads no
ambient state: no clock, no module-level random, no uuid1/uuid4, no
environment.  ``now``, configuration and seeds are its inputs.

The checker is a plain function of (source, module name), so the tests at
the bottom feed it forbidden snippets and prove it can fail.  Packages that
do not exist yet are skipped.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "projector", "scheduler", "replay", "api", "kube")

ANY = None  # "no restriction" for a Rule field

# The standard library the pure core may use: computation only, no I/O, no
# process or interpreter state.  `datetime`, `random` and `uuid` are here for
# their types (datetime, timedelta, Random, uuid5); the ambient calls they
# also offer are banned below.
PURE_STDLIB = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "copy",
        "dataclasses",
        "datetime",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "graphlib",
        "hashlib",
        "heapq",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "random",
        "re",
        "statistics",
        "string",
        "struct",
        "textwrap",
        "types",
        "typing",
        "uuid",
        "zoneinfo",
    }
)

# Names that read the clock, global randomness, host identity or the
# environment.  Matched as dotted prefixes after resolving import aliases.
AMBIENT_CALLS = (
    "datetime.datetime.now",
    "datetime.datetime.utcnow",
    "datetime.datetime.today",
    "datetime.datetime.fromtimestamp",
    "datetime.datetime.utcfromtimestamp",
    "datetime.date.today",
    "datetime.date.fromtimestamp",
    "time",
    "uuid.uuid1",
    "uuid.uuid4",
    "uuid.uuid6",
    "uuid.uuid7",
    "uuid.getnode",
    "os",
    "sys",
)
# `random.Random(seed)` passed in or built from an input seed is fine; the
# module-level functions share one hidden, time-seeded generator.
RANDOM_ALLOWED = frozenset({"random.Random"})


@dataclass(frozen=True)
class Rule:
    """What modules under ``package`` may import.

    ``first_party``: allowed Tephra packages (dotted prefixes).
    ``third_party``: allowed distributions' top-level modules, or ANY.
    ``stdlib``: allowed standard-library top-level modules, or ANY.
    ``pure``: also ban the ambient calls listed in AMBIENT_CALLS.
    """

    package: str
    first_party: frozenset[str] | None
    third_party: frozenset[str] | None = ANY
    stdlib: frozenset[str] | None = ANY
    pure: bool = False


RULES = (
    # The contract other services produce against: nothing but pydantic
    # (pydantic_core is pydantic's own engine, used for strict JSON parsing;
    # annotated_types its constraint metadata), and orjson, the canonical
    # encoder's fast path (events/canonical.py, held to the json module's bytes),
    # and cryptography, the Ed25519 signatures every service checks (events/signing.py).
    Rule(
        "events",
        frozenset({"events"}),
        third_party=frozenset({"pydantic", "pydantic_core", "annotated_types", "orjson", "cryptography"}),
    ),
    Rule("projector", frozenset({"events", "projector"})),
    Rule("scheduler", frozenset({"events", "projector", "scheduler"})),
    Rule(
        "scheduler.core",
        frozenset({"events", "scheduler.core"}),
        third_party=frozenset({"pydantic", "pydantic_core", "numpy"}),
        stdlib=PURE_STDLIB,
        pure=True,
    ),
    # The one bridge from the fold's ClusterState to the core's snapshot: pure,
    # so the live scheduler and replay derive the same session input.
    Rule(
        "scheduler.snapshot_builder",
        frozenset({"events", "projector.state", "scheduler.core", "scheduler.snapshot_builder"}),
        third_party=frozenset(),
        stdlib=PURE_STDLIB,
        pure=True,
    ),
    Rule(
        "replay",
        frozenset({"events", "projector", "scheduler.core", "scheduler.snapshot_builder", "replay"}),
    ),
    Rule("kube", frozenset({"events", "projector", "kube"})),
    Rule("api", ANY),
)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_for(module: str) -> Rule:
    """The most specific rule whose package contains ``module``."""
    matching = [rule for rule in RULES if _within(module, rule.package)]
    if not matching:
        raise LookupError(f"no import rule for module {module!r}")
    return max(matching, key=lambda rule: rule.package.count("."))


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a (possibly relative) ``from ... import`` names."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str, dict[str, str]]]:
    """(line, imported module, {local name: dotted origin}) for every import statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                origin = alias.name if alias.asname else alias.name.split(".")[0]
                yield node.lineno, alias.name, {local: origin}
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, module, is_package)
            names = {alias.asname or alias.name: f"{source}.{alias.name}" for alias in node.names}
            yield node.lineno, source, names


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


def _is_first_party(name: str) -> bool:
    return name.split(".", maxsplit=1)[0] in PACKAGES


def _import_violation(rule: Rule, imported: str) -> str | None:
    top = imported.split(".", maxsplit=1)[0]
    if _is_first_party(imported):
        if rule.first_party is not ANY and not any(_within(imported, p) for p in rule.first_party):
            return f"imports {imported}; {rule.package} may import only {', '.join(sorted(rule.first_party))}"
        return None
    if top in sys.stdlib_module_names:
        if rule.stdlib is not ANY and top not in rule.stdlib:
            return f"imports {imported}; {rule.package} may use only pure standard-library modules"
        return None
    if rule.third_party is not ANY and top not in rule.third_party:
        allowed = ", ".join(sorted(rule.third_party)) or "none"
        return f"imports {imported}; third-party modules allowed in {rule.package}: {allowed}"
    return None


def _ambient(origin: str) -> bool:
    if origin.startswith("random.") and origin not in RANDOM_ALLOWED:
        return not any(_within(origin, allowed) for allowed in RANDOM_ALLOWED)
    return any(_within(origin, banned) for banned in AMBIENT_CALLS)


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every breach of the import rules in one module's source, as "line: message"."""
    rule = rule_for(module)
    tree = ast.parse(source)
    found: list[str] = []
    aliases: dict[str, str] = {}
    for line, imported, names in _imports(tree, module, is_package):
        if imported == "__future__":
            continue
        problem = _import_violation(rule, imported)
        if problem is None and rule.pure:
            # `from random import random` is the ambient call itself.
            bad = sorted(origin for origin in names.values() if _ambient(origin) and origin != imported)
            if bad:
                problem = f"imports {', '.join(bad)}, which reads ambient state"
        if problem:
            found.append(f"{line}: {problem}")
        aliases.update(names)
    if rule.pure:
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute | ast.Name) or not isinstance(node.ctx, ast.Load):
                continue
            parts = _dotted(node)
            if parts is None or parts[0] not in aliases:
                continue
            origin = ".".join([aliases[parts[0]], *parts[1:]])
            if _ambient(origin) and origin not in aliases.values():
                found.append(f"{node.lineno}: uses {origin}, which reads ambient state; pass it in instead")
    # An attribute chain is visited once per prefix (a.b.c, a.b): keep one report per line.
    return sorted(set(found), key=lambda text: (int(text.split(":")[0]), text))


def _modules() -> Iterator[tuple[Path, str, bool]]:
    for package in PACKAGES:
        folder = ROOT / package
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(ROOT).with_suffix("")
            parts = relative.parts
            is_package = parts[-1] == "__init__"
            yield path, ".".join(parts[:-1] if is_package else parts), is_package


MODULES = list(_modules())


@pytest.mark.parametrize(
    ("path", "module", "is_package"),
    MODULES,
    ids=[str(path.relative_to(ROOT)) for path, _, _ in MODULES],
)
def test_module_respects_the_import_rules(path: Path, module: str, is_package: bool) -> None:
    problems = violations(path.read_text(encoding="utf-8"), module, is_package=is_package)
    assert not problems, f"{path.relative_to(ROOT)}:\n  " + "\n  ".join(problems)


def test_every_package_has_a_rule() -> None:
    for package in PACKAGES:
        rule_for(package)


# ---------------------------------------------------------------------------
# the checker itself: it must catch what it claims to catch
# ---------------------------------------------------------------------------

FORBIDDEN = [
    ("events.models", "import aiokafka"),
    ("events.models", "from scheduler.core import session"),
    ("projector.service", "import scheduler"),
    ("projector.service", "from api.settings import Settings"),
    ("projector.service", "from replay import verify"),
    ("projector.service", "import kube.bridge"),
    ("replay.verify", "from scheduler.service import loop"),
    ("replay.verify", "import api"),
    ("kube.bridge", "from scheduler.core import session"),
    ("scheduler.service.loop", "from replay import verify"),
    ("scheduler.core.session", "import asyncio"),
    ("scheduler.core.session", "import logging"),
    ("scheduler.core.session", "import os"),
    ("scheduler.core.session", "from os import environ"),
    ("scheduler.core.session", "import time"),
    ("scheduler.core.session", "from time import monotonic"),
    ("scheduler.core.session", "import socket"),
    ("scheduler.core.session", "import subprocess"),
    ("scheduler.core.session", "import threading"),
    ("scheduler.core.session", "import asyncpg"),
    ("scheduler.core.session", "import kubernetes_asyncio"),
    ("scheduler.core.session", "from opentelemetry import trace"),
    ("scheduler.core.session", "from projector.state import ClusterState"),
    ("scheduler.core.session", "from scheduler.service import loop"),
    ("scheduler.core.actions.allocate", "from ...service import loop"),
    ("scheduler.core.session", "from datetime import datetime\nnow = datetime.now()"),
    ("scheduler.core.session", "import datetime as dt\nnow = dt.datetime.now(dt.UTC)"),
    ("scheduler.core.session", "from datetime import datetime\nnow = datetime.utcnow()"),
    ("scheduler.core.session", "from datetime import date\ntoday = date.today()"),
    ("scheduler.core.session", "import random\nx = random.random()"),
    ("scheduler.core.session", "import random\nrandom.shuffle(items)"),
    ("scheduler.core.session", "from random import choice"),
    ("scheduler.core.session", "import random as r\nrng = r.SystemRandom()"),
    ("scheduler.core.session", "import uuid\nnew_id = uuid.uuid4()"),
    ("scheduler.core.session", "from uuid import uuid1"),
    ("scheduler.core.session", "def clock(now=None):\n    import time\n    return time.time()"),
]

ALLOWED = [
    ("events.serde", "import json\nfrom pydantic import BaseModel\nfrom pydantic_core import from_json"),
    ("events.serde", "from .models import Event"),
    ("projector.service", "import asyncpg\nimport aiokafka\nfrom events.models import Event"),
    (
        "scheduler.service.loop",
        "import asyncio\nfrom projector.store import load\nfrom scheduler.core import run",
    ),
    ("replay.verify", "from scheduler.core.session import run_session\nfrom projector.fold import apply"),
    ("kube.sim", "from projector.fold import apply\nfrom events.models import TaskStarted"),
    ("api.cli", "import os\nimport scheduler.service\nimport replay\nimport kube"),
    (
        "scheduler.core.session",
        "from __future__ import annotations\nimport numpy as np\nfrom events import models",
    ),
    ("scheduler.core.session", "from . import plugins\nfrom .framework import Action"),
    (
        "scheduler.core.session",
        "from datetime import UTC, datetime, timedelta\nlater = now + timedelta(seconds=1)",
    ),
    (
        "scheduler.core.session",
        "import random\ndef run(seed):\n    rng = random.Random(seed)\n    return rng.random()",
    ),
    ("scheduler.core.session", "import uuid\nNS = uuid.UUID(int=0)\nid_ = uuid.uuid5(NS, 'session:1')"),
    ("scheduler.core.session", "def step(clock):\n    return clock.time()"),
]


@pytest.mark.parametrize(
    ("module", "source"), FORBIDDEN, ids=[f"{m}: {s.splitlines()[-1]}" for m, s in FORBIDDEN]
)
def test_checker_rejects(module: str, source: str) -> None:
    assert violations(source, module), f"not caught in {module}: {source!r}"


@pytest.mark.parametrize(
    ("module", "source"), ALLOWED, ids=[f"{m}: {s.splitlines()[-1]}" for m, s in ALLOWED]
)
def test_checker_accepts(module: str, source: str) -> None:
    assert violations(source, module) == []


def test_checker_reports_file_line_and_reason() -> None:
    problems = violations("import json\n\nimport asyncio\n", "scheduler.core.session")
    assert problems == ["3: imports asyncio; scheduler.core may use only pure standard-library modules"]


def test_relative_imports_resolve_from_a_package_init() -> None:
    # In scheduler/core/__init__.py, `from ..service import x` is scheduler.service.
    assert violations("from ..service import loop", "scheduler.core", is_package=True)
    assert violations("from .actions import allocate", "scheduler.core", is_package=True) == []


# ---------------------------------------------------------------------------
# asyncio.wait_for is not used by the services


def _wait_for_calls(source: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "wait_for"
        and isinstance(node.value, ast.Name)
        and node.value.id == "asyncio"
    ]


def test_services_wait_with_asyncio_timeout_not_wait_for() -> None:
    """On Python 3.11 wait_for swallows a cancellation that arrives as its inner wait completes.

    A service loop that waits that way can outlive SIGTERM; ``asyncio.timeout`` does not lose it.
    """
    found = {
        str(path.relative_to(ROOT)): lines
        for path, _, _ in MODULES
        if (lines := _wait_for_calls(path.read_text(encoding="utf-8")))
    }
    assert not found, f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for in {found}"


def test_the_wait_for_check_finds_a_call() -> None:
    assert _wait_for_calls("import asyncio\nasync def f(e):\n    await asyncio.wait_for(e.wait(), 1)\n") == [
        3
    ]
