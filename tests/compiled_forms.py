"""Running code in a chosen form of the compiled units (setup.py, events/native.py), for their tests."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The file suffix of this interpreter's extension modules.
EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]


def run_python(*args: str, interpreted: bool) -> str:
    """stdout of ``python *args`` in the repository: compiled units as installed, or their sources."""
    env = {k: v for k, v in os.environ.items() if k != "TEPHRA_INTERPRETED_CORE"}
    if interpreted:
        env["TEPHRA_INTERPRETED_CORE"] = "1"
    result = subprocess.run(  # noqa: S603 - our own interpreter and modules
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO, env=env, check=True, timeout=300
    )
    return result.stdout
