"""Where the dev cluster's binaries are looked for, and what a missing one says."""

from __future__ import annotations

from pathlib import Path

import pytest

from kube.dev.binaries import BUILD_SCRIPT, BinaryMissingError, cache_dir, etcd_binary, find_binaries


def test_the_cache_is_under_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "tephra" / "kube" / "v1.20.2"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "tephra" / "kube" / "v1.20.2"


def test_missing_binaries_are_named_with_the_command_that_builds_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (cache_dir()).mkdir(parents=True)
    (cache_dir() / "kube-apiserver").write_text("")  # present but not executable: missing
    with pytest.raises(
        BinaryMissingError, match=r"kube-apiserver and kube-scheduler v1\.20\.2 not found"
    ) as info:
        find_binaries()
    assert "python -m kube.dev.binaries" in str(info.value)


def test_etcd_comes_from_the_kube_extra() -> None:
    assert etcd_binary().name == "etcd"
    assert BUILD_SCRIPT.is_file()
