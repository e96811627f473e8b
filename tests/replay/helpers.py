"""Running the ``replay`` console script the way a user does, under a chosen PYTHONHASHSEED."""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["SEEDS", "run_replay"]

#: Two hash seeds: a set iterated unsorted anywhere in replay would show as different output.
SEEDS = ("0", "4242")


def run_replay(
    database_url: str, *args: str, seed: str = "0", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "TEPHRA_DATABASE_URL": database_url, "PYTHONHASHSEED": seed, **(env or {})}
    return subprocess.run(  # noqa: S603  (our own console script)
        [sys.executable, "-m", "replay.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
