"""Shared plumbing for plugins: option, tier and a registration shortcut."""

from __future__ import annotations

from typing import Any

from scheduler.core.config import PluginOption
from scheduler.core.framework import Session

__all__ = ["PluginBase"]


class PluginBase:
    name = ""

    def __init__(self, option: PluginOption, tier: int) -> None:
        self.option = option
        self.tier = tier

    def register(self, ssn: Session, point: str, fn: Any, row_fn: Any = None) -> None:
        ssn.register(self.option, point, fn, self.tier, row_fn)

    def on_session_open(self, ssn: Session) -> None:
        raise NotImplementedError

    def on_session_close(self, ssn: Session) -> None:
        return None

    def argument(self, key: str, default: Any) -> Any:
        return self.option.arguments.get(key, default)
