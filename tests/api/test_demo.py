"""``tephra demo`` exits 0, tells the story, and leaves nothing running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.test_up import environment, processes_mentioning

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_demo_binds_preempts_explains_the_pending_gang_and_cleans_up(tmp_path: Path) -> None:
    env = environment(tmp_path)  # the demo ignores TEPHRA_DATA_DIR: it runs in a fresh temporary dir
    result = subprocess.run(
        [sys.executable, "-m", "api.cli", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "bind   default/demo-training-worker-0" in out
    assert "bind   default/demo-training-worker-1" in out
    assert "(preempt for default/urgent-train" in out
    assert "bind   default/urgent-train-worker-0" in out
    assert "Why default/llm-pretrain did not move:" in out
    assert "default/llm-pretrain is Pending." in out
    assert "needs 32 nvidia.com/gpu at once; the cluster has 24 in total." in out
    assert "$ replay explain default/llm-pretrain" in out
    assert processes_mentioning("tephra-demo-") == []
