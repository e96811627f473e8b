"""``python bench/<script>.py`` puts bench/ first on sys.path: no script may shadow a Tephra package."""

from __future__ import annotations

from pathlib import Path

from tests.test_architecture import PACKAGES

ROOT = Path(__file__).resolve().parents[1]


def test_no_bench_script_is_named_like_a_package() -> None:
    scripts = {path.stem for path in (ROOT / "bench").glob("*.py")}
    assert scripts, "no bench scripts found"
    assert not scripts & set(PACKAGES), f"rename bench/{sorted(scripts & set(PACKAGES))}.py"
